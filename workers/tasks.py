"""The Celery tasks: each loads ids, calls one part the worker's runtime built
(``rt.extraction``, ``rt.operations``, ``rt.hooks``) and returns a small JSON dict, so the logic stays
testable without Celery. Every task is idempotent, so
a redelivered or re-enqueued message is harmless: the session claim makes a second
extraction of the same session a no-op, the sweeps change only rows still due, and
``recover`` only enqueues what is due and not already queued
(``rt.extraction.enqueue_due``), in bounded batches.

An extraction that applies nothing because something is wrong (a failed run, no hosted
model, a session parked after its last attempt) raises :class:`ExtractionError`, so the
task ends FAILURE with the reason in Flower and in Celery's events. It is declared as
an expected error: the worker logs one line, not a traceback, and the message is
acknowledged, because SQLite, not the broker, decides when the session is tried again.

Extraction runs the whole resumable pipeline (extract, review, apply) in one task;
``review_session`` resumes a session whose extract stage is already persisted (what
``recover`` enqueues for stage ``review``), so the extractor is never paid twice.

``reembed`` reports its progress (records done / total) as the ``PROGRESS`` state
(:mod:`workers.progress`) and resumes from the vectors it staged when a killed worker's
message comes back or the operator enqueues it again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from retold.broker.identity import broker_instance
from retold.broker.waiting import waiting_sessions
from retold.errors import ExtractionError
from retold.operations import TEMPORAL_REVIEWER
from workers.app import app, purge_consumed_messages
from workers.process_runtime import current_runtime
from workers.progress import task_progress

__all__ = [
    "backfill", "capacity", "check", "end_idle_sessions", "expire", "extract_session", "queue_maintenance",
    "recover", "reembed", "retain", "review_session", "temporal_review",
]


def _task(name: str, *, throws: tuple[type[Exception], ...] = (), bind: bool = False) -> Callable[
        [Callable[..., dict[str, Any]]], Any]:
    """``app.task(name=name, throws=throws, bind=bind)``, typed: Celery's task decorator has
    no annotations. ``throws`` are the expected errors, logged without a traceback; a bound
    task gets itself as its first argument, to report progress."""
    decorator: Callable[[Callable[..., dict[str, Any]]], Any] = app.task(name=name, throws=throws, bind=bind)
    return decorator


log = logging.getLogger(__name__)

MAINTENANCE_ACTOR = "admin"
"""The actor recorded on the sweeps' events: the operator default, as in the CLI."""


def _extract(session_id: str) -> dict[str, Any]:
    # The runner resumes at the stage the session has persisted, so both extraction
    # tasks run the same body; their names keep the queue's view of the work honest.
    result = current_runtime().extraction.run(session_id)
    if result.failed:
        raise ExtractionError(f"session {session_id} {result.outcome}: {result.reason}")
    return {"session_id": session_id, "outcome": result.outcome, "counts": result.counts}


@_task("retold.extract_session", throws=(ExtractionError,))
def extract_session(session_id: str) -> dict[str, Any]:
    return _extract(session_id)


@_task("retold.review_session", throws=(ExtractionError,))
def review_session(session_id: str) -> dict[str, Any]:
    return _extract(session_id)


def _send(session_id: str, stage: str) -> None:
    """Publish one session to the task that resumes it at ``stage``."""
    task = review_session if stage == "review" else extract_session
    task.apply_async(args=[session_id])


@_task("retold.recover")
def recover() -> dict[str, Any]:
    url = str(app.conf.broker_url)
    rt = current_runtime()
    waiting = waiting_sessions(url, (rt.config.queue.extraction_queue,))
    return {"enqueued": rt.extraction.enqueue_due(_send, broker_instance(url), waiting)}


@_task("retold.end_idle_sessions")
def end_idle_sessions() -> dict[str, Any]:
    return {"ended": current_runtime().hooks.end_idle()}


@_task("retold.temporal_review")
def temporal_review() -> dict[str, Any]:
    return {"flagged": current_runtime().operations.review_due(TEMPORAL_REVIEWER)}


@_task("retold.expire")
def expire() -> dict[str, Any]:
    return {"expired": current_runtime().operations.expire(MAINTENANCE_ACTOR)}


@_task("retold.retain")
def retain() -> dict[str, Any]:
    result = current_runtime().operations.retain(MAINTENANCE_ACTOR)
    return {"blanked": result.sessions_blanked, "search_logs_deleted": result.search_logs_deleted,
            "event_payloads_thinned": result.event_payloads_thinned,
            "forgotten_erased": result.forgotten_erased}


@_task("retold.backfill")
def backfill() -> dict[str, Any]:
    result = current_runtime().operations.backfill()
    return {"embedded": result.embedded, "pending": result.pending, "error": result.error}


@_task("retold.check")
def check() -> dict[str, Any]:
    report = current_runtime().operations.check(quick=True)
    if report is None:
        return {"checked": False}
    if report.damaged:
        log.error("store %s failed its periodic check: %s (`retold check --store %s` lists the problems)",
                  report.path, report.summary(), report.path)
    return {"checked": True, "ok": report.ok, "damaged": report.damaged, "summary": report.summary()}


@_task("retold.capacity")
def capacity() -> dict[str, Any]:
    results = current_runtime().operations.capacity(MAINTENANCE_ACTOR)
    return {"scopes_over": len(results), "archived": sum(len(r.archived) for r in results)}


@_task("retold.reembed", bind=True)
def reembed(self: Any, model: str, version: str, dims: int | None = None) -> dict[str, Any]:
    result = current_runtime().operations.reembed(model, version, dims=dims, actor=MAINTENANCE_ACTOR,
                                                  progress=task_progress(self))
    return {"model": result.model, "version": result.version, "embedded": result.embedded,
            "resumed": result.resumed, "dropped": result.dropped}


@_task("retold.queue_maintenance")
def queue_maintenance() -> dict[str, Any]:
    return {"deleted": purge_consumed_messages(str(app.conf.broker_url))}
