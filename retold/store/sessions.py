"""Sessions and their numbered turns (LLD 3.5, 12)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import cast, get_args

from retold.errors import StoreError
from retold.models import Role, Turn
from retold.store.base import StoreBase, dt, ts
from retold.util import from_iso, to_iso

__all__ = ["SessionRow", "SessionsMixin"]

_ROLES: tuple[str, ...] = get_args(Role)


@dataclass(frozen=True)
class SessionRow:
    """One row of ``sessions`` (LLD 3.5), timestamps parsed."""

    id: str
    agent_id: str
    user_id: str
    project_id: str | None
    started_at: datetime
    ended_at: datetime | None
    extraction_started_at: datetime | None
    extracted_at: datetime | None


class SessionsMixin(StoreBase):
    """Rows of ``sessions`` and ``session_turns``."""

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
            cursor = conn.execute(
                "INSERT INTO sessions(id, agent_id, user_id, project_id, started_at)"
                " VALUES (?, ?, ?, ?, ?) ON CONFLICT(id) DO NOTHING",
                (session_id, agent_id, user_id, project_id, to_iso(started_at)),
            )
            return cursor.rowcount == 1

    def get_session(self, session_id: str) -> SessionRow | None:
        """The session row, or None when there is none."""
        with self._lock:
            row = self._conn.execute(
                "SELECT id, agent_id, user_id, project_id, started_at, ended_at,"
                " extraction_started_at, extracted_at FROM sessions WHERE id = ?",
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
        )

    def append_turn(self, session_id: str, role: str, content: str, at: datetime) -> Turn:
        """Append the next numbered turn (1, 2, ...) of a session and return it.

        Tool turns carry the result text, not the call (LLD 3.5); the caller passes it as
        given. Raises ValueError for an unknown role and StoreError for an unknown session.
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

        The return value lets ``on_session_end`` schedule extraction exactly once (LLD 12).
        """
        with self.atomic() as conn:
            cursor = conn.execute(
                "UPDATE sessions SET ended_at = ? WHERE id = ? AND ended_at IS NULL",
                (ts(at), session_id),
            )
            return cursor.rowcount == 1
