"""Reading the audit log the way an operator asks about it: ``retold events``.

The log is append-only and grows with every write, so a query always has a limit and
takes the newest events that match; they come back oldest first, as a log reads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from retold.clock import from_iso, to_iso
from retold.store.base import StoreBase

__all__ = ["EventLogMixin", "EventQuery", "LoggedEvent", "prefix_range"]


@dataclass(frozen=True)
class EventQuery:
    """Which events to read. ``kind`` is one kind (``extraction.failed``) or, ending in
    ``*`` or ``.``, every kind under a prefix (``extraction.*``); ``session_id`` matches
    the session an event's payload names."""

    kind: str | None = None
    since: datetime | None = None
    record_id: str | None = None
    session_id: str | None = None
    limit: int = 50


@dataclass(frozen=True)
class LoggedEvent:
    """One row of ``events``, its payload parsed."""

    id: str
    at: datetime
    kind: str
    actor: str
    record_id: str | None
    entity_id: str | None
    payload: dict[str, Any]


def prefix_range(prefix: str) -> list[str]:
    """``[low, high)`` bounds of every text that starts with ``prefix`` (not empty), so
    SQLite can use an index where ``LIKE 'prefix%'`` would scan."""
    return [prefix, prefix[:-1] + chr(ord(prefix[-1]) + 1)]


class EventLogMixin(StoreBase):
    """Filtered reads of ``events``."""

    def find_events(self, query: EventQuery) -> list[LoggedEvent]:
        """The newest ``query.limit`` events matching ``query``, oldest first."""
        clauses, params = ["1 = 1"], []
        prefix = (query.kind or "").rstrip("*")
        if query.kind and query.kind.endswith(("*", ".")):
            if prefix:  # a range on the kind index rather than a scan with LIKE
                clauses.append("kind >= ? AND kind < ?")
                params += prefix_range(prefix)
        elif query.kind:
            clauses.append("kind = ?")
            params.append(query.kind)
        if query.since is not None:
            clauses.append("at >= ?")
            params.append(to_iso(query.since))
        if query.record_id is not None:
            clauses.append("record_id = ?")
            params.append(query.record_id)
        if query.session_id is not None:
            clauses.append("json_extract(payload, '$.session_id') = ?")
            params.append(query.session_id)
        with self._lock:
            rows = self._conn.execute(
                "SELECT id, at, kind, actor, record_id, entity_id, payload FROM events"
                f" WHERE {' AND '.join(clauses)} ORDER BY id DESC LIMIT ?",
                [*params, query.limit],
            ).fetchall()
        return [LoggedEvent(eid, from_iso(at), kind, actor, record_id, entity_id, json.loads(payload))
                for eid, at, kind, actor, record_id, entity_id, payload in reversed(rows)]
