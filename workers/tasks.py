"""The Celery tasks: each loads ids, calls one part the worker's runtime built
(``rt.extraction``, ``rt.operations``, ``rt.hooks``) and returns a small JSON dict, so the logic stays
testable without Celery. Every task is idempotent, so
a redelivered or re-enqueued message is harmless: the session claim makes a second
extraction of the same session a no-op, the sweeps change only rows still due, and
``recover`` only enqueues what ``rt.extraction.pending()`` reports.

Extraction runs the whole resumable pipeline (extract, review, apply) in one task;
``review_session`` resumes a session whose extract stage is already persisted (what
``recover`` enqueues for stage ``review``), so the extractor is never paid twice.

``reembed`` reports its progress (records done / total) as the ``PROGRESS`` state
(:mod:`workers.progress`) and resumes from the vectors it staged when a killed worker's
message comes back or the operator enqueues it again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from retold.operations import TEMPORAL_REVIEWER
from workers.app import app, purge_consumed_messages
from workers.progress import task_progress
from workers.runtime import current_runtime

__all__ = [
    "end_idle_sessions", "expire", "extract_session", "queue_maintenance", "recover", "reembed",
    "retain", "review_session", "temporal_review",
]


def _task(name: str, *, bind: bool = False) -> Callable[[Callable[..., dict[str, Any]]], Any]:
    """``app.task(name=name)``, typed: Celery's task decorator has no annotations. A bound
    task gets itself as its first argument, to report progress."""
    decorator: Callable[[Callable[..., dict[str, Any]]], Any] = app.task(name=name, bind=bind)
    return decorator


MAINTENANCE_ACTOR = "admin"
"""The actor recorded on the sweeps' events: the operator default, as in the CLI."""


def _extract(session_id: str) -> dict[str, Any]:
    # The runner resumes at the stage the session has persisted, so both extraction
    # tasks run the same body; their names keep the queue's view of the work honest.
    result = current_runtime().extraction.run(session_id)
    return {"session_id": session_id, "outcome": result.outcome, "counts": result.counts}


@_task("retold.extract_session")
def extract_session(session_id: str) -> dict[str, Any]:
    return _extract(session_id)


@_task("retold.review_session")
def review_session(session_id: str) -> dict[str, Any]:
    return _extract(session_id)


@_task("retold.recover")
def recover() -> dict[str, Any]:
    pending = current_runtime().extraction.pending()
    for session_id, stage in pending:
        task = review_session if stage == "review" else extract_session
        task.apply_async(args=[session_id])
    return {"enqueued": [session_id for session_id, _ in pending]}


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
            "event_payloads_thinned": result.event_payloads_thinned}


@_task("retold.reembed", bind=True)
def reembed(self: Any, model: str, version: str, dims: int | None = None) -> dict[str, Any]:
    result = current_runtime().operations.reembed(model, version, dims=dims, actor=MAINTENANCE_ACTOR,
                                                  progress=task_progress(self))
    return {"model": result.model, "version": result.version, "embedded": result.embedded,
            "resumed": result.resumed, "dropped": result.dropped}


@_task("retold.queue_maintenance")
def queue_maintenance() -> dict[str, Any]:
    return {"deleted": purge_consumed_messages(str(app.conf.broker_url))}
