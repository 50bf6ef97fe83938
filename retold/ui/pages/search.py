"""The search page: a query run as a principal, with the block the model reads, the
decision to answer or abstain, and every candidate with each channel's vote."""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from retold.models import Principal
from retold.tools.validation import ToolError, parse_time
from retold.ui.access import Viewer
from retold.ui.guard import PageContext

__all__ = ["routes"]

MAX_THRESHOLDS = 5  # thresholds a search is decided again at, at most


async def search(ctx: PageContext, request: Request, viewer: Viewer, csrf: str | None) -> Response:
    """The form alone without a query; with one, the search as the viewer's principal (or,
    for an operator, the principal the form names), as of a time when the form gives one."""
    query = request.query_params
    text = (query.get("q") or "").strip()
    context: dict[str, Any] = {"viewer": viewer, "csrf": csrf, "query": query, "result": None}
    if not text:
        return ctx.page("search.html", **context)
    trigger = "host" if query.get("trigger") == "host" else "tool"
    try:
        principal = viewer.principal or Principal(query.get("agent", ""), query.get("user", ""),
                                                  project_id=query.get("project") or None)
        answer_at = tuple(float(t) for t in (query.get("answer_at") or "").replace(",", " ").split())
        answer_at = answer_at[:MAX_THRESHOLDS]
        if not all(0.0 <= t <= 1.0 for t in answer_at):
            raise ValueError("a threshold to decide again at is between 0 and 1")
        as_of_text = (query.get("as_of") or "").strip()
        as_of = parse_time("as_of", as_of_text) if as_of_text else None
    except ValueError as exc:
        return ctx.page("search.html", 400, **context, message=str(exc))
    except ToolError as exc:
        return ctx.page("search.html", 400, **context, message=exc.message)
    context["result"] = await run_in_threadpool(ctx.inspector.search, viewer, text, principal, trigger,
                                                answer_at, as_of)
    return ctx.page("search.html", **context)


def routes(ctx: PageContext) -> list[Route]:
    return [Route("/search", ctx.guarded(search), methods=["GET"])]
