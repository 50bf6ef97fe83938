"""Logging in and out: a token given once to the login form opens a browser session kept
in an HttpOnly cookie; logging out closes it."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from retold.ui.access import Viewer
from retold.ui.guard import COOKIE, HEADERS, PageContext, from_here

__all__ = ["routes"]


async def login_form(ctx: PageContext, request: Request) -> Response:
    return ctx.page("login.html", viewer=None)


async def login(ctx: PageContext, request: Request) -> Response:
    """Open a session for a known token; a login posted from another site is refused."""
    if not from_here(request):
        return ctx.page("error.html", 403, viewer=None,
                        message="refused: the login did not come from this site")
    form = await request.form()
    viewer = ctx.tokens.viewer(str(form.get("token", "")).strip())
    if viewer is None:
        return ctx.page("login.html", 401, viewer=None,
                        message="that token is not one this inspector accepts")
    session_id, _ = ctx.sessions.open(viewer)
    response = RedirectResponse("/scopes", status_code=303, headers=HEADERS)
    response.set_cookie(COOKIE, session_id, httponly=True, samesite="strict",
                        secure=request.url.scheme == "https", path="/")
    return response


async def logout(ctx: PageContext, request: Request, viewer: Viewer, csrf: str | None) -> Response:
    ctx.sessions.close(request.cookies.get(COOKIE))
    response = RedirectResponse("/login", status_code=303, headers=HEADERS)
    response.delete_cookie(COOKIE, path="/")
    return response


def routes(ctx: PageContext) -> list[Route]:
    return [
        Route("/login", ctx.unguarded(login_form), methods=["GET"]),
        Route("/login", ctx.unguarded(login), methods=["POST"]),
        Route("/logout", ctx.guarded(logout, changes=True), methods=["POST"]),
    ]
