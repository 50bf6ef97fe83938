"""The Celery tasks: each loads ids, calls one plain function in ``retold/`` and returns a
small JSON dict, so the logic stays testable without Celery. Every task is idempotent, so
a redelivered or re-enqueued message is harmless: the session claim makes a second
extraction of the same session a no-op, the sweeps change only rows still due, and
``recover`` only enqueues what ``pending_sessions`` reports.

Extraction runs the whole resumable pipeline (extract, review, apply) in one task;
``review_session`` resumes a session whose extract stage is already persisted (what
``recover`` enqueues for stage ``review``), so the extractor is never paid twice.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from retold.ingest.extraction import extract_session as run_extraction
from retold.ingest.extraction import pending_sessions
from retold.ingest.temporal import review_due
from retold.operations import Operations
from workers.app import app, purge_consumed_messages
from workers.runtime import current_runtime

__all__ = [
    "expire", "extract_session", "queue_maintenance", "recover", "reembed", "retain",
    "review_session", "temporal_review",
]


def _task(name: str) -> Callable[[Callable[..., dict[str, Any]]], Any]:
    """``app.task(name=name)``, typed: Celery's task decorator has no annotations."""
    decorator: Callable[[Callable[..., dict[str, Any]]], Any] = app.task(name=name)
    return decorator


MAINTENANCE_ACTOR = "admin"
"""The actor recorded on the sweeps' events: the operator default, as in the CLI."""


@_task("retold.extract_session")
def extract_session(session_id: str) -> dict[str, Any]:
    result = run_extraction(current_runtime(), session_id)
    return {"session_id": session_id, "outcome": result.outcome, "counts": result.counts}


@_task("retold.review_session")
def review_session(session_id: str) -> dict[str, Any]:
    result = run_extraction(current_runtime(), session_id)  # resumes at the persisted stage
    return {"session_id": session_id, "outcome": result.outcome, "counts": result.counts}


@_task("retold.recover")
def recover() -> dict[str, Any]:
    pending = pending_sessions(current_runtime())
    for session_id, stage in pending:
        task = review_session if stage == "review" else extract_session
        task.apply_async(args=[session_id])
    return {"enqueued": [session_id for session_id, _ in pending]}


@_task("retold.temporal_review")
def temporal_review() -> dict[str, Any]:
    return {"flagged": review_due(current_runtime())}


@_task("retold.expire")
def expire() -> dict[str, Any]:
    return {"expired": Operations(current_runtime()).expire(MAINTENANCE_ACTOR)}


@_task("retold.retain")
def retain() -> dict[str, Any]:
    return {"blanked": Operations(current_runtime()).retain(MAINTENANCE_ACTOR)}


@_task("retold.reembed")
def reembed(model: str, version: str) -> dict[str, Any]:
    result = Operations(current_runtime()).reembed(model, version, actor=MAINTENANCE_ACTOR)
    return {"model": result.model, "version": result.version, "embedded": result.embedded,
            "dropped": result.dropped}


@_task("retold.queue_maintenance")
def queue_maintenance() -> dict[str, Any]:
    return {"deleted": purge_consumed_messages(str(app.conf.broker_url))}
