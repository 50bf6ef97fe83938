"""The Celery tasks: each loads ids, calls one part the worker's runtime built
(``rt.session_end``, ``rt.operations``, ``rt.hooks``) and returns a small JSON dict, so the logic stays
testable without Celery. A session's task names its tenant (none: the default tenant) and
runs in that tenant's runtime; a periodic sweep runs once in every tenant of the store,
each through its own runtime, and reports the totals. Every task is idempotent, so
a redelivered or re-enqueued message is harmless: the session claim makes a second
extraction of the same session a no-op, the sweeps change only rows still due, and
``recover`` only enqueues what is due and not already queued
(``rt.session_end.enqueue_due``), in bounded batches.

An extraction that applies nothing because something is wrong (a failed run, no hosted
model, a session parked after its last attempt) raises :class:`ExtractionError`, so the
task ends FAILURE with the reason in Flower and in Celery's events. It is declared as
an expected error: the worker logs one line, not a traceback, and the message is
acknowledged, because SQLite, not the broker, decides when the session is tried again.

Extraction runs the whole resumable session end (claim, extract, review, apply) in one
call, ``rt.session_end.run``; ``review_session`` resumes a session whose extract stage is
already persisted (what ``recover`` enqueues for stage ``review``), so the extractor is
never paid twice.

``reembed`` reports its progress (records done / total) as the ``PROGRESS`` state
(:mod:`workers.progress`) and resumes from the vectors it staged when a killed worker's
message comes back or the operator enqueues it again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from retold.broker.identity import broker_instance
from retold.broker.scheduler import tenant_kwargs
from retold.broker.waiting import waiting_sessions
from retold.errors import ExtractionError
from retold.operations import TEMPORAL_REVIEWER
from retold.runtime import Runtime
from retold.store.integrity import IntegrityReport
from retold.tenant import DEFAULT_TENANT
from workers.app import app, purge_consumed_messages
from workers.process_runtime import served_tenants, tenant_runtime
from workers.progress import task_progress

__all__ = [
    "audit_sample", "backfill", "capacity", "check", "end_idle_sessions", "expire", "extract_session",
    "queue_maintenance", "recover", "reembed", "retain", "review_session", "temporal_review",
]


def _task(name: str, *, throws: tuple[type[Exception], ...] = (), bind: bool = False) -> Callable[
        [Callable[..., dict[str, Any]]], Any]:
    """``app.task(name=name, throws=throws, bind=bind)``, typed: Celery's task decorator has
    no annotations. ``throws`` are the expected errors, logged without a traceback; a bound
    task gets itself as its first argument, to report progress."""
    decorator: Callable[[Callable[..., dict[str, Any]]], Any] = app.task(name=name, throws=throws, bind=bind)
    return decorator


log = logging.getLogger(__name__)
T = TypeVar("T")

MAINTENANCE_ACTOR = "admin"
"""The actor recorded on the sweeps' events: the operator default, as in the CLI."""


def _extract(session_id: str, tenant: str) -> dict[str, Any]:
    # The session end resumes at the stage the session has persisted, so both extraction
    # tasks run the same body; their names keep the queue's view of the work honest.
    with tenant_runtime(tenant) as rt:
        result = rt.session_end.run(session_id)
    if result.failed:
        raise ExtractionError(f"session {session_id} {result.outcome}: {result.reason}")
    return {"session_id": session_id, "outcome": result.outcome, "counts": result.counts}


@_task("retold.extract_session", throws=(ExtractionError,))
def extract_session(session_id: str, tenant: str = DEFAULT_TENANT) -> dict[str, Any]:
    return _extract(session_id, tenant)


@_task("retold.review_session", throws=(ExtractionError,))
def review_session(session_id: str, tenant: str = DEFAULT_TENANT) -> dict[str, Any]:
    return _extract(session_id, tenant)


def _sender(tenant: str) -> Callable[[str, str], None]:
    """Publish one of ``tenant``'s sessions to the task that resumes it at ``stage``."""

    def send(session_id: str, stage: str) -> None:
        task = review_session if stage == "review" else extract_session
        task.apply_async(args=[session_id], kwargs=tenant_kwargs(tenant))

    return send


def _each_tenant(sweep: Callable[[Runtime], T]) -> list[tuple[str, T]]:
    """Run ``sweep`` in every tenant of the store, each through its own runtime, so a
    sweep never reads two tenants through one connection; each tenant's result."""
    results = []
    for tenant in served_tenants():
        with tenant_runtime(tenant) as rt:
            results.append((tenant, sweep(rt)))
    return results


