"""Records, their FTS rows and embeddings, and the vector-index projection (LLD 3.1, 3.3, 7).

Every change the vector index must see (a record row, its status, its embedding) bumps
``store_meta.records_version`` in the same transaction and stamps the row's
``index_version`` with it, so other processes can refresh by delta (LLD 7).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from retold.errors import StoreError
from retold.models import ACTIVE_STATUSES, RECORD_STATUSES, RECORD_TYPES, Record, Scope
from retold.store.base import StoreBase, dt, marks, ts
from retold.store.eligible import EligibleSet
from retold.util import from_iso, to_iso

__all__ = ["IndexChange", "RecordMeta", "RecordsMixin", "VectorSnapshot", "record_from_row"]


@dataclass(frozen=True)
class VectorSnapshot:
    """Every compatible embedding, read in one snapshot with the version it reflects."""

    records_version: int
    ids: list[str]
    seqs: np.ndarray  # (n,) int64, the records' stable integer keys
    matrix: np.ndarray  # (n, dims) float32
    index_versions: np.ndarray  # (n,) int64


@dataclass(frozen=True)
class IndexChange:
    """The current index state of one record changed since a given version."""

    record_id: str
    seq: int
    index_version: int
    vector: np.ndarray | None  # None: the record must not be in the index


@dataclass(frozen=True)
class RecordMeta:
    """The few columns the early search stages need (freshness, gate, the log)."""

    id: str
    type: str
    source_kind: str
    status: str
    event_at: datetime


class RecordsMixin(StoreBase):
    """Record rows, FTS rows, embeddings and the eligibility filter."""

    def insert_record(self, record: Record, aliases: str = "") -> int:
        """Insert a record with its FTS row; return the index_version it committed under."""
        with self.atomic() as conn:
            version = self.bump_version(conn)
            # BEGIN IMMEDIATE holds the write lock, so max(seq) + 1 cannot race.
            seq = int(conn.execute("SELECT coalesce(max(seq), 0) + 1 FROM records").fetchone()[0])
            conn.execute(
                "INSERT INTO records (id, seq, type, version, content, subject, subject_entity_id,"
                " attribute, scope_kind, scope_id, source_kind, source_ref, creator_agent_id,"
                " evidence, created_at, event_at, expires_at, valid_from, valid_until, review_at,"
                " review_flagged_at, confidence, status, supersedes_id, reinforcements,"
                " last_reinforced_at, index_version, tags)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    record.id, seq, record.type, record.version, record.content, record.subject,
                    record.subject_entity_id, record.attribute, record.scope.kind,
                    record.scope.id, record.source_kind, record.source_ref,
                    record.creator_agent_id, record.evidence, ts(record.created_at),
                    ts(record.event_at), ts(record.expires_at), ts(record.valid_from),
                    ts(record.valid_until), ts(record.review_at),
                    ts(record.review_flagged_at), record.confidence, record.status,
                    record.supersedes_id, record.reinforcements,
                    ts(record.last_reinforced_at), version, json.dumps(record.tags),
                ),
            )
            if record.status != "deleted":
                conn.execute(
                    "INSERT INTO records_fts(rowid, record_id, content, subject, aliases)"
                    " VALUES (?, ?, ?, ?, ?)",
                    (seq, record.id, record.content, record.subject, aliases),
                )
            record.index_version, record.seq = version, seq
            return version

    def set_status(self, record_id: str, status: str) -> int:
        """Change a record's status; a deleted record also loses its FTS row (LLD 3.3)."""
        if status not in RECORD_STATUSES:
            raise ValueError(f"unknown status {status!r}")
        with self.atomic() as conn:
            version = self.bump_version(conn)
            row = conn.execute(
                "UPDATE records SET status = ?, index_version = ? WHERE id = ? RETURNING seq",
                (status, version, record_id),
            ).fetchone()
            if row is None:
                raise StoreError(f"no record {record_id}")
            if status == "deleted":
                conn.execute("DELETE FROM records_fts WHERE rowid = ?", (row[0],))
            return version

    def refresh_fts(self, record_ids: Iterable[str]) -> None:
        """Rewrite the FTS rows of these records from their current content, subject and
        the aliases of their linked entities (LLD 3.3: aliases are denormalised, so a new
        link, a new alias or an entity merge must rewrite every affected row)."""
        with self.atomic() as conn:
            for record_id in dict.fromkeys(record_ids):
                row = conn.execute(
                    "SELECT seq, content, subject, status FROM records WHERE id = ?", (record_id,)
                ).fetchone()
                if row is None:
                    continue
                seq, content, subject, status = row
                conn.execute("DELETE FROM records_fts WHERE rowid = ?", (seq,))
                if status == "deleted":
                    continue  # LLD 11: forgotten records have no lexical row
                aliases = " ".join(
                    alias
                    for (alias,) in conn.execute(
                        "SELECT DISTINCT a.alias_norm FROM record_entities re"
                        " JOIN entity_aliases a ON a.entity_id = re.entity_id"
                        " WHERE re.record_id = ? ORDER BY a.alias_norm",
                        (record_id,),
                    )
                )
                conn.execute(
                    "INSERT INTO records_fts(rowid, record_id, content, subject, aliases)"
                    " VALUES (?, ?, ?, ?, ?)",
                    (seq, record_id, content, subject, aliases),
                )

    def get_record(self, record_id: str) -> Record | None:
        """One record with its entity links (about links first), or None."""
        found = self.select_records("id = ?", (record_id,))
        return found[0] if found else None

    def record_meta(self, ids: Sequence[str]) -> dict[str, RecordMeta]:
        """Type, source kind, status and event time of each record, by id."""
        out: dict[str, RecordMeta] = {}
        with self._lock:
            for start in range(0, len(ids), 500):
                chunk = list(ids[start : start + 500])
                for rid, type_, source, status, event_at in self._conn.execute(
                    "SELECT id, type, source_kind, status, event_at FROM records"
                    f" WHERE id IN ({marks(chunk)})", chunk,
                ):
                    out[rid] = RecordMeta(rid, type_, source, status, from_iso(event_at))
        return out

    def select_records(
        self, where: str, params: Sequence[Any] = (), *, order: str = "seq", limit: int | None = None
    ) -> list[Record]:
        """Records matching a trusted SQL condition, with their entity links, in one snapshot."""
        sql = f"SELECT * FROM records WHERE {where} ORDER BY {order}"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        with self.snapshot() as conn:
            cursor = conn.execute(sql, tuple(params))
            names = [d[0] for d in cursor.description]
            rows = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
            links: dict[str, list[str]] = {row["id"]: [] for row in rows}
            if rows:
                ids = list(links)
                for record_id, entity_id in conn.execute(
                    "SELECT record_id, entity_id FROM record_entities"
                    f" WHERE record_id IN ({marks(ids)}) ORDER BY role = 'mentions', entity_id",
                    ids,
                ):
                    links[record_id].append(entity_id)
        return [record_from_row(row, links[row["id"]]) for row in rows]

    def active_for_subject(
        self,
        scope: Scope,
        type_: str,
        entity_id: str,
        now: datetime,
        *,
        attribute: str | None = None,
        limit: int | None = None,
    ) -> list[Record]:
        """Active records about one entity in one scope and type (optionally one attribute),
        most recently reinforced first: the store order the LLD 6.3 scan cap applies to."""
        where = (
            "scope_kind = ? AND scope_id = ? AND subject_entity_id = ? AND type = ?"
            " AND status IN ('provisional', 'confirmed') AND (expires_at IS NULL OR expires_at >= ?)"
        )
        params: list[Any] = [scope.kind, scope.id, entity_id, type_, to_iso(now)]
        if attribute is not None:
            where += " AND attribute = ?"
            params.append(attribute)
        return self.select_records(
            where, params, order="coalesce(last_reinforced_at, created_at) DESC, seq DESC", limit=limit
        )

    def save_lifecycle(self, record: Record) -> int:
        """Persist a record's lifecycle and provenance fields; return its index_version.

        Used for reinforcement, supersession and status changes, which all change what
        retrieval may return, so each bumps records_version (LLD 7).
        """
        with self.atomic() as conn:
            version = self.bump_version(conn)
            row = conn.execute(
                "UPDATE records SET status = ?, confidence = ?, reinforcements = ?,"
                " last_reinforced_at = ?, expires_at = ?, source_kind = ?, source_ref = ?,"
                " evidence = ?, review_flagged_at = ?, index_version = ? WHERE id = ? RETURNING seq",
                (
                    record.status, record.confidence, record.reinforcements,
                    ts(record.last_reinforced_at), ts(record.expires_at), record.source_kind,
                    record.source_ref, record.evidence, ts(record.review_flagged_at), version,
                    record.id,
                ),
            ).fetchone()
            if row is None:
                raise StoreError(f"no record {record.id}")
            if record.status == "deleted":
                conn.execute("DELETE FROM records_fts WHERE rowid = ?", (row[0],))
            record.index_version = version
            return version

    def add_conflict(self, record_id: str, other_id: str) -> None:
        """Link two incompatible claims, in both directions (LLD 3.3)."""
        noted = to_iso(self.clock.now())
        with self.atomic() as conn:
            conn.executemany(
                "INSERT OR IGNORE INTO record_conflicts(record_id, other_id, noted_at) VALUES (?, ?, ?)",
                [(record_id, other_id, noted), (other_id, record_id, noted)],
            )

    def conflicts_of(self, record_id: str) -> list[str]:
        with self._lock:
            return [r[0] for r in self._conn.execute(
                "SELECT other_id FROM record_conflicts WHERE record_id = ? ORDER BY other_id",
                (record_id,),
            )]

    def counted_refs(self, record_id: str) -> set[str]:
        """The source references already counted for a record: its own and every counted
        reinforcement's (LLD 6.4 independence)."""
        with self.snapshot() as conn:
            row = conn.execute("SELECT source_ref FROM records WHERE id = ?", (record_id,)).fetchone()
            refs = {row[0]} if row and row[0] else set()
            refs.update(
                ref for (ref,) in conn.execute(
                    "SELECT json_extract(payload, '$.source_ref') FROM events"
                    " WHERE record_id = ? AND kind = 'record.reinforced'"
                    " AND json_extract(payload, '$.counted') = 1",
                    (record_id,),
                ) if ref
            )
        return refs

    def eligible_ids(
        self,
        scopes: Sequence[Scope],
        types: Sequence[str] | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        include_history: bool = False,
        now: datetime | None = None,
    ) -> EligibleSet:
        """The hard filter of LLD 10.1 step 3 as one query over a covering index.

        Readable scope, lifecycle status, expiry (``expires_at < now`` is ineligible,
        LLD 6.5), type and the ``event_at`` window. ``include_history`` admits superseded
        and expired rows; deleted rows are never eligible.
        """
        if not scopes:
            return EligibleSet([], np.empty(0, dtype=np.int64), records_version=self.records_version())
        statuses = (*ACTIVE_STATUSES, "superseded", "expired") if include_history else ACTIVE_STATUSES
        where = f"scope_kind = ? AND scope_id = ? AND status IN ({marks(statuses)})"
        tail: list[Any] = list(statuses)
        # Unary + keeps the planner on records_scope: scope is the selective, security
        # relevant filter, and without ANALYZE statistics SQLite would pick records_event.
        if not include_history:
            where += " AND (expires_at IS NULL OR expires_at >= ?)"
            tail.append(to_iso(now or self.clock.now()))
        if types:
            unknown = set(types) - set(RECORD_TYPES)
            if unknown:
                raise ValueError(f"unknown record types {sorted(unknown)}")
            where += f" AND +type IN ({marks(types)})"
            tail += list(types)
        if since is not None:
            where += " AND +event_at >= ?"
            tail.append(to_iso(since))
        if until is not None:
            where += " AND +event_at <= ?"
            tail.append(to_iso(until))
        # One branch per scope, each a range of the covering records_scope index; UNION ALL
        # is cheaper than SQLite's multi-index OR plan and scopes never overlap.
        sql = " UNION ALL ".join([f"SELECT id, seq, expires_at FROM records WHERE {where}"] * len(scopes))
        params: list[Any] = []
        for scope in scopes:
            params += [scope.kind, scope.id, *tail]
        with self.snapshot() as conn:
            version = self.read_version(conn)
            rows = conn.execute(sql, params).fetchall()
        seqs = np.fromiter((row[1] for row in rows), dtype=np.int64, count=len(rows))
        expiries = [row[2] for row in rows if row[2] is not None]
        valid_until = from_iso(min(expiries)) if expiries and not include_history else None
        return EligibleSet([row[0] for row in rows], seqs, records_version=version,
                           valid_until=valid_until)

    # -- embeddings and the vector-index projection (LLD 7) ------------------------------

    def put_embedding(self, record_id: str, model: str, version: str, vector: np.ndarray) -> int:
        """Store one L2-normalised float32 vector; return the committed index_version."""
        return self.put_embeddings([(record_id, vector)], model, version)

    def put_embeddings(self, rows: Sequence[tuple[str, np.ndarray]], model: str, version: str) -> int:
        """Store a batch of vectors under one records_version bump; return that version."""
        with self.atomic() as conn:
            index_version = self.bump_version(conn)
            conn.executemany(
                "INSERT INTO embeddings(record_id, model, version, dims, vector, index_version)"
                " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(record_id) DO UPDATE SET"
                " model = excluded.model, version = excluded.version, dims = excluded.dims,"
                " vector = excluded.vector, index_version = excluded.index_version",
                [(rid, model, version, int(np.asarray(vec).shape[-1]),
                  np.ascontiguousarray(vec, dtype=np.float32).tobytes(), index_version)
                 for rid, vec in rows],
            )
            return index_version

    def delete_embedding(self, record_id: str) -> int:
        """Drop a record's vector; the record row carries the version other processes see."""
        with self.atomic() as conn:
            index_version = self.bump_version(conn)
            conn.execute("DELETE FROM embeddings WHERE record_id = ?", (record_id,))
            conn.execute(
                "UPDATE records SET index_version = ? WHERE id = ?", (index_version, record_id)
            )
            return index_version

    def load_vectors(self, model: str, version: str, dims: int) -> VectorSnapshot:
        """Every live vector of this model and version, with the version read with them."""
        with self.snapshot() as conn:
            records_version = self.read_version(conn)
            rows = conn.execute(
                "SELECT e.record_id, e.index_version, e.vector, r.seq FROM embeddings e"
                " JOIN records r ON r.id = e.record_id"
                " WHERE e.model = ? AND e.version = ? AND e.dims = ? AND r.status != 'deleted'",
                (model, version, dims),
            ).fetchall()
        ids = [row[0] for row in rows]
        # One join and one frombuffer: no per-row array objects on the cold path.
        matrix = np.frombuffer(b"".join(row[2] for row in rows), dtype=np.float32)
        versions = np.fromiter((row[1] for row in rows), dtype=np.int64, count=len(rows))
        seqs = np.fromiter((row[3] for row in rows), dtype=np.int64, count=len(rows))
        return VectorSnapshot(records_version, ids, seqs, matrix.reshape(len(rows), dims), versions)

    def index_changes(
        self, since_version: int, model: str, version: str, dims: int
    ) -> tuple[int, list[IndexChange]]:
        """Records whose index state changed after ``since_version``, read in one snapshot.

        Both lookups use their ``index_version`` indexes (LLD 7). A change whose vector is
        missing, of another model or version, or whose record is deleted, maps to None.
        """
        with self.snapshot() as conn:
            records_version = self.read_version(conn)
            rows = conn.execute(
                "WITH changed(id) AS ("
                "  SELECT id FROM records WHERE index_version > ?1"
                "  UNION SELECT record_id FROM embeddings WHERE index_version > ?1)"
                " SELECT r.id, r.seq, max(r.index_version, coalesce(e.index_version, 0)), r.status,"
                "        e.model, e.version, e.dims, e.vector"
                " FROM changed c JOIN records r ON r.id = c.id"
                " LEFT JOIN embeddings e ON e.record_id = r.id",
                (since_version,),
            ).fetchall()
        changes = []
        for record_id, seq, index_version, status, e_model, e_version, e_dims, blob in rows:
            usable = (
                blob is not None and status != "deleted"
                and (e_model, e_version, e_dims) == (model, version, dims)
            )
            vector = np.frombuffer(blob, dtype=np.float32) if usable else None
            changes.append(IndexChange(record_id, int(seq), int(index_version), vector))
        return records_version, changes

def record_from_row(row: dict[str, Any], entity_ids: list[str]) -> Record:
    created = from_iso(row["created_at"])
    return Record(
        id=row["id"],
        type=row["type"],
        version=row["version"],
        content=row["content"],
        subject=row["subject"],
        subject_entity_id=row["subject_entity_id"],
        attribute=row["attribute"],
        scope=Scope(row["scope_kind"], row["scope_id"]),
        source_kind=row["source_kind"],
        source_ref=row["source_ref"],
        creator_agent_id=row["creator_agent_id"],
        evidence=row["evidence"],
        created_at=created,
        event_at=from_iso(row["event_at"]),
        expires_at=dt(row["expires_at"]),
        valid_from=dt(row["valid_from"]),
        valid_until=dt(row["valid_until"]),
        review_at=dt(row["review_at"]),
        review_flagged_at=dt(row["review_flagged_at"]),
        confidence=row["confidence"],
        status=row["status"],
        supersedes_id=row["supersedes_id"],
        reinforcements=row["reinforcements"],
        last_reinforced_at=dt(row["last_reinforced_at"]),
        tags=json.loads(row["tags"]),
        entity_ids=entity_ids,
        index_version=row["index_version"],
        seq=row["seq"],
    )

