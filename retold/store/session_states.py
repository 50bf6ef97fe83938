"""What state each session is in, for operators: ``retold sessions`` and the session
counts of ``retold metrics``.

A session's state follows from its row: ``open`` until it ends, ``extracted`` once
extraction finished, ``failed`` when a newer schema parks it after its last allowed
attempt, ``blocked`` when that schema holds it until a hosted model is configured,
``extracting`` while a live claim holds it, and ``pending`` otherwise (what ``recover``
enqueues). How many attempts it took and the last error come from the
extraction events every run appends, unless the ``sessions`` table records them itself:
the columns in :data:`RECORDED_COLUMNS` are read wherever the schema has them.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from retold.store.base import StoreBase, dt
from retold.util import from_iso, to_iso

__all__ = [
    "RECORDED_COLUMNS", "SESSION_STATES", "SessionQuery", "SessionState", "SessionStatesMixin",
    "SessionStatus",
]

SessionState = Literal["open", "pending", "extracting", "extracted", "failed", "blocked"]
SESSION_STATES: tuple[SessionState, ...] = ("open", "pending", "extracting", "extracted", "failed", "blocked")

RECORDED_COLUMNS: dict[str, str] = {
    "attempts": "extraction_attempts",
    "last_error": "extraction_last_error",
    "failed_at": "extraction_failed_at",
    "blocked_by": "extraction_blocked_by",
    "claim_seen_at": "claim_heartbeat_at",  # a claim's latest sign of life, where leases renew
}
"""What a ``sessions`` table may record itself -> its column, read wherever it exists: the
attempts and last error win over what the events say, a parked or blocked time sets the
state, and a renewed claim counts as live from its renewal."""

_Row = tuple[Any, ...]

# The events that end one extraction attempt: a success, or a failure with its reason.
_SUCCESS, _FAILURES = "extraction.run", ("extraction.failed", "extraction.not_configured")

_STATE = (
    "CASE WHEN s.ended_at IS NULL THEN 'open'"
    " WHEN s.extracted_at IS NOT NULL THEN 'extracted'"
    " WHEN {failed_at} IS NOT NULL THEN 'failed'"
    " WHEN {blocked_by} IS NOT NULL THEN 'blocked'"
    " WHEN coalesce({claim_seen_at}, s.extraction_started_at) >= :live_after THEN 'extracting'"
    " ELSE 'pending' END"
)
# Per session named in an extraction event: its attempts and latest success, and its
# latest failure with the reason (SQLite takes bare columns from the row holding the max).
# Both are read once per listing and joined in Python: SQLite builds no index on a
# grouped subquery, and a join against one scans it once per session.
_TRIES = (
    "SELECT json_extract(payload, '$.session_id') AS sid, count(*),"
    " max(CASE WHEN kind = ? THEN at END) FROM events WHERE kind IN (?, ?, ?) GROUP BY sid"
)
_ERRORS = (
    "SELECT json_extract(payload, '$.session_id') AS sid, max(at), kind, json_extract(payload, '$.stage'),"
    " json_extract(payload, '$.kind'), json_extract(payload, '$.message') FROM events"
    " WHERE kind IN (?, ?) GROUP BY sid"
)


@dataclass(frozen=True)
class SessionStatus:
    """One session as an operator sees it."""

    id: str
    agent_id: str
    user_id: str
    project_id: str | None
    state: SessionState
    started_at: datetime
    ended_at: datetime | None
    claimed_at: datetime | None  # when the current (or a stale) extraction claim was taken
    extracted_at: datetime | None
    attempts: int  # as the row counts them, else the runs that ended (success or failure)
    last_error: str | None  # why the latest attempt failed; None once a later one succeeded
    last_error_at: datetime | None


@dataclass(frozen=True)
class SessionQuery:
    """Which sessions to list: ``states`` (all when empty), ``failing`` (the latest attempt
    failed and no later one succeeded, or the session is parked or blocked), one user or
    agent; the ``limit`` most recently started, shown oldest first."""

    states: tuple[SessionState, ...] = ()
    failing: bool = False
    user_id: str | None = None
    agent_id: str | None = None
    limit: int = 50


class SessionStatesMixin(StoreBase):
    """Reads of ``sessions`` joined with their extraction events."""

    def session_statuses(self, query: SessionQuery, live_after: datetime) -> list[SessionStatus]:
        """The sessions ``query`` selects; a claim taken (or renewed) at or after
        ``live_after`` is live (its worker may still be running), an older one is stale and
        the session pending."""
        where, params = ["1 = 1"], {"live_after": to_iso(live_after)}
        states = ("failed", "blocked", "pending", "extracting") if query.failing else query.states
        if states:
            where.append(f"state IN ({', '.join(f':state{i}' for i in range(len(states)))})")
            params.update({f"state{i}": value for i, value in enumerate(states)})
        for key, value in (("user_id", query.user_id), ("agent_id", query.agent_id)):
            if value is not None:
                where.append(f"{key} = :{key}")
                params[key] = value
        # A failing filter reads every unextracted candidate: whether its latest attempt
        # failed is known only once the events are joined.
        limit = "" if query.failing else f" LIMIT {int(query.limit)}"
        with self.snapshot() as conn:
            recorded = _recorded_columns(conn)
            rows = conn.execute(
                "SELECT * FROM (SELECT s.id, s.agent_id, s.user_id, s.project_id,"
                f" {_STATE.format(**recorded)} AS state, s.started_at, s.ended_at,"
                " s.extraction_started_at, s.extracted_at,"
                f" {recorded['attempts']}, {recorded['last_error']} FROM sessions s)"
                f" WHERE {' AND '.join(where)} ORDER BY started_at DESC, id DESC{limit}",
                params,
            ).fetchall()
            tries = {row[0]: row[1:] for row in conn.execute(_TRIES, (_SUCCESS, _SUCCESS, *_FAILURES))}
            errors = {row[0]: row[1:] for row in conn.execute(_ERRORS, _FAILURES)}
        found = [_status(row, tries.get(row[0]), errors.get(row[0])) for row in rows]
        if query.failing:
            found = [s for s in found if s.state in ("failed", "blocked") or s.last_error is not None]
        return found[: query.limit][::-1]

    def session_state_counts(self, live_after: datetime) -> dict[SessionState, int]:
        """How many sessions are in each state (every state present, zero or not)."""
        with self._lock:
            state = _STATE.format(**_recorded_columns(self._conn))
            rows = self._conn.execute(
                f"SELECT {state} AS state, count(*) FROM sessions s GROUP BY state",
                {"live_after": to_iso(live_after)},
            ).fetchall()
        counts: dict[SessionState, int] = dict.fromkeys(SESSION_STATES, 0)
        counts.update({name: int(n) for name, n in rows})
        return counts

    def extraction_lags(self, since: datetime | None = None) -> list[float]:
        """Seconds from each extracted session's end to its extraction (the latest run, for
        a session extracted again), for sessions extracted at or after ``since``."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT ended_at, extracted_at FROM sessions WHERE extracted_at IS NOT NULL"
                " AND ended_at IS NOT NULL AND extracted_at >= ?",
                (to_iso(since) if since else "",),
            ).fetchall()
        return [max(0.0, (from_iso(done) - from_iso(end)).total_seconds()) for end, done in rows]


