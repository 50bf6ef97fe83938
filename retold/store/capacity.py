"""Capacity: how many live records each scope holds, what the capacity score reads of
them, and the archive that moves the chosen ones to history.

An archived record's status is ``expired``, the status of a record that aged out: it
stays searchable with ``include_history``, keeps its FTS row and vector, and one
``record.archived`` event holds the score that chose it and the status it had, which a
restore reads back. What to archive is decided in :mod:`retold.policy.capacity`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from retold.clock import from_iso, to_iso
from retold.models import Scope
from retold.store.base import ACTIVE_SQL, NewEvent, StoreBase, chunks, dt, marks
from retold.store.sweeps import ChangedRow

__all__ = ["ARCHIVED", "CapacityMixin", "CapacityRow"]

ARCHIVED = "record.archived"


@dataclass(frozen=True)
class CapacityRow:
    """What the capacity score reads of one live record."""

    record_id: str
    seq: int
    status: str
    source_kind: str
    has_evidence: bool
    subject: str  # the subject entity, or the subject text when no entity is linked
    attribute: str | None  # None for an episode: events replace nothing
    created_at: datetime
    event_at: datetime
    last_used_at: datetime | None  # latest reinforcement, search return or restore
    pinned: bool


class CapacityMixin(StoreBase):
    """Live counts per scope, the rows the capacity score reads, and the archive."""

    def live_counts(self, kind: str) -> dict[str, int]:
        """Live (provisional or confirmed) records per scope id of one scope kind."""
        with self._lock:
            return {str(scope_id): int(n) for scope_id, n in self._conn.execute(
                f"SELECT scope_id, count(*) FROM records WHERE scope_kind = ? AND status IN {ACTIVE_SQL}"
                " GROUP BY scope_id", (kind,))}

    def last_uses(self, since: datetime) -> dict[str, datetime]:
        """When each record was last useful beyond its reinforcements: the latest search
        logged since ``since`` that returned it, or its latest restore."""
        used: dict[str, str] = {}
        with self._lock:
            # The search log names returned ids as a JSON list.
            for at, returned in self._conn.execute(
                    "SELECT at, returned FROM search_log WHERE at >= ? AND returned != '[]'",
                    (to_iso(since),)):
                for record_id in json.loads(returned):
                    if at > used.get(record_id, ""):
                        used[record_id] = at
            for record_id, at in self._conn.execute(
                    "SELECT record_id, max(at) FROM events WHERE kind = 'record.restored'"
                    " AND record_id IS NOT NULL GROUP BY record_id"):
                if at > used.get(record_id, ""):
                    used[record_id] = at
        return {record_id: from_iso(at) for record_id, at in used.items()}

    def capacity_rows(self, scope: Scope, used: dict[str, datetime]) -> list[CapacityRow]:
        """Every live record of ``scope``, last used at the later of its latest
        reinforcement and its entry in ``used`` (:meth:`last_uses`)."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT r.id, r.seq, r.status, r.source_kind,"
                " CASE WHEN coalesce(r.evidence, '') = '' THEN 0 ELSE 1 END,"
                # An episode reports one event and replaces none, so it holds no current
                # value for the score's protection to keep.
                " coalesce(r.subject_entity_id, r.subject),"
                " CASE WHEN r.type = 'episodic' THEN NULL ELSE r.attribute END, r.created_at, r.event_at,"
                " r.last_reinforced_at, CASE WHEN p.record_id IS NULL THEN 0 ELSE 1 END"
                " FROM records r LEFT JOIN record_pins p ON p.record_id = r.id"
                f" WHERE r.scope_kind = ? AND r.scope_id = ? AND r.status IN {ACTIVE_SQL} ORDER BY r.seq",
                (scope.kind, scope.id)).fetchall()
        out = []
        for (record_id, seq, status, source_kind, evidence, subject, attribute, created, event,
             reinforced, pinned) in rows:
            last = max((t for t in (dt(reinforced), used.get(record_id)) if t is not None), default=None)
            out.append(CapacityRow(str(record_id), int(seq), str(status), str(source_kind), bool(evidence),
                                   str(subject), attribute, from_iso(created), from_iso(event), last,
                                   bool(pinned)))
        return out

    def archive(self, choices: Sequence[tuple[str, dict[str, Any]]], actor: str) -> list[ChangedRow]:
        """Archive these records, each with its event payload, in one transaction.

        A record that stopped being live, or was pinned, since it was chosen is left
        alone: the choice was made outside the write lock.
        """
        if not choices:
            return []
        payloads = dict(choices)
        with self.atomic() as conn:
            live: list[tuple[str, str]] = []
            for chunk in chunks(list(payloads)):
                live += conn.execute(
                    f"SELECT id, status FROM records WHERE id IN ({marks(chunk)}) AND status IN {ACTIVE_SQL}"
                    " AND id NOT IN (SELECT record_id FROM record_pins) ORDER BY seq", chunk).fetchall()
            if not live:
                return []
            version = self.bump_version(conn)
            self._set_status(conn, [record_id for record_id, _ in live], "expired", version)
            for record_id, status in live:
                self._insert_event(conn, NewEvent(
                    ARCHIVED, actor, {**payloads[record_id], "previous_status": status}, record_id))
            return [ChangedRow(record_id, version) for record_id, _ in live]

    def archived_from(self, record_id: str) -> str | None:
        """The status an archived record had, when its latest archive is newer than its
        latest restore; None when it is not archived."""
        with self._lock:
            row = self._conn.execute(
                "SELECT kind, payload FROM events WHERE record_id = ?"
                " AND kind IN ('record.archived', 'record.restored') ORDER BY at DESC, id DESC LIMIT 1",
                (record_id,)).fetchone()
        if row is None or row[0] != ARCHIVED:
            return None
        return str(json.loads(row[1]).get("previous_status") or "provisional")
