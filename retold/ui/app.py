"""The inspector's web app: server-rendered pages over one runtime, for token holders only.

Every request names its viewer (a bearer token, or the session cookie a login set) before
any store read; a request without one is sent to the login page (a browser) or answered
401. Every change is a POST; one that arrives with the session cookie must carry the
session's CSRF token, and one whose ``Origin`` is another site is refused whatever it
carries. Pages are never cached and never framed.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from retold.config.tokens import tokens_for
from retold.errors import StoreCorruptError
from retold.models import ENTITY_KINDS, RECORD_STATUSES, RECORD_TYPES, Principal, Scope
from retold.runtime import Runtime
from retold.store.browse import BrowseFilter
from retold.ui.access import Sessions, TokenBook, Viewer, same_token
from retold.ui.fields import readable_fields
from retold.ui.views import ACTIONS, RESOLUTIONS, Inspector

__all__ = ["COOKIE", "DAMAGED", "create_app"]

log = logging.getLogger(__name__)

COOKIE = "retold_ui_session"
DAMAGED = ("memory storage is damaged, so nothing is shown rather than part of it: an operator runs"
           " `retold check` to find the damage")
_HEADERS = {
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",  # "no-referrer" makes a browser send Origin: null on our own forms
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; form-action 'self';"
                               " frame-ancestors 'none'",
}

Handler = Callable[[Request, Viewer, "str | None"], Awaitable[Response]]


def create_app(rt: Runtime) -> Starlette:
    """The inspector over ``rt``, for the tokens in ``rt.config.ui.tokens`` that name its
    tenant."""
    tokens = TokenBook(tokens_for(rt.config.ui.tokens, rt.tenant))
    sessions = Sessions()
    inspector = Inspector(rt, rt.config.ui.page_size)
    templates = Environment(loader=PackageLoader("retold.ui"), autoescape=select_autoescape(default=True))
    templates.filters["fields"] = readable_fields

    def page(name: str, status: int = 200, headers: dict[str, str] | None = None,
             **context: Any) -> HTMLResponse:
        html = templates.get_template(name).render(**context)
        return HTMLResponse(html, status_code=status, headers=_HEADERS | (headers or {}))

    def viewer_of(request: Request) -> tuple[Viewer, str | None] | None:
        """The request's viewer and, for a browser session, its CSRF token."""
        bearer = _bearer(request)
        if bearer is not None:
            found = tokens.viewer(bearer)
            return None if found is None else (found, None)
        session = sessions.get(request.cookies.get(COOKIE))
        return None if session is None else (session.viewer, session.csrf)

    def guarded(handler: Handler, *, changes: bool = False) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            seen = viewer_of(request)
            if seen is None:
                # A script that sent a wrong token is told so; a person at a browser is
                # shown where to log in.
                if _bearer(request) is None and _is_browser(request):
                    return RedirectResponse("/login", status_code=303, headers=_HEADERS)
                return page("error.html", 401, viewer=None, message="a token is needed: log in at /login",
                            headers={"WWW-Authenticate": 'Bearer realm="retold inspector"'})
            viewer, csrf = seen
            if changes and not await _same_site(request, csrf):
                return page("error.html", 403, viewer=viewer, csrf=csrf,
                            message="refused: this change did not come from an inspector page")
            try:
                return await handler(request, viewer, csrf)
            except StoreCorruptError:
                # A page read off a damaged store could be short without saying so; the
                # operator's log has the path and the cause.
                log.exception("inspector: %s %s", request.method, request.url.path)
                return page("error.html", 503, viewer=viewer, csrf=csrf, message=DAMAGED)
        return endpoint

    async def login_form(request: Request) -> Response:
        return page("login.html", viewer=None)

    async def login(request: Request) -> Response:
        if not _from_here(request):
            return page("error.html", 403, viewer=None,
                        message="refused: the login did not come from this site")
        form = await request.form()
        viewer = tokens.viewer(str(form.get("token", "")).strip())
        if viewer is None:
            return page("login.html", 401, viewer=None,
                        message="that token is not one this inspector accepts")
        session_id, _ = sessions.open(viewer)
        response = RedirectResponse("/scopes", status_code=303, headers=_HEADERS)
        response.set_cookie(COOKIE, session_id, httponly=True, samesite="strict",
                            secure=request.url.scheme == "https", path="/")
        return response

    async def logout(request: Request, viewer: Viewer, csrf: str | None) -> Response:
        sessions.close(request.cookies.get(COOKIE))
        response = RedirectResponse("/login", status_code=303, headers=_HEADERS)
        response.delete_cookie(COOKIE, path="/")
        return response

    async def home(request: Request, viewer: Viewer, csrf: str | None) -> Response:
        return RedirectResponse("/scopes", status_code=303, headers=_HEADERS)

    async def scopes(request: Request, viewer: Viewer, csrf: str | None) -> Response:
        counts = await run_in_threadpool(inspector.scopes, viewer)
        return page("scopes.html", viewer=viewer, csrf=csrf, scopes=counts)

    async def records(request: Request, viewer: Viewer, csrf: str | None) -> Response:
        query = request.query_params
        try:
            scope = Scope.parse(query["scope"]) if query.get("scope") else None
            before = int(query["before"]) if query.get("before") else None
        except ValueError as exc:
            return page("error.html", 400, viewer=viewer, csrf=csrf, message=str(exc))
        pinned = {"yes": True, "no": False}.get(query.get("pinned", ""))
        kept = BrowseFilter(
            statuses=tuple(s for s in query.getlist("status") if s in RECORD_STATUSES),
            types=tuple(t for t in query.getlist("type") if t in RECORD_TYPES),
            attribute=query.get("attribute") or None, entity_id=query.get("entity") or None,
            pinned=pinned, text=query.get("q") or None)
        found = await run_in_threadpool(inspector.records, viewer, kept, scope, before)
        kept_query = [(k, v) for k, v in query.multi_items() if k != "before"]
        following = None if found.next_before is None else "/records?" + urlencode(
            [*kept_query, ("before", str(found.next_before))])
        return page("records.html", viewer=viewer, csrf=csrf, page=found, kept=kept, scope=scope,
                    statuses=RECORD_STATUSES, types=RECORD_TYPES, query=query, following=following)

    async def record(request: Request, viewer: Viewer, csrf: str | None) -> Response:
        view = await run_in_threadpool(inspector.record, viewer, request.path_params["record_id"])
        if view is None:
            return page("error.html", 404, viewer=viewer, csrf=csrf, message="no such memory")
        return page("record.html", viewer=viewer, csrf=csrf, record=view, actions=ACTIONS,
                    done=request.query_params.get("done"), failed=request.query_params.get("failed"))

    async def search(request: Request, viewer: Viewer, csrf: str | None) -> Response:
        query = request.query_params
        text = (query.get("q") or "").strip()
        context: dict[str, Any] = {"viewer": viewer, "csrf": csrf, "query": query, "result": None}
        if not text:
            return page("search.html", **context)
        trigger = "host" if query.get("trigger") == "host" else "tool"
        try:
            principal = viewer.principal or Principal(query.get("agent", ""), query.get("user", ""),
                                                      project_id=query.get("project") or None)
            answer_at = tuple(float(t) for t in (query.get("answer_at") or "").replace(",", " ").split())[:5]
            if not all(0.0 <= t <= 1.0 for t in answer_at):
                raise ValueError("a threshold to decide again at is between 0 and 1")
        except ValueError as exc:
            return page("search.html", 400, **context, message=str(exc))
        context["result"] = await run_in_threadpool(inspector.search, viewer, text, principal, trigger,
                                                    answer_at)
        return page("search.html", **context)

    async def entity_list(request: Request, viewer: Viewer, csrf: str | None) -> Response:
        kinds = tuple(k for k in request.query_params.getlist("kind") if k in ENTITY_KINDS)
        found = await run_in_threadpool(inspector.entities, viewer, kinds)
        return page("entities.html", viewer=viewer, csrf=csrf, entities=found, kinds=ENTITY_KINDS,
                    chosen=kinds)

    async def entity(request: Request, viewer: Viewer, csrf: str | None) -> Response:
        found = await run_in_threadpool(inspector.entity, viewer, request.path_params["entity_id"])
        if found is None:
            return page("error.html", 404, viewer=viewer, csrf=csrf, message="no such entity")
        return page("entity.html", viewer=viewer, csrf=csrf, entity=found[0], merged=found[1], into=found[2])

    async def access(request: Request, viewer: Viewer, csrf: str | None) -> Response:
        grants, members = await run_in_threadpool(inspector.access, viewer)
        return page("access.html", viewer=viewer, csrf=csrf, grants=grants, members=members,
                    done=request.query_params.get("done"), failed=request.query_params.get("failed"))

    async def change_access(request: Request, viewer: Viewer, csrf: str | None) -> Response:
        form = {k: str(v) for k, v in (await request.form()).items()}
        outcome = await run_in_threadpool(inspector.change_access, viewer, request.path_params["change"],
                                          form)
        if outcome.code == "forbidden":
            return page("error.html", 403, viewer=viewer, csrf=csrf, message=outcome.message)
        note = outcome.message if outcome.ok else f"{outcome.code}: {outcome.message}"
        return _back("/access", outcome.ok, note)

    async def session_list(request: Request, viewer: Viewer, csrf: str | None) -> Response:
        found = await run_in_threadpool(inspector.sessions, viewer, rt.config.ui.page_size)
        return page("sessions.html", viewer=viewer, csrf=csrf, sessions=found)

    async def session(request: Request, viewer: Viewer, csrf: str | None) -> Response:
        found = await run_in_threadpool(inspector.session, viewer, request.path_params["session_id"])
        if found is None:
            return page("error.html", 404, viewer=viewer, csrf=csrf, message="no such session")
        return page("session.html", viewer=viewer, csrf=csrf, **found)

    async def review_list(request: Request, viewer: Viewer, csrf: str | None) -> Response:
        found = await run_in_threadpool(inspector.reviews, viewer, rt.config.ui.page_size)
        return page("reviews.html", viewer=viewer, csrf=csrf, reviews=found, resolutions=RESOLUTIONS,
                    done=request.query_params.get("done"), failed=request.query_params.get("failed"))

    async def resolve(request: Request, viewer: Viewer, csrf: str | None) -> Response:
        form = await request.form()
        outcome = await run_in_threadpool(inspector.resolve, viewer, request.path_params["record_id"],
                                          str(form.get("resolution", "")), str(form.get("reason", "")))
        if outcome.code == "not_found":
            return page("error.html", 404, viewer=viewer, csrf=csrf, message="no such review")
        note = outcome.message if outcome.ok else f"{outcome.code}: {outcome.message}"
        return _back("/reviews", outcome.ok, note)

    async def act(request: Request, viewer: Viewer, csrf: str | None) -> Response:
        record_id = request.path_params["record_id"]
        form = await request.form()
        outcome = await run_in_threadpool(inspector.act, viewer, record_id, str(form.get("action", "")),
                                          str(form.get("reason", "")), str(form.get("content", "")))
        if outcome.code == "not_found":
            return page("error.html", 404, viewer=viewer, csrf=csrf, message="no such memory")
        note = outcome.message if outcome.ok else f"{outcome.code}: {outcome.message}"
        return _back(f"/records/{record_id}", outcome.ok, note)

    routes = [
        Route("/login", login_form, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", guarded(logout, changes=True), methods=["POST"]),
        Route("/", guarded(home), methods=["GET"]),
        Route("/scopes", guarded(scopes), methods=["GET"]),
        Route("/records", guarded(records), methods=["GET"]),
        Route("/records/{record_id}", guarded(record), methods=["GET"]),
        Route("/records/{record_id}/act", guarded(act, changes=True), methods=["POST"]),
        Route("/search", guarded(search), methods=["GET"]),
        Route("/sessions", guarded(session_list), methods=["GET"]),
        Route("/sessions/{session_id}", guarded(session), methods=["GET"]),
        Route("/access", guarded(access), methods=["GET"]),
        Route("/access/{change}", guarded(change_access, changes=True), methods=["POST"]),
        Route("/entities", guarded(entity_list), methods=["GET"]),
        Route("/entities/{entity_id}", guarded(entity), methods=["GET"]),
        Route("/reviews", guarded(review_list), methods=["GET"]),
        Route("/reviews/{record_id}", guarded(resolve, changes=True), methods=["POST"]),
    ]
    return Starlette(routes=routes)


def _back(path: str, ok: bool, note: str) -> Response:
    """After a change, back to the page it was made on, saying how it went."""
    return RedirectResponse(f"{path}?" + urlencode({"done" if ok else "failed": note}), status_code=303,
                            headers=_HEADERS)


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


def _from_here(request: Request) -> bool:
    """False when the browser says the request started on another site (its ``Origin``,
    or failing that its ``Sec-Fetch-Site``); a script that sends neither is taken."""
    origin = request.headers.get("origin")
    if origin is not None:
        return origin == f"{request.url.scheme}://{request.url.netloc}"
    return request.headers.get("sec-fetch-site") in (None, "same-origin", "none")


async def _same_site(request: Request, csrf: str | None) -> bool:
    """A change is taken from a bearer request, or from a page of ours that carried the
    session's CSRF token."""
    if not _from_here(request):
        return False
    if csrf is None:  # a bearer token: no other site can make a browser send one
        return True
    form = await request.form()
    given = form.get("csrf")
    return same_token(given if isinstance(given, str) else None, csrf)
