"""The home page: every scope the viewer reads, with its counts."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from retold.ui.access import Viewer
from retold.ui.guard import HEADERS, PageContext

__all__ = ["routes"]


async def home(ctx: PageContext, request: Request, viewer: Viewer, csrf: str | None) -> Response:
    return RedirectResponse("/scopes", status_code=303, headers=HEADERS)


async def scopes(ctx: PageContext, request: Request, viewer: Viewer, csrf: str | None) -> Response:
    counts = await run_in_threadpool(ctx.inspector.scopes, viewer)
    return ctx.page("scopes.html", viewer=viewer, csrf=csrf, scopes=counts)


def routes(ctx: PageContext) -> list[Route]:
    return [
        Route("/", ctx.guarded(home), methods=["GET"]),
        Route("/scopes", ctx.guarded(scopes), methods=["GET"]),
    ]
