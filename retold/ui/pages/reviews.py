"""The review queue: records waiting for a person's activation decision, each resolved
from its row through the activator."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from retold.ui.access import Viewer
from retold.ui.guard import PageContext, back
from retold.ui.views import RESOLUTIONS

__all__ = ["routes"]


async def review_list(ctx: PageContext, request: Request, viewer: Viewer, csrf: str | None) -> Response:
    found = await run_in_threadpool(ctx.inspector.reviews, viewer, ctx.rt.config.ui.page_size)
    return ctx.page("reviews.html", viewer=viewer, csrf=csrf, reviews=found, resolutions=RESOLUTIONS,
                    done=request.query_params.get("done"), failed=request.query_params.get("failed"))


async def resolve(ctx: PageContext, request: Request, viewer: Viewer, csrf: str | None) -> Response:
    form = await request.form()
    outcome = await run_in_threadpool(ctx.inspector.resolve, viewer, request.path_params["record_id"],
                                      str(form.get("resolution", "")), str(form.get("reason", "")))
    if outcome.code == "not_found":
        return ctx.page("error.html", 404, viewer=viewer, csrf=csrf, message="no such review")
    note = outcome.message if outcome.ok else f"{outcome.code}: {outcome.message}"
    return back("/reviews", outcome.ok, note)


def routes(ctx: PageContext) -> list[Route]:
    return [
        Route("/reviews", ctx.guarded(review_list), methods=["GET"]),
        Route("/reviews/{record_id}", ctx.guarded(resolve, changes=True), methods=["POST"]),
    ]
