"""The periodic maintenance schedule, as plain data the Celery app imports.

Maps a beat entry name to the task it runs, its interval in seconds and, for entries that
only make sense with one kind of broker, ``"brokers"``. The Celery app
(:func:`workers.app.create_app`) turns :func:`schedule_for` into ``beat_schedule``.

- ``recover`` hands the queue ended sessions that are due (never extracted, a failed
  attempt's backoff over, or a dead worker's lease expired) and not already waiting there,
  in bounded batches; SQLite, not the broker, knows what is pending. It runs every 30 s,
  so a session whose worker died is taken again within a minute of its last heartbeat.
- ``end_idle_sessions`` ends sessions idle past ``ingestion.session_idle_timeout_minutes``
  and schedules their extraction, for frameworks that never signal a session's end.
- ``temporal_review`` flags records whose ``review_at`` arrived.
- ``expire`` and ``retain`` are the lifecycle sweeps: records past their expiry, and user
  text past its age (transcripts of extracted sessions after ``sessions.retain_days``,
  search-log rows and event payload text after the ``retention:`` ages).
- ``capacity`` archives the lowest-scoring live records of every scope over its
  ``lifecycle.max_active_per_scope`` (nothing when no kind has a cap).
- ``backfill`` embeds the records a write stored without their vector (the encoder failed
  or ran past ``embedding.write_timeout_ms``), so dense search finds them within minutes.
- ``check`` runs the quick integrity check every 15 minutes. A write need not read a
  damaged page, so without it a damaged store keeps taking writes until something reads
  the damage; a damaged SQLite store is marked, and every process refuses writes to it.
  It costs about 2 s of reading at 50K records, 0.4 s of it holding the write lock.
- ``audit_sample`` puts a sample of the records extraction wrote in the past week into
  the extraction audit's queue, for a person to judge (``retold audit``); weekly, and
  harmless when run again, since a week's sample is taken once.
- ``queue_maintenance`` deletes consumed messages from the embedded broker's file, which
  kombu's SQLAlchemy transport never deletes; a Redis broker needs no such sweep.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from retold.config import Config

__all__ = ["EMBEDDED", "SCHEDULE", "schedule_for"]

EMBEDDED = "embedded"
"""The ``brokers`` tag of entries that run only with the embedded (file) broker."""

SCHEDULE: dict[str, dict[str, Any]] = {
    "recover": {"task": "retold.recover", "seconds": 30},
    "end_idle_sessions": {"task": "retold.end_idle_sessions", "seconds": 60},
    "temporal_review": {"task": "retold.temporal_review", "seconds": 600},
    "expire": {"task": "retold.expire", "seconds": 3600},
    "retain": {"task": "retold.retain", "seconds": 86400},
    "capacity": {"task": "retold.capacity", "seconds": 86400},
    "backfill": {"task": "retold.backfill", "seconds": 300},
    "check": {"task": "retold.check", "seconds": 900},
    "audit_sample": {"task": "retold.audit_sample", "seconds": 7 * 86400},
    "queue_maintenance": {"task": "retold.queue_maintenance", "seconds": 3600, "brokers": [EMBEDDED]},
}


def schedule_for(
    config: Config, schedule: dict[str, dict[str, Any]] | None = None
) -> dict[str, dict[str, Any]]:
    """The entries of ``schedule`` (default :data:`SCHEDULE`) that apply to ``config``'s
    broker: embedded-only entries are dropped unless ``queue.broker_url`` is unset (the
    embedded file broker) or an explicit ``sqla+`` URL."""
    url = config.queue.broker_url
    embedded = url is None or url.startswith("sqla+")
    return {
        name: dict(entry)
        for name, entry in (SCHEDULE if schedule is None else schedule).items()
        if embedded or EMBEDDED not in entry.get("brokers", ())
    }
