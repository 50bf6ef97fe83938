"""Stored vectors and the projection every process's RAM index is built from.

A vector change bumps ``records_version`` and stamps the embedding row, so
:meth:`VectorsMixin.index_changes` finds it by delta (docs/architecture.md, "Index
coherence across processes"). Re-embedding stages new vectors in ``reembed_vectors``,
read in ``seq`` batches, while searches keep the live family; the swap moves them into
``embeddings``, drops every other family and records the new one
(``retold/store/family.py``) in one transaction.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import MetaData, Select, bindparam, literal_column, select

from retold.store.base import StoreBase, chunks, marks
from retold.store.family import EmbeddingFamily, read_family, write_family
from retold.store.upserts import Upsert

__all__ = ["IndexChange", "VectorSnapshot", "VectorsMixin"]

_FAMILY = ("model", "version", "dims")


def _to_stage(tables: MetaData) -> Select[Any]:
    """A re-embedded vector of one record (binds model, version, dims, vector, the record's
    id), or nothing once the record is erased: its text is gone."""
    records = tables.tables["records"]
    return select(records.c.id, *(bindparam(f"new_{name}") for name in (*_FAMILY, "vector"))).where(
        records.c.id == bindparam("new_record_id"), records.c.content != literal_column("''"))


def _staged(tables: MetaData) -> Select[Any]:
    """The staged vectors of one family (binds the index version, then model, version and
    dims), stamped with the index version of the swap."""
    staged = tables.tables["reembed_vectors"]
    return select(staged.c.record_id, *(staged.c[name] for name in (*_FAMILY, "vector")),
                  bindparam("swap_version")).where(
        *(staged.c[name] == bindparam(f"family_{name}") for name in _FAMILY))


# A staged vector replaces the one a record had staged before.
_STAGE = Upsert("reembed_vectors", ("record_id", *_FAMILY, "vector"), update=(*_FAMILY, "vector"),
                source=_to_stage)
# The staged family's vectors replace the live ones.
_SWAP = Upsert("embeddings", ("record_id", *_FAMILY, "vector", "index_version"),
               update=(*_FAMILY, "vector", "index_version"), source=_staged)

# Rows a cold load reads and copies into the matrix at a time: enough that the per-row work
# stays in C, few enough that one batch's bytes stay in the processor's cache.
_LOAD_BATCH = 4096


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


class VectorsMixin(StoreBase):
    """Rows of ``embeddings`` and the vector-index projection."""

    def embedding_family(self) -> EmbeddingFamily | None:
        """The family the store's vectors belong to; None until a first vector (or a
        migrated store whose vectors were of several families)."""
        with self.snapshot() as conn:
            return read_family(conn)

    def put_embedding(self, record_id: str, model: str, version: str, vector: np.ndarray) -> int:
        """Store one L2-normalised float32 vector; return the committed index_version."""
        return self.put_embeddings([(record_id, vector)], model, version)

    def put_embeddings(self, rows: Sequence[tuple[str, np.ndarray]], model: str, version: str) -> int:
        """Store a batch of vectors under one records_version bump; return that version."""
        with self.atomic() as conn:
            index_version = self.bump_version(conn)
            self._put_vectors(conn, rows, model, version, index_version)
            return index_version

    def load_vectors(self, model: str, version: str, dims: int, *,
                     room: Callable[[int], int] | None = None) -> VectorSnapshot:
        """Every live vector of this model and version, with the version read with them.

        The vectors are copied into one matrix a batch of rows at a time, never gathered
        as one block of bytes first: at a hundred thousand rows that block and its copy
        were most of a cold load. ``room(n)``, when given, is how many rows the matrix
        should have space for when up to ``n`` are read (an index's capacity); ``matrix``
        is then a view of the first rows of that larger array (its ``base``), which the
        caller can keep without copying it again when its own capacity for the rows read
        is the same.
        """
        where = (" FROM embeddings e JOIN records r ON r.id = e.record_id"
                 " WHERE e.model = ? AND e.version = ? AND e.dims = ? AND r.status != 'deleted'")
        ids: list[str] = []
        versions: list[int] = []
        seqs: list[int] = []
        with self.snapshot() as conn:
            records_version = self.read_version(conn)
            # Records bound the vectors (one each at most) and are counted from an index in
            # milliseconds; counting the vectors themselves would read them all twice.
            bound = int(conn.execute("SELECT count(*) FROM records").fetchone()[0])
            buffer = np.zeros((max(bound, room(bound) if room else 0), dims), dtype=np.float32)
            cursor = conn.execute("SELECT e.record_id, e.index_version, e.vector, r.seq" + where,
                                  (model, version, dims))
            while batch := cursor.fetchmany(_LOAD_BATCH):
                start = len(ids)
                if start + len(batch) > buffer.shape[0]:  # records committed between the two reads
                    grown = np.zeros((max(start + len(batch), 2 * buffer.shape[0]), dims), np.float32)
                    grown[:start] = buffer[:start]
                    buffer = grown
                block = np.frombuffer(b"".join(row[2] for row in batch), dtype=np.float32)
                buffer[start:start + len(batch)] = block.reshape(len(batch), dims)
                ids.extend(row[0] for row in batch)
                versions.extend(row[1] for row in batch)
                seqs.extend(row[3] for row in batch)
        return VectorSnapshot(records_version, ids, np.asarray(seqs, dtype=np.int64), buffer[:len(ids)],
                              np.asarray(versions, dtype=np.int64))

    def indexed_count(self) -> int:
        """How many vectors an index of this store holds once loaded: the live records'
        vectors of the store's family (0 before its first vector)."""
        family = self.embedding_family()
        if family is None:
            return 0
        with self._lock:
            return int(self._conn.execute(
                "SELECT count(*) FROM embeddings e JOIN records r ON r.id = e.record_id"
                " WHERE e.model = ? AND e.version = ? AND e.dims = ? AND r.status != 'deleted'",
                (family.model, family.version, family.dims)).fetchone()[0])

    def index_changes(
        self, since_version: int, model: str, version: str, dims: int
    ) -> tuple[int, list[IndexChange]]:
        """Records whose index state changed after ``since_version``, read in one snapshot.

        Both lookups use their ``index_version`` indexes. A change whose vector is
        missing, of another model or version, or whose record is deleted, maps to None.
        """
        records_version, rows = self._rows_with_version(
            "WITH changed(id) AS ("
            "  SELECT id FROM records WHERE index_version > ?1"
            "  UNION SELECT record_id FROM embeddings WHERE index_version > ?1)"
            " SELECT r.id, r.seq, CASE WHEN e.index_version > r.index_version THEN e.index_version"
            "        ELSE r.index_version END, r.status,"
            "        e.model, e.version, e.dims, e.vector"
            " FROM changed c JOIN records r ON r.id = c.id"
            " LEFT JOIN embeddings e ON e.record_id = r.id",
            (since_version,),
        )
        changes = []
        for record_id, seq, index_version, status, e_model, e_version, e_dims, blob in rows:
            usable = (
                blob is not None and status != "deleted"
                and (e_model, e_version, e_dims) == (model, version, dims)
            )
            vector = np.frombuffer(blob, dtype=np.float32) if usable else None
            changes.append(IndexChange(record_id, int(seq), int(index_version), vector))
        return records_version, changes

    # -- re-embedding ---------------------------------------------------------------

    def count_embeddable(self) -> int:
        """Records that have text to embed (erased tombstones have none)."""
        with self._lock:
            return int(self._conn.execute("SELECT count(*) FROM records WHERE content != ''").fetchone()[0])

    def unstaged_after(self, seq: int, limit: int, family: EmbeddingFamily) -> list[tuple[int, str, str]]:
        """``(seq, id, content)`` of the next ``limit`` records with text after ``seq`` that
        have no staged vector of ``family`` yet; the content is the redacted form where
        there is one, as a write embeds it."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT r.seq, r.id, coalesce(r.redacted_content, r.content) FROM records r"
                " WHERE r.seq > ? AND r.content != ''"
                " AND NOT EXISTS (SELECT 1 FROM reembed_vectors s WHERE s.record_id = r.id"
                "                 AND s.model = ? AND s.version = ? AND s.dims = ?)"
                " ORDER BY r.seq LIMIT ?",
                (seq, family.model, family.version, family.dims, limit)).fetchall()
        return [(int(s), str(i), str(c)) for s, i, c in rows]

    def staged_vectors(self, family: EmbeddingFamily) -> int:
        """How many records have a staged vector of ``family``: what an earlier, stopped
        re-embed to that family already did."""
        with self._lock:
            return int(self._conn.execute(
                "SELECT count(*) FROM reembed_vectors WHERE model = ? AND version = ? AND dims = ?",
                (family.model, family.version, family.dims)).fetchone()[0])

    def discard_staged(self, keep: EmbeddingFamily) -> int:
        """Delete staged vectors of any family but ``keep`` (an abandoned re-embed)."""
        other = " FROM reembed_vectors WHERE NOT (model = ? AND version = ? AND dims = ?)"
        params = (keep.model, keep.version, keep.dims)
        with self._lock:
            if self._conn.execute(f"SELECT NOT EXISTS (SELECT 1{other})", params).fetchone()[0]:
                return 0  # the usual case: no write lock taken for nothing
        with self.atomic() as conn:
            return conn.execute(f"DELETE{other}", params).rowcount

    def stage_vectors(self, rows: Sequence[tuple[str, np.ndarray]], family: EmbeddingFamily) -> None:
        """Stage one batch of re-embedded vectors; live vectors and the index are untouched.
        A record erased since it was read is skipped: its text is gone."""
        with self.atomic() as conn:
            _STAGE.executemany(conn, [(family.model, family.version, family.dims,
                                       np.ascontiguousarray(vec, dtype=np.float32).tobytes(), rid)
                                      for rid, vec in rows])

    def swap_staged(self, family: EmbeddingFamily) -> int | None:
        """Make the staged ``family`` the live one in one transaction: staged vectors
        replace the live ones, every other vector goes, the family is recorded, and the
        staging is emptied. Returns how many other-family vectors were dropped, or None
        (nothing changed) while a record with text still has no staged vector, such as
        one written after the last batch was read."""
        with self.atomic() as conn:
            missing = conn.execute(
                "SELECT EXISTS (SELECT 1 FROM records r WHERE r.content != '' AND NOT EXISTS ("
                " SELECT 1 FROM reembed_vectors s WHERE s.record_id = r.id"
                " AND s.model = ? AND s.version = ? AND s.dims = ?))",
                (family.model, family.version, family.dims)).fetchone()[0]
            if missing:
                return None
            index_version = self.bump_version(conn)
            _SWAP.execute(conn, (index_version, family.model, family.version, family.dims))
            dropped = self._drop_other_families(conn, family, index_version)
            conn.execute("DELETE FROM reembed_vectors")
            return dropped

    def embedding_versions(self) -> list[tuple[str, str, int]]:
        """``(model, version, count)`` of every stored vector family."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT model, version, count(*) FROM embeddings GROUP BY model, version"
                " ORDER BY model, version").fetchall()
        return [(str(m), str(v), int(n)) for m, v, n in rows]

    def drop_other_embeddings(self, model: str, version: str, dims: int) -> int:
        """Delete every vector not of ``model``/``version``/``dims`` and record that family
        as the store's, in one transaction; the records carry the bump."""
        with self.atomic() as conn:
            return self._drop_other_families(conn, EmbeddingFamily(model, version, dims), None)

    def _drop_other_families(
        self, conn: sqlite3.Connection, family: EmbeddingFamily, index_version: int | None
    ) -> int:
        """Delete every vector not of ``family``, stamp the records that lost one (bumping
        the version unless the caller already did) and record ``family``."""
        gone = [r[0] for r in conn.execute(
            "DELETE FROM embeddings WHERE NOT (model = ? AND version = ? AND dims = ?)"
            " RETURNING record_id", (family.model, family.version, family.dims))]
        if gone:
            stamp = index_version if index_version is not None else self.bump_version(conn)
            for chunk in chunks(gone):
                conn.execute(
                    f"UPDATE records SET index_version = ? WHERE id IN ({marks(chunk)})",
                    [stamp, *chunk])
        write_family(conn, family)
        return len(gone)
