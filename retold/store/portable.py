"""The reads behind ``retold export``: one scope's records a page at a time, with
everything that travels with a record (its entity links and roles, conflicts, activation,
pin and vector), the entities they link, and their events.

Pages are keyed by ``seq`` rather than read in one go, so an export of any size holds one
page in memory; a record written during the export lands after the last page read or is
simply not in the file, never half in it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from retold.models import Scope
from retold.store.base import StoreBase, chunks, marks, scope_clause
from retold.store.family import EmbeddingFamily

__all__ = ["PORTABLE_COLUMNS", "PortableMixin", "PortableRecord"]

# Every column of a record that an export carries; seq and index_version are this store's
# own bookkeeping and are assigned afresh where the record lands, and so are the class and
# the masked text, which the importing tenant's pack decides (from the text and the
# extractor's label, which travels).
PORTABLE_COLUMNS = (
    "id", "type", "version", "content", "subject", "subject_entity_id", "attribute", "source_kind",
    "source_ref", "creator_agent_id", "evidence", "created_at", "event_at", "expires_at", "valid_from",
    "valid_until", "review_at", "review_flagged_at", "confidence", "status", "supersedes_id",
    "reinforcements", "last_reinforced_at", "tags", "sensitivity_label",
)


@dataclass
class PortableRecord:
    """One record as an export writes it: its columns (times as stored text) and what
    travels with it."""

    seq: int
    columns: dict[str, Any]
    links: list[tuple[str, str]] = field(default_factory=list)  # (entity id, role), about first
    conflicts: list[str] = field(default_factory=list)
    activation: dict[str, Any] | None = None
    pinned: bool = False
    vector: np.ndarray | None = None


class PortableMixin(StoreBase):
    """Paged reads of one scope for an export."""

    def portable_count(self, scope: Scope, statuses: Sequence[str]) -> int:
        """How many records of ``scope`` in ``statuses`` the export will write, counted
        through the scope index and again by a table scan in one snapshot, so that an
        export from a damaged index is refused before its first line (see
        :meth:`portable_agrees`)."""
        sql, params = scope_clause([scope])
        where = f"{sql} AND status IN ({marks(statuses)})"
        args = [*params, *statuses]
        with self._one_view() as conn:
            indexed = int(conn.execute(f"SELECT count(*) FROM records WHERE {where}", args).fetchone()[0])
            scanned = self._scanned_count(conn, where, args)
        if scanned is not None and scanned != indexed:
            self._index_disagrees(f"its scope index lists {indexed} records of {scope} where a scan of the"
                                  f" table finds {scanned}")
        return indexed

    def portable_entity_ids(self, scope: Scope, statuses: Sequence[str]) -> list[str]:
        """Every entity the scope's records in ``statuses`` link or are about."""
        sql, params = scope_clause([scope])
        where = f"{sql} AND status IN ({marks(statuses)})"
        with self._lock:
            rows = self._conn.execute(
                "SELECT e.entity_id FROM record_entities e"
                f" WHERE e.record_id IN (SELECT id FROM records WHERE {where}) UNION"
                f" SELECT subject_entity_id FROM records WHERE {where} AND subject_entity_id IS NOT NULL",
                [*params, *statuses, *params, *statuses]).fetchall()
        return sorted(str(row[0]) for row in rows)

    def portable_page(self, scope: Scope, statuses: Sequence[str], after_seq: int, limit: int,
                      family: EmbeddingFamily | None) -> list[PortableRecord]:
        """Up to ``limit`` records of ``scope`` in ``statuses`` after ``after_seq``, in seq
        order, each with its links, conflicts, activation, pin and (in ``family``) vector."""
        sql, params = scope_clause([scope])
        with self._one_view() as conn:
            rows = conn.execute(
                f"SELECT seq, {', '.join(PORTABLE_COLUMNS)} FROM records WHERE {sql}"
                f" AND status IN ({marks(statuses)}) AND seq > ? ORDER BY seq LIMIT ?",
                [*params, *statuses, after_seq, limit]).fetchall()
            out = {str(row[1]): PortableRecord(int(row[0]), dict(zip(PORTABLE_COLUMNS, row[1:], strict=True)))
                   for row in rows}
            for record in out.values():
                record.columns["tags"] = json.loads(record.columns["tags"])
            for chunk in chunks(list(out)):
                where = f"record_id IN ({marks(chunk)})"
                for record_id, entity_id, role in conn.execute(
                        f"SELECT record_id, entity_id, role FROM record_entities WHERE {where}"
                        " ORDER BY record_id, role = 'mentions', entity_id", chunk):
                    out[record_id].links.append((str(entity_id), str(role)))
                for record_id, other_id in conn.execute(
                        f"SELECT record_id, other_id FROM record_conflicts WHERE {where}"
                        " ORDER BY record_id, other_id", chunk):
                    out[record_id].conflicts.append(str(other_id))
                for record_id, activation, rule, reason, category in conn.execute(
                        f"SELECT record_id, activation, rule, reason, category FROM record_activation"
                        f" WHERE {where}", chunk):
                    out[record_id].activation = {"activation": activation, "rule": rule, "reason": reason,
                                                 "category": category}
                for (record_id,) in conn.execute(f"SELECT record_id FROM record_pins WHERE {where}", chunk):
                    out[record_id].pinned = True
                if family is not None:
                    for record_id, blob in conn.execute(
                            f"SELECT record_id, vector FROM embeddings WHERE {where}"
                            " AND model = ? AND version = ? AND dims = ?",
                            [*chunk, family.model, family.version, family.dims]):
                        out[record_id].vector = np.frombuffer(bytes(blob), dtype=np.float32)
        return list(out.values())

    def portable_agrees(self, scope: Scope, statuses: Sequence[str], last_seq: int, *, written: int,
                        since_version: int) -> None:
        """Refuse an export whose index reads a table scan contradicts: in one snapshot,
        count the scope's records up to the last seq exported through the index the pages
        were read by, and again with no index. A damaged index page drops rows without an
        error, and an export that silently misses records is worse than none. Both counts
        come from one snapshot, so writes made during the export cannot make them differ;
        one pass over the table, whatever the number of pages. When no record changed
        since the export began (``records_version`` still ``since_version``), the scan must
        also find exactly the ``written`` records: a damaged index cell can keep its count
        right and point at no row, which only the rows read show."""
        sql, params = scope_clause([scope])
        where = f"{sql} AND status IN ({marks(statuses)}) AND seq <= ?"
        args = [*params, *statuses, last_seq]
        with self._one_view() as conn:
            unchanged = self.read_version(conn) == since_version
            indexed = int(conn.execute(f"SELECT count(*) FROM records WHERE {where}", args).fetchone()[0])
            scanned = self._scanned_count(conn, where, args)
        if scanned is not None and scanned != indexed:
            self._index_disagrees(f"its scope index lists {indexed} records of {scope} where a scan of the"
                                  f" table finds {scanned}")
        if scanned is not None and unchanged and scanned != written:
            self._index_disagrees(f"an export read {written} records of {scope} through its scope index"
                                  f" where a scan of the table finds {scanned}")

    def portable_events(self, record_ids: Sequence[str]) -> list[dict[str, Any]]:
        """The events about these records, oldest first."""
        out: list[dict[str, Any]] = []
        with self._lock:
            for chunk in chunks(list(record_ids)):
                for row in self._conn.execute(
                        "SELECT id, at, kind, actor, record_id, entity_id, payload FROM events"
                        f" WHERE record_id IN ({marks(chunk)})", chunk):
                    out.append({"id": row[0], "at": row[1], "kind": row[2], "actor": row[3],
                                "record_id": row[4], "entity_id": row[5], "payload": json.loads(row[6])})
        return sorted(out, key=lambda e: (e["at"], e["id"]))
