"""Sessions: their numbered turns, their end, and their extraction stages.

A session is extracted by whoever claims it (:mod:`retold.store.claims`);
``sessions.extracted_at`` is the finish line. Each extraction stage
(``extract``, ``review``) saves its output in ``extraction_stages`` before the next stage
starts, so a worker killed after a hosted model call resumes without paying for that call
again (docs/architecture.md, "The session path").
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, cast, get_args

from retold.clock import from_iso, to_iso
from retold.errors import StoreError
from retold.models import Role, Turn
from retold.store.base import StoreBase, dt, ts
from retold.store.upserts import Upsert

__all__ = ["IdleSession", "SessionRow", "SessionsMixin", "Stage", "StageRow"]

# A new session; one that exists keeps its owner.
_NEW_SESSION = Upsert("sessions", ("id", "agent_id", "user_id", "project_id", "started_at"))
# A stage's output, replacing the one a rerun produced before.
_PUT_STAGE = Upsert("extraction_stages", ("session_id", "stage", "output", "model", "prompt_version", "at"),
                    update=("output", "model", "prompt_version", "at"))

_ROLES: tuple[str, ...] = get_args(Role)
Stage = Literal["extract", "review"]
_STAGES: tuple[str, ...] = get_args(Stage)


@dataclass(frozen=True)
class SessionRow:
    """One row of ``sessions``, timestamps parsed."""

    id: str
    agent_id: str
    user_id: str
    project_id: str | None
    started_at: datetime
    ended_at: datetime | None
    extraction_started_at: datetime | None
    extracted_at: datetime | None
    # The extraction's bookkeeping (docs/decisions.md, "Failed extractions are retried,
    # then parked"): the claim's holder and heartbeat, the failed attempts and when the
    # next one is due, the parked and blocked states and the last hand-off to the queue.
    claim_token: str | None = None
    claim_heartbeat_at: datetime | None = None
    attempts: int = 0
    last_error: str | None = None
    next_attempt_at: datetime | None = None
    failed_at: datetime | None = None
    blocked_by: str | None = None
    enqueued_at: datetime | None = None


@dataclass(frozen=True)
class IdleSession:
    """An open session and when it last saw a turn (its start, before the first turn)."""

    id: str
    agent_id: str
    last_active_at: datetime


@dataclass(frozen=True)
class StageRow:
    """One persisted stage output with the model and prompt version that produced it."""

    session_id: str
    stage: Stage
    output: dict[str, Any]
    model: str
    prompt_version: str
    at: datetime


class SessionsMixin(StoreBase):
    """Rows of ``sessions``, ``session_turns`` and ``extraction_stages``."""

    def create_session(
        self,
        session_id: str,
        agent_id: str,
        user_id: str,
        project_id: str | None,
        started_at: datetime,
    ) -> bool:
        """Create a session row; return False (and change nothing) when it already exists.

        Idempotent so a repeated ``on_session_start`` never rewrites who owns a session.
        """
        with self.atomic() as conn:
            inserted = _NEW_SESSION.execute(conn, (session_id, agent_id, user_id, project_id,
                                                    to_iso(started_at)))
            return inserted == 1

    def get_session(self, session_id: str) -> SessionRow | None:
        """The session row, or None when there is none."""
        with self._lock:
            row = self._conn.execute(
                "SELECT id, agent_id, user_id, project_id, started_at, ended_at,"
                " extraction_started_at, extracted_at, claim_token, claim_heartbeat_at,"
                " extraction_attempts, extraction_last_error, extraction_next_attempt_at,"
                " extraction_failed_at, extraction_blocked_by, extraction_enqueued_at"
                " FROM sessions WHERE id = ?",
                (session_id,),
            ).fetchone()
        if row is None:
            return None
        return SessionRow(
            id=row[0],
            agent_id=row[1],
            user_id=row[2],
            project_id=row[3],
            started_at=from_iso(row[4]),
            ended_at=dt(row[5]),
            extraction_started_at=dt(row[6]),
            extracted_at=dt(row[7]),
            claim_token=row[8],
            claim_heartbeat_at=dt(row[9]),
            attempts=int(row[10]),
            last_error=row[11],
            next_attempt_at=dt(row[12]),
            failed_at=dt(row[13]),
            blocked_by=row[14],
            enqueued_at=dt(row[15]),
        )

    def append_turn(self, session_id: str, role: str, content: str, at: datetime) -> Turn:
        """Append the next numbered turn (1, 2, ...) of a session and return it.

        Tool turns carry the result text, not the call; the caller passes it as given.
        Raises ValueError for an unknown role and StoreError for an unknown session.
        """
        if role not in _ROLES:
            raise ValueError(f"role must be one of {', '.join(_ROLES)}, got {role!r}")
        stamp = to_iso(at)  # refuses a naive datetime before anything is written
        with self.atomic() as conn:
            if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone() is None:
                raise StoreError(f"no session {session_id}")
            # BEGIN IMMEDIATE holds the write lock, so max(turn) + 1 cannot race with
            # another writer, in this process or another one.
            number = int(
                conn.execute(
                    "SELECT coalesce(max(turn), 0) + 1 FROM session_turns WHERE session_id = ?",
                    (session_id,),
                ).fetchone()[0]
            )
            conn.execute(
                "INSERT INTO session_turns(session_id, turn, role, content, at) VALUES (?, ?, ?, ?, ?)",
                (session_id, number, role, content, stamp),
            )
        return Turn(session_id, number, cast(Role, role), content, from_iso(stamp))

    def turns(self, session_id: str) -> list[Turn]:
        """Every turn of a session in turn order (empty when there are none)."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT turn, role, content, at FROM session_turns WHERE session_id = ? ORDER BY turn",
                (session_id,),
            ).fetchall()
        return [Turn(session_id, int(n), role, content, from_iso(at)) for n, role, content, at in rows]

    def last_turn_at(self, session_id: str) -> datetime | None:
        """When the latest turn of a session arrived, or None without turns."""
        with self._lock:
            row = self._conn.execute(
                "SELECT at FROM session_turns WHERE session_id = ? ORDER BY turn DESC LIMIT 1",
                (session_id,),
            ).fetchone()
        return None if row is None else from_iso(row[0])

    def end_session(self, session_id: str, at: datetime) -> bool:
        """Set ``ended_at`` unless the session is already ended; return whether it changed.

        The return value lets ``on_session_end`` schedule extraction exactly once.
        """
        with self.atomic() as conn:
            cursor = conn.execute(
                "UPDATE sessions SET ended_at = ? WHERE id = ? AND ended_at IS NULL",
                (ts(at), session_id),
            )
            return cursor.rowcount == 1

    def idle_sessions(self, last_active_before: datetime) -> list[IdleSession]:
        """Open sessions whose last turn (or start, without turns) is older than
        ``last_active_before``, longest idle first: what the idle sweep ends."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT id, agent_id, last_active_at FROM ("
                " SELECT s.id, s.agent_id, coalesce((SELECT t.at FROM session_turns t"
                "  WHERE t.session_id = s.id ORDER BY t.turn DESC LIMIT 1), s.started_at)"
                "  AS last_active_at FROM sessions s WHERE s.ended_at IS NULL) AS open_sessions"
                " WHERE last_active_at < ? ORDER BY last_active_at, id",
                (to_iso(last_active_before),),
            ).fetchall()
        return [IdleSession(str(sid), str(agent), from_iso(at)) for sid, agent, at in rows]

    # -- persisted stage outputs ---------------------------------------------------------

    def save_stage(
        self, session_id: str, stage: Stage, output_json: dict[str, Any], model: str, prompt_version: str,
        *, claim_token: str | None = None,
    ) -> bool:
        """Persist one stage's output (replacing an earlier one) in its own transaction, so
        it is durable before the next stage starts.

        With ``claim_token`` nothing is saved (False) unless that claim still holds the
        session: a worker whose claim was taken over must not replace its successor's
        stage output.
        """
        if stage not in _STAGES:
            raise ValueError(f"stage must be one of {', '.join(_STAGES)}, got {stage!r}")
        with self.atomic() as conn:
            if claim_token is not None and conn.execute(
                "SELECT 1 FROM sessions WHERE id = ? AND claim_token = ?", (session_id, claim_token)
            ).fetchone() is None:
                return False
            _PUT_STAGE.execute(conn, (session_id, stage, json.dumps(output_json, sort_keys=True), model,
                                      prompt_version, to_iso(self.clock.now())))
        return True

    def stage_row(self, session_id: str, stage: Stage) -> StageRow | None:
        """The persisted stage with its provenance, or None."""
        with self._lock:
            row = self._conn.execute(
                "SELECT output, model, prompt_version, at FROM extraction_stages"
                " WHERE session_id = ? AND stage = ?",
                (session_id, stage),
            ).fetchone()
        if row is None:
            return None
        return StageRow(session_id, stage, json.loads(row[0]), row[1], row[2], from_iso(row[3]))

    def clear_stages(self, session_id: str) -> int:
        """Forget every persisted stage of a session (the next run calls the models again)."""
        with self.atomic() as conn:
            return conn.execute(
                "DELETE FROM extraction_stages WHERE session_id = ?", (session_id,)
            ).rowcount
