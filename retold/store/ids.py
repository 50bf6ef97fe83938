"""Finding a record or a session from part of its id, as a person types it.

Rendered results show a record's short id, the last eight hex digits of its UUIDv7 (the
random end; the start is a timestamp that records written together share), and a person
who copies a long id often copies only its start. So a part names every id that starts or
ends with it; the caller decides what one, none or several mean.
"""

from __future__ import annotations

from typing import Literal

from retold.store.base import StoreBase
from retold.store.event_log import prefix_range

__all__ = ["SHORTEST_PART", "IdsMixin"]

SHORTEST_PART = 4  # a shorter part matches only a whole id: two characters name half a store

_Table = Literal["records", "sessions"]


class IdsMixin(StoreBase):
    """Ids of records and sessions named by part of their id."""

    def record_ids_named(self, part: str, limit: int) -> list[str]:
        """``[part]`` when a record has that id; else the ids of at most ``limit`` records
        whose id starts or ends with ``part`` (none for a part shorter than
        :data:`SHORTEST_PART`), in id order."""
        return self._ids_named("records", part, limit)

    def session_ids_named(self, part: str, limit: int) -> list[str]:
        """As :meth:`record_ids_named`, for session ids."""
        return self._ids_named("sessions", part, limit)

    def _ids_named(self, table: _Table, part: str, limit: int) -> list[str]:
        if not part:
            return []
        with self._lock:
            if self._conn.execute(f"SELECT 1 FROM {table} WHERE id = ?", (part,)).fetchone():
                return [part]
            if len(part) < SHORTEST_PART:
                return []
            # The start is a range on the primary key (no wildcard in what was typed can
            # widen it); the end needs LIKE, with its wildcards escaped, and a scan.
            starts = self._conn.execute(
                f"SELECT id FROM {table} WHERE id >= ? AND id < ? ORDER BY id LIMIT ?",
                (*prefix_range(part), limit)).fetchall()
            escaped = part.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            ends = self._conn.execute(
                f"SELECT id FROM {table} WHERE id LIKE ? ESCAPE '\\' ORDER BY id LIMIT ?",
                ("%" + escaped, limit)).fetchall()
        # SQLite's LIKE ignores ASCII case and PostgreSQL's does not; compare here so both
        # stores name the same ids.
        found = {str(row[0]) for row in (*starts, *ends)}
        return sorted(i for i in found if i.startswith(part) or i.endswith(part))[:limit]
