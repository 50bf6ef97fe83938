"""Grants and memberships: who reads and writes which shared scope, and (for an operator)
the forms that grant, revoke, add or remove a member."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from retold.ui.access import Viewer
from retold.ui.guard import PageContext, back

__all__ = ["routes"]


async def access(ctx: PageContext, request: Request, viewer: Viewer, csrf: str | None) -> Response:
    grants, members = await run_in_threadpool(ctx.inspector.access, viewer)
    return ctx.page("access.html", viewer=viewer, csrf=csrf, grants=grants, members=members,
                    done=request.query_params.get("done"), failed=request.query_params.get("failed"))


async def change_access(ctx: PageContext, request: Request, viewer: Viewer, csrf: str | None) -> Response:
    """One grant or membership change; a principal's token is refused with 403."""
    form = {k: str(v) for k, v in (await request.form()).items()}
    outcome = await run_in_threadpool(ctx.inspector.change_access, viewer, request.path_params["change"],
                                      form)
    if outcome.code == "forbidden":
        return ctx.page("error.html", 403, viewer=viewer, csrf=csrf, message=outcome.message)
    note = outcome.message if outcome.ok else f"{outcome.code}: {outcome.message}"
    return back("/access", outcome.ok, note)


def routes(ctx: PageContext) -> list[Route]:
    return [
        Route("/access", ctx.guarded(access), methods=["GET"]),
        Route("/access/{change}", ctx.guarded(change_access, changes=True), methods=["POST"]),
    ]
