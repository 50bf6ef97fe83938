"""Records: the filtered list, one record with its evidence, lineage and events, and the
buttons that forget, restore, pin, unpin, confirm or correct it."""

from __future__ import annotations

from urllib.parse import urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from retold.models import RECORD_STATUSES, RECORD_TYPES, Scope
from retold.store.browse import BrowseFilter
from retold.ui.access import Viewer
from retold.ui.guard import PageContext, back
from retold.ui.views import ACTIONS

__all__ = ["routes"]


async def records(ctx: PageContext, request: Request, viewer: Viewer, csrf: str | None) -> Response:
    """One page of the records the viewer reads, newest first, with the query's filters."""
    query = request.query_params
    try:
        scope = Scope.parse(query["scope"]) if query.get("scope") else None
        before = int(query["before"]) if query.get("before") else None
    except ValueError as exc:
        return ctx.page("error.html", 400, viewer=viewer, csrf=csrf, message=str(exc))
    pinned = {"yes": True, "no": False}.get(query.get("pinned", ""))
    kept = BrowseFilter(
        statuses=tuple(s for s in query.getlist("status") if s in RECORD_STATUSES),
        types=tuple(t for t in query.getlist("type") if t in RECORD_TYPES),
        attribute=query.get("attribute") or None, entity_id=query.get("entity") or None,
        pinned=pinned, text=query.get("q") or None)
    found = await run_in_threadpool(ctx.inspector.records, viewer, kept, scope, before)
    kept_query = [(k, v) for k, v in query.multi_items() if k != "before"]
    following = None if found.next_before is None else "/records?" + urlencode(
        [*kept_query, ("before", str(found.next_before))])
    return ctx.page("records.html", viewer=viewer, csrf=csrf, page=found, kept=kept, scope=scope,
                    statuses=RECORD_STATUSES, types=RECORD_TYPES, query=query, following=following)


async def record(ctx: PageContext, request: Request, viewer: Viewer, csrf: str | None) -> Response:
    view = await run_in_threadpool(ctx.inspector.record, viewer, request.path_params["record_id"])
    if view is None:
        return ctx.page("error.html", 404, viewer=viewer, csrf=csrf, message="no such memory")
    return ctx.page("record.html", viewer=viewer, csrf=csrf, record=view, actions=ACTIONS,
                    done=request.query_params.get("done"), failed=request.query_params.get("failed"))


async def act(ctx: PageContext, request: Request, viewer: Viewer, csrf: str | None) -> Response:
    """Run one of a record's buttons and go back to the record, saying how it went."""
    record_id = request.path_params["record_id"]
    form = await request.form()
    outcome = await run_in_threadpool(ctx.inspector.act, viewer, record_id, str(form.get("action", "")),
                                      str(form.get("reason", "")), str(form.get("content", "")))
    if outcome.code == "not_found":
        return ctx.page("error.html", 404, viewer=viewer, csrf=csrf, message="no such memory")
    note = outcome.message if outcome.ok else f"{outcome.code}: {outcome.message}"
    return back(f"/records/{record_id}", outcome.ok, note)


def routes(ctx: PageContext) -> list[Route]:
    return [
        Route("/records", ctx.guarded(records), methods=["GET"]),
        Route("/records/{record_id}", ctx.guarded(record), methods=["GET"]),
        Route("/records/{record_id}/act", ctx.guarded(act, changes=True), methods=["POST"]),
    ]
