"""The counts behind ``retold metrics`` and the workers' Prometheus endpoint, read from
what the store already keeps: write and extraction events, and ``search_log`` rows.

Every count covers the rows still kept; ``since`` narrows it to rows at or after a moment.
"""

from __future__ import annotations

from datetime import datetime

from retold.clock import to_iso
from retold.store.base import StoreBase
from retold.store.event_log import prefix_range

__all__ = ["CountsMixin"]

# A write event's outcome is ``created``, ``reinforced``, ``conflict:<id>``,
# ``superseded:<id>``, ...; the part before the colon is what is counted.
_WRITE_OUTCOMES = (
    "SELECT coalesce(substr(outcome, 1, instr(outcome || ':', ':') - 1),"
    "  CASE kind WHEN 'record.reinforced' THEN 'reinforced' ELSE 'created' END) AS name, count(*)"
    " FROM (SELECT kind, json_extract(payload, '$.outcome') AS outcome FROM events"
    "  WHERE kind IN ('record.created', 'record.reinforced') AND at >= ?) AS writes"
    " GROUP BY name"
)


class CountsMixin(StoreBase):
    """Counting reads over ``events`` and ``search_log``."""

    def write_outcome_counts(self, since: datetime | None = None) -> dict[str, int]:
        """Memory writes by outcome (``created``, ``reinforced``, ``already_reinforced``,
        ``superseded``, ``superseded_on_arrival``, ``conflict``), whoever wrote them."""
        return self._counts(_WRITE_OUTCOMES, since)

    def event_kind_counts(self, prefix: str, since: datetime | None = None) -> dict[str, int]:
        """Events whose kind starts with ``prefix`` (``extraction.``), by the rest of the kind."""
        return self._counts(
            "SELECT substr(kind, ?), count(*) FROM events WHERE kind >= ? AND kind < ? AND at >= ?"
            " GROUP BY kind", since, len(prefix) + 1, *prefix_range(prefix))

    def search_counts(self, since: datetime | None = None) -> dict[str, tuple[int, int]]:
        """Logged searches by trigger (``tool``, ``host``): (searches, those that returned nothing)."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT trigger, count(*), count(CASE WHEN returned = '[]' THEN 1 END) FROM search_log"
                " WHERE at >= ? GROUP BY trigger", (_from(since),),
            ).fetchall()
        return {str(trigger): (int(total), int(empty or 0)) for trigger, total, empty in rows}

    def _counts(self, sql: str, since: datetime | None, *params: object) -> dict[str, int]:
        with self._lock:
            rows = self._conn.execute(sql, (*params, _from(since))).fetchall()
        return {str(name): int(n) for name, n in rows}


def _from(since: datetime | None) -> str:
    return "" if since is None else to_iso(since)
