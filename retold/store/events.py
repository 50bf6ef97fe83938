"""The append-only audit log (LLD 3.6)."""

from __future__ import annotations

import json
from typing import Any

from retold.store.base import StoreBase

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
        """Append one audit event (LLD 3.6) in its own transaction, or the caller's."""
        with self.atomic() as conn:
            return self.insert_event(conn, kind, actor, payload or {}, record_id, entity_id)

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

