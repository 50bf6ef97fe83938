"""What state each session is in, for operators: ``retold sessions`` and the session
counts of ``retold metrics``.

A session's state follows from its row: ``open`` until it ends, ``extracted`` once
extraction finished, ``failed`` when it was parked after its last allowed attempt,
``blocked`` while it waits for a hosted model to be configured, ``extracting`` while a
live claim holds it (taken or renewed recently enough), and ``pending`` otherwise (what
``recover`` hands to the queue). The row also counts the failed attempts and keeps the
last error; when that error happened comes from the latest failure event.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from retold.clock import from_iso, to_iso
from retold.store.base import StoreBase, dt

__all__ = ["SESSION_STATES", "SessionQuery", "SessionState", "SessionStatesMixin", "SessionStatus"]

SessionState = Literal["open", "pending", "extracting", "extracted", "failed", "blocked"]
SESSION_STATES: tuple[SessionState, ...] = ("open", "pending", "extracting", "extracted", "failed", "blocked")

_Row = tuple[Any, ...]

_STATE = (
    "CASE WHEN s.ended_at IS NULL THEN 'open'"
    " WHEN s.extracted_at IS NOT NULL THEN 'extracted'"
    " WHEN s.extraction_failed_at IS NOT NULL THEN 'failed'"
    " WHEN s.extraction_blocked_by IS NOT NULL THEN 'blocked'"
    " WHEN coalesce(s.claim_heartbeat_at, s.extraction_started_at) >= :live_after THEN 'extracting'"
    " ELSE 'pending' END"
)
# When each session's latest extraction failure happened. Read once per listing and joined
# in Python: SQLite builds no index on a grouped subquery, and a join against one scans it
# once per session.
_FAILED_AT = (
    "SELECT json_extract(payload, '$.session_id') AS sid, max(at) FROM events"
    " WHERE kind IN ('extraction.failed', 'extraction.not_configured') GROUP BY sid"
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
    attempts: int  # failed attempts since the last reset
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
    """Reads of ``sessions`` for operators."""

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
        if query.failing:
            where.append("(state IN ('failed', 'blocked') OR last_error IS NOT NULL)")
        with self.snapshot() as conn:
            rows = conn.execute(
                "SELECT * FROM (SELECT s.id, s.agent_id, s.user_id, s.project_id,"
                f" {_STATE} AS state, s.started_at, s.ended_at, s.extraction_started_at,"
                " s.extracted_at, s.extraction_attempts,"
                " CASE WHEN s.extracted_at IS NULL THEN s.extraction_last_error END AS last_error"
                " FROM sessions s) AS states"
                f" WHERE {' AND '.join(where)} ORDER BY started_at DESC, id DESC LIMIT {int(query.limit)}",
                params,
            ).fetchall()
            failed_at = dict(conn.execute(_FAILED_AT).fetchall()) if rows else {}
        return [_status(row, failed_at.get(row[0])) for row in rows][::-1]

    def session_state_counts(self, live_after: datetime) -> dict[SessionState, int]:
        """How many sessions are in each state (every state present, zero or not)."""
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {_STATE} AS state, count(*) FROM sessions s GROUP BY state",
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


def _status(row: _Row, failed_at: str | None) -> SessionStatus:
    sid, agent, user, project, state, started, ended, claimed, extracted, attempts, error = row
    return SessionStatus(
        id=sid, agent_id=agent, user_id=user, project_id=project, state=state,
        started_at=from_iso(started), ended_at=dt(ended), claimed_at=dt(claimed),
        extracted_at=dt(extracted), attempts=int(attempts or 0), last_error=error,
        last_error_at=dt(failed_at) if error is not None else None,
    )
