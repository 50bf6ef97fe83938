"""The append-only audit log (LLD 3.6)."""

from __future__ import annotations

import json
from typing import Any

from retold.store.base import StoreBase
from retold.util import new_id, to_iso

__all__ = ["EventsMixin"]


class EventsMixin(StoreBase):
    """Append and read ``events``; rows are never updated or deleted."""

    def append_event(
        self,
        kind: str,
        actor: str,
        payload: dict[str, Any] | None = None,
        *,
        record_id: str | None = None,
        entity_id: str | None = None,
    ) -> str:
        """Append one audit event (LLD 3.6); returns its id."""
        event_id = new_id()
        with self.atomic() as conn:
            conn.execute(
                "INSERT INTO events(id, at, kind, actor, record_id, entity_id, payload)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (event_id, to_iso(self.clock.now()), kind, actor, record_id, entity_id,
                 json.dumps(payload or {}, sort_keys=True, default=str)),
            )
        return event_id

    def events(self, record_id: str | None = None, kind: str | None = None) -> list[dict[str, Any]]:
        """Events in order, optionally for one record or of one kind."""
        sql, params = "SELECT id, at, kind, actor, record_id, entity_id, payload FROM events", []
        clauses = []
        if record_id is not None:
            clauses.append("record_id = ?")
            params.append(record_id)
        if kind is not None:
            clauses.append("kind = ?")
            params.append(kind)
        if clauses:
            sql += " WHERE " + " AND ".join(clauses)
        with self._lock:
            rows = self._conn.execute(sql + " ORDER BY id", params).fetchall()
        keys = ("id", "at", "kind", "actor", "record_id", "entity_id", "payload")
        return [dict(zip(keys, (*row[:6], json.loads(row[6])), strict=True)) for row in rows]

