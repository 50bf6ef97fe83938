"""Sessions: the most recent ones, and one session with its turns, its profile block,
what its extraction wrote and what it spent."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from retold.ui.access import Viewer
from retold.ui.guard import PageContext

__all__ = ["routes"]


async def session_list(ctx: PageContext, request: Request, viewer: Viewer, csrf: str | None) -> Response:
    found = await run_in_threadpool(ctx.inspector.sessions, viewer, ctx.rt.config.ui.page_size)
    return ctx.page("sessions.html", viewer=viewer, csrf=csrf, sessions=found)


async def session(ctx: PageContext, request: Request, viewer: Viewer, csrf: str | None) -> Response:
    found = await run_in_threadpool(ctx.inspector.session, viewer, request.path_params["session_id"])
    if found is None:
        return ctx.page("error.html", 404, viewer=viewer, csrf=csrf, message="no such session")
    return ctx.page("session.html", viewer=viewer, csrf=csrf, **found)


def routes(ctx: PageContext) -> list[Route]:
    return [
        Route("/sessions", ctx.guarded(session_list), methods=["GET"]),
        Route("/sessions/{session_id}", ctx.guarded(session), methods=["GET"]),
    ]