def _recorded_columns(conn: sqlite3.Connection) -> dict[str, str]:
    """Each :data:`RECORDED_COLUMNS` field as SQL: its column, or NULL where the schema
    has none."""
    present = {row[1] for row in conn.execute("PRAGMA table_info(sessions)")}
    return {name: f"s.{column}" if column in present else "NULL"
            for name, column in RECORDED_COLUMNS.items()}


def _status(row: _Row, tries: _Row | None, error: _Row | None) -> SessionStatus:
    sid, agent, user, project, state, started, ended, claimed, extracted, attempts, recorded_error = row
    count, succeeded_at = tries or (0, None)
    # The latest failure counts only while no later run succeeded and the session waits.
    error_at = error[0] if error and extracted is None and error[0] > (succeeded_at or "") else None
    derived = None if error is None or error_at is None else _reason(*error[1:])
    return SessionStatus(
        id=sid, agent_id=agent, user_id=user, project_id=project, state=state,
        started_at=from_iso(started), ended_at=dt(ended), claimed_at=dt(claimed),
        extracted_at=dt(extracted), attempts=int(count if attempts is None else attempts),
        last_error=derived if recorded_error is None else str(recorded_error), last_error_at=dt(error_at),
    )


def _reason(kind: str, stage: str | None, why: str | None, message: str | None) -> str:
    """A failure event as one line: ``failed at review (timeout): <message>``."""
    outcome = kind.removeprefix("extraction.")
    head = f"{outcome} at {stage or 'run'}" + ("" if why in (None, outcome) else f" ({why})")
    return f"{head}: {message}" if message else head
