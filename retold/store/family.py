"""The embedding family a store's vectors belong to, kept in ``store_meta``.

Vectors of one model, version and width are only comparable with each other, so a store
records which family it holds: migration 3 fills it in for an existing store, the first
vector write fills it in for a new one, and the re-embed swap replaces it. The runtime
compares it with its embedder before it searches (docs/decisions.md, "The store records
its embedding family").
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from retold.store.upserts import Upsert

__all__ = ["EmbeddingFamily", "families_of_vectors", "read_family", "write_family"]

_PUT_META = Upsert("store_meta", ("key", "value"), update=("value",))

_KEYS = ("embedding_model", "embedding_version", "embedding_dims")


@dataclass(frozen=True)
class EmbeddingFamily:
    """A model, its version tag and the width of the vectors it produces."""

    model: str
    version: str
    dims: int

    def __str__(self) -> str:
        return f"{self.model} version {self.version} ({self.dims}-d)"


def read_family(conn: sqlite3.Connection) -> EmbeddingFamily | None:
    """The recorded family, or None while the store has not recorded one."""
    found = dict(conn.execute(
        f"SELECT key, value FROM store_meta WHERE key IN ({', '.join('?' for _ in _KEYS)})", _KEYS
    ).fetchall())
    if set(found) != set(_KEYS):
        return None
    model, version, dims = (found[key] for key in _KEYS)
    return EmbeddingFamily(str(model), str(version), int(dims))


def write_family(conn: sqlite3.Connection, family: EmbeddingFamily) -> None:
    """Record ``family`` in the caller's transaction, replacing any recorded one."""
    _PUT_META.executemany(conn, zip(_KEYS, (family.model, family.version, family.dims), strict=True))


def families_of_vectors(conn: sqlite3.Connection) -> list[tuple[EmbeddingFamily, int]]:
    """Every family the stored vectors belong to, with its vector count."""
    rows = conn.execute(
        "SELECT model, version, dims, count(*) FROM embeddings GROUP BY model, version, dims"
        " ORDER BY model, version, dims").fetchall()
    return [(EmbeddingFamily(str(m), str(v), int(d)), int(n)) for m, v, d, n in rows]