def _totals(results: list[tuple[str, Any]], **fields: str) -> dict[str, int]:
    """``{key: sum of each result's attribute}`` for ``key=attribute`` in ``fields``."""
    return {key: sum(getattr(result, attr) for _tenant, result in results) for key, attr in fields.items()}


def _waiting(rt: Runtime, url: str) -> frozenset[str] | None:
    """The sessions of ``rt``'s tenant whose messages wait in its extraction queue."""
    return waiting_sessions(url, (rt.config.queue.extraction_queue,), tenant=rt.tenant)


@_task("retold.recover")
def recover() -> dict[str, Any]:
    url = str(app.conf.broker_url)
    instance = broker_instance(url)
    found = _each_tenant(lambda rt: rt.session_end.enqueue_due(_sender(rt.tenant), instance,
                                                              _waiting(rt, url)))
    return {"enqueued": [sid for _tenant, sids in found for sid in sids]}


@_task("retold.end_idle_sessions")
def end_idle_sessions() -> dict[str, Any]:
    ended = _each_tenant(lambda rt: rt.hooks.end_idle())
    return {"ended": [sid for _tenant, sids in ended for sid in sids]}


@_task("retold.temporal_review")
def temporal_review() -> dict[str, Any]:
    flagged = _each_tenant(lambda rt: rt.operations.review_due(TEMPORAL_REVIEWER))
    return {"flagged": sum(n for _tenant, n in flagged)}


@_task("retold.expire")
def expire() -> dict[str, Any]:
    expired = _each_tenant(lambda rt: rt.operations.expire(MAINTENANCE_ACTOR))
    return {"expired": sum(n for _tenant, n in expired)}


@_task("retold.retain")
def retain() -> dict[str, Any]:
    results = _each_tenant(lambda rt: rt.operations.retain(MAINTENANCE_ACTOR))
    return _totals(results, blanked="sessions_blanked", search_logs_deleted="search_logs_deleted",
                   event_payloads_thinned="event_payloads_thinned", forgotten_erased="forgotten_erased")


@_task("retold.backfill")
def backfill() -> dict[str, Any]:
    results = _each_tenant(lambda rt: rt.operations.backfill())
    errors = [r.error if t == DEFAULT_TENANT else f"{t}: {r.error}" for t, r in results if r.error]
    return {**_totals(results, embedded="embedded", pending="pending"), "error": "; ".join(errors) or None}


def _check_result(reports: list[tuple[str, IntegrityReport | None]]) -> dict[str, Any]:
    """The periodic check's result over every tenant, logging each damaged one."""
    checked = [(tenant, report) for tenant, report in reports if report is not None]
    if not checked:
        return {"checked": False}
    for tenant, report in checked:
        if report.damaged:
            log.error("store %s failed its periodic check: %s (`retold check --store %s --tenant %s` lists "
                      "the problems)", report.path, report.summary(), report.path, tenant)
    summary = "; ".join(r.summary() if t == DEFAULT_TENANT else f"{t}: {r.summary()}" for t, r in checked)
    return {"checked": True, "ok": all(r.ok for _t, r in checked),
            "damaged": any(r.damaged for _t, r in checked), "summary": summary}


@_task("retold.check")
def check() -> dict[str, Any]:
    return _check_result(_each_tenant(lambda rt: rt.operations.check(quick=True)))


@_task("retold.capacity")
def capacity() -> dict[str, Any]:
    results = [r for _tenant, found in _each_tenant(lambda rt: rt.operations.capacity(MAINTENANCE_ACTOR))
               for r in found]
    return {"scopes_over": len(results), "archived": sum(len(r.archived) for r in results)}


@_task("retold.audit_sample")
def audit_sample() -> dict[str, Any]:
    samples = _each_tenant(lambda rt: rt.operations.audit_sample(MAINTENANCE_ACTOR))
    return {"sampled": sum(len(s.added) for _tenant, s in samples),
            "written": sum(s.written for _tenant, s in samples)}


@_task("retold.reembed", bind=True)
def reembed(self: Any, model: str, version: str, dims: int | None = None,
            tenant: str = DEFAULT_TENANT) -> dict[str, Any]:
    with tenant_runtime(tenant) as rt:
        result = rt.operations.reembed(model, version, dims=dims, actor=MAINTENANCE_ACTOR,
                                       progress=task_progress(self))
    return {"model": result.model, "version": result.version, "embedded": result.embedded,
            "resumed": result.resumed, "dropped": result.dropped}


@_task("retold.queue_maintenance")
def queue_maintenance() -> dict[str, Any]:
    return {"deleted": purge_consumed_messages(str(app.conf.broker_url))}
