"""What every inspector page shares: who is looking, the guard each route passes, and the
renderer that puts the security headers on every answer.

Every request names its viewer (a bearer token, or the session cookie a login set) before
any store read; a request without one is sent to the login page (a browser) or answered
401. Every change is a POST; one that arrives with the session cookie must carry the
session's CSRF token, and one whose ``Origin`` is another site is refused whatever it
carries. A store found damaged while a page is read answers 503 rather than a page that
could be short without saying so. Pages are never cached and never framed.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from retold.config.tokens import tokens_for
from retold.errors import StoreCorruptError
from retold.quality.golden import GoldenFile
from retold.runtime import Runtime
from retold.ui.access import Sessions, TokenBook, Viewer, same_token
from retold.ui.fields import readable_fields
from retold.ui.views import Inspector

__all__ = ["COOKIE", "DAMAGED", "HEADERS", "Endpoint", "Handler", "OpenHandler", "PageContext", "back",
           "from_here"]

log = logging.getLogger(__name__)

COOKIE = "retold_ui_session"
DAMAGED = ("memory storage is damaged, so nothing is shown rather than part of it: an operator runs"
           " `retold check` to find the damage")
HEADERS = {
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",  # "no-referrer" makes a browser send Origin: null on our own forms
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; form-action 'self';"
                               " frame-ancestors 'none'",
}

Endpoint = Callable[[Request], Awaitable[Response]]
# A guarded page: the context, the request, its viewer and (for a browser session) the
# session's CSRF token, which a page puts in each form it shows.
Handler = Callable[["PageContext", Request, Viewer, "str | None"], Awaitable[Response]]
# A page anyone may open: the login form, and the login it posts.
OpenHandler = Callable[["PageContext", Request], Awaitable[Response]]


class PageContext:
    """What the pages of one inspector share: the runtime, its reads and actions, the
    templates, the tokens let in, the browser sessions open, and the golden set being
    labelled, when ``retold ui --golden`` named one."""

    def __init__(self, rt: Runtime, golden: GoldenFile | None = None) -> None:
        self.rt = rt
        self.golden = golden
        self.inspector = Inspector(rt, rt.config.ui.page_size)
        self.tokens = TokenBook(tokens_for(rt.config.ui.tokens, rt.tenant))
        self.sessions = Sessions()
        self.templates = Environment(loader=PackageLoader("retold.ui"),
                                     autoescape=select_autoescape(default=True))
        self.templates.filters["fields"] = readable_fields

    def page(self, name: str, status: int = 200, headers: dict[str, str] | None = None,
             **context: Any) -> HTMLResponse:
        """The template ``name`` rendered with ``context``, with the security headers."""
        html = self.templates.get_template(name).render(**context)
        return HTMLResponse(html, status_code=status, headers=HEADERS | (headers or {}))

    def viewer_of(self, request: Request) -> tuple[Viewer, str | None] | None:
        """The request's viewer and, for a browser session, its CSRF token."""
        bearer = _bearer(request)
        if bearer is not None:
            found = self.tokens.viewer(bearer)
            return None if found is None else (found, None)
        session = self.sessions.get(request.cookies.get(COOKIE))
        return None if session is None else (session.viewer, session.csrf)

    def guarded(self, handler: Handler, *, changes: bool = False) -> Endpoint:
        """``handler`` behind the guard: run only for a known viewer and, when it
        ``changes`` something, only for a request from one of our own pages."""
        async def endpoint(request: Request) -> Response:
            seen = self.viewer_of(request)
            if seen is None:
                # A script that sent a wrong token is told so; a person at a browser is
                # shown where to log in.
                if _bearer(request) is None and _is_browser(request):
                    return RedirectResponse("/login", status_code=303, headers=HEADERS)
                return self.page("error.html", 401, viewer=None,
                                 message="a token is needed: log in at /login",
                                 headers={"WWW-Authenticate": 'Bearer realm="retold inspector"'})
            viewer, csrf = seen
            if changes and not await _same_site(request, csrf):
                return self.page("error.html", 403, viewer=viewer, csrf=csrf,
                                 message="refused: this change did not come from an inspector page")
            try:
                return await handler(self, request, viewer, csrf)
            except StoreCorruptError:
                # A page read off a damaged store could be short without saying so; the
                # operator's log has the path and the cause.
                log.exception("inspector: %s %s", request.method, request.url.path)
                return self.page("error.html", 503, viewer=viewer, csrf=csrf, message=DAMAGED)
        return endpoint

    def unguarded(self, handler: OpenHandler) -> Endpoint:
        """``handler`` for anyone: only the login pages, which check what they are sent."""
        async def endpoint(request: Request) -> Response:
            return await handler(self, request)
        return endpoint


def back(path: str, ok: bool, note: str) -> Response:
    """After a change, back to the page it was made on, saying how it went."""
    return RedirectResponse(f"{path}?" + urlencode({"done" if ok else "failed": note}), status_code=303,
                            headers=HEADERS)


def from_here(request: Request) -> bool:
    """False when the browser says the request started on another site (its ``Origin``,
    or failing that its ``Sec-Fetch-Site``); a script that sends neither is taken."""
    origin = request.headers.get("origin")
    if origin is not None:
        return origin == f"{request.url.scheme}://{request.url.netloc}"
    return request.headers.get("sec-fetch-site") in (None, "same-origin", "none")


def _bearer(request: Request) -> str | None:
    """The token of an ``Authorization: Bearer`` header; None without one. Another scheme
    (a proxy's Basic login in front of the inspector) is not ours to read, so it neither
    names a viewer nor hides the session cookie."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


def _is_browser(request: Request) -> bool:
    """Whether a person's browser is opening a page: it asks for HTML, or says it is
    navigating (``Sec-Fetch-Mode``), which a browser sends whatever ``Accept`` it chose."""
    return ("text/html" in request.headers.get("accept", "")
            or request.headers.get("sec-fetch-mode") == "navigate")


async def _same_site(request: Request, csrf: str | None) -> bool:
    """A change is taken from a bearer request, or from a page of ours that carried the
    session's CSRF token."""
    if not from_here(request):
        return False
    if csrf is None:  # a bearer token: no other site can make a browser send one
        return True
    form = await request.form()
    given = form.get("csrf")
    return same_token(given if isinstance(given, str) else None, csrf)
