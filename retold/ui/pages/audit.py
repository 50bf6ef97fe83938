"""The extraction audit: the sampled records waiting for a person, each with the turn its
evidence was quoted from, and the three questions asked of it (true, atomic, worth
keeping). An operator's page: the audit grades the tenant's extraction as a whole, and its
answers count in the tenant's rates (docs/decisions.md, "The extraction audit")."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from retold.quality.audit import (
    AuditEntry,
    AuditError,
    AuditSummary,
    answer_audit,
    audit_entries,
    audit_summary,
)
from retold.store.audit import Verdicts
from retold.ui.access import Viewer
from retold.ui.guard import PageContext, back

__all__ = ["QUESTIONS", "routes"]

# The form's fields, in the order asked, with the question a person reads.
QUESTIONS = (("true", "Is it true?"), ("atomic", "Does it say one thing?"), ("keep", "Is it worth keeping?"))
_ANSWERED_SHOWN = 10  # the latest answers listed under the queue
_OPERATORS_ONLY = "the extraction audit is an operator's page: log in with an operator's token"


async def audit_page(ctx: PageContext, request: Request, viewer: Viewer, csrf: str | None) -> Response:
    if not viewer.is_operator:
        return ctx.page("error.html", 403, viewer=viewer, csrf=csrf, message=_OPERATORS_ONLY)
    store = ctx.rt.store

    def read() -> tuple[AuditSummary, list[AuditEntry], list[AuditEntry]]:
        return (audit_summary(store), audit_entries(store, limit=ctx.rt.config.ui.page_size),
                audit_entries(store, answered=True, limit=_ANSWERED_SHOWN))

    summary, waiting, answered = await run_in_threadpool(read)
    return ctx.page("audit.html", viewer=viewer, csrf=csrf, summary=summary, waiting=waiting,
                    answered=answered, questions=QUESTIONS, done=request.query_params.get("done"),
                    failed=request.query_params.get("failed"))


async def answer(ctx: PageContext, request: Request, viewer: Viewer, csrf: str | None) -> Response:
    if not viewer.is_operator:
        return ctx.page("error.html", 403, viewer=viewer, csrf=csrf, message=_OPERATORS_ONLY)
    form = await request.form()
    given = {name: form.get(name) for name, _ in QUESTIONS}
    if any(value not in ("yes", "no") for value in given.values()):
        return back("/audit", False, "answer all three questions, yes or no")
    record_id = request.path_params["record_id"]
    verdicts = Verdicts(*(given[name] == "yes" for name, _ in QUESTIONS))
    try:
        await run_in_threadpool(answer_audit, ctx.rt.store, record_id, verdicts, viewer.name)
    except AuditError as err:
        return ctx.page("error.html", 404, viewer=viewer, csrf=csrf, message=str(err))
    return back("/audit", True, f"answered {record_id[-8:]}")


def routes(ctx: PageContext) -> list[Route]:
    return [
        Route("/audit", ctx.guarded(audit_page), methods=["GET"]),
        Route("/audit/{record_id}", ctx.guarded(answer, changes=True), methods=["POST"]),
    ]
