"""Validity windows for records superseded before supersession kept them.

Migration 21 on both backends: each superseded record without an end gets the one the
write path would have given it (:func:`retold.policy.validity.closed_at`), from the start
of what replaced it, found in this order: the record that names it in ``supersedes_id``,
the ``record.superseded`` event's ``by``, and for history that arrived late the current
record its ``record.created`` event names. A record replaced by a correction
(``memory_revise``) is left as the write path leaves it: undated on purpose. Whatever
else has no successor left (erased, or its events thinned) stays undated and is counted.

Written with portable SQL and read into Python, so the SQLite and PostgreSQL migrations
share it; timestamps are the store's fixed-width text, so text order is time order.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

__all__ = ["Backfill", "backfill_validity"]


@dataclass(frozen=True)
class Backfill:
    """What one backfill did: windows ended, records it could not date, corrections left."""

    dated: int
    undated: int
    corrections: int

    def note(self) -> str | None:
        """The operator's note, or None when there was no superseded record to date."""
        if not (self.dated or self.undated or self.corrections):
            return None
        return (f"validity windows: {self.dated} superseded records now end where their successor"
                f" starts; {self.undated} could not be dated (no successor found) and as-of search"
                f" leaves them out; {self.corrections} replaced by corrections stay undated")


def _payloads(conn: Any, kind: str, like: str = "%") -> list[tuple[str, dict[str, Any]]]:
    out = []
    for record_id, payload in conn.execute(
            "SELECT record_id, payload FROM events WHERE kind = ? AND record_id IS NOT NULL"
            " AND payload LIKE ? ORDER BY at, id", (kind, like)).fetchall():
        try:
            data = json.loads(payload)
        except ValueError:
            continue  # an unreadable payload dates nothing
        if isinstance(data, dict):
            out.append((str(record_id), data))
    return out


def backfill_validity(conn: Any) -> Backfill:
    """End the windows of superseded records from their successors' starts; one pass
    inside the caller's transaction."""
    start: dict[str, str] = {}
    superseded: dict[str, str | None] = {}  # id -> its valid_until
    successor_start: dict[str, str] = {}
    for record_id, status, begins, valid_until, supersedes_id in conn.execute(
            "SELECT id, status, coalesce(valid_from, event_at), valid_until, supersedes_id"
            " FROM records").fetchall():
        start[record_id] = begins
        if status == "superseded":
            superseded[record_id] = valid_until
        if supersedes_id is not None:
            known = successor_start.get(supersedes_id)
            successor_start[supersedes_id] = begins if known is None else min(known, begins)
    corrected: set[str] = set()
    replaced_by: dict[str, str] = {}
    for record_id, payload in _payloads(conn, "record.superseded"):
        if payload.get("manual_revision"):
            corrected.add(record_id)
        elif isinstance(payload.get("by"), str):
            replaced_by.setdefault(record_id, payload["by"])
    for record_id, payload in _payloads(conn, "record.created", "%superseded_on_arrival_by%"):
        if isinstance(payload.get("superseded_on_arrival_by"), str):
            replaced_by.setdefault(record_id, payload["superseded_on_arrival_by"])
    updates: list[tuple[str, str]] = []
    undated = corrections = 0
    for record_id, valid_until in superseded.items():
        if record_id in corrected:
            corrections += 1
            continue
        change = successor_start.get(record_id) or start.get(replaced_by.get(record_id, ""))
        if change is None:
            undated += valid_until is None
            continue
        if valid_until is not None and valid_until <= change:
            continue  # it already ended, no later than the change
        updates.append((max(change, start[record_id]), record_id))
    if updates:
        conn.executemany("UPDATE records SET valid_until = ? WHERE id = ?", updates)
    return Backfill(len(updates), undated, corrections)
