"""The store's recorded embedding family: set by the first vector, by migration 3 for an
older store, and by the re-embed swap; other vectors never change it."""

from __future__ import annotations

import logging
import sqlite3
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest

from retold.store import EmbeddingFamily, Store
from retold.store.migrations import MIGRATIONS, migrate
from retold.testing import make_record
from tests.sql import execute, rows


def _unit(dims: int) -> np.ndarray:
    return np.ones(dims, dtype=np.float32) / np.sqrt(dims)


def _older_store(path: Path, families: list[tuple[str, str, int]]) -> list[str]:
    """A store at schema version 2, as the previous Retold left it: one record per entry
    of ``families``, each with a vector of that model, version and width."""
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        migrate(conn, str(path), MIGRATIONS[:2])
    store = Store(path, migrate_schema=False)
    ids = []
    for _ in families:
        record = make_record()
        store.write_record(record)
        ids.append(record.id)
    store.close()
    for record_id, (model, version, dims) in zip(ids, families, strict=True):
        execute(path, "INSERT INTO embeddings(record_id, model, version, dims, vector)"
                " VALUES (?, ?, ?, ?, ?)", record_id, model, version, dims, _unit(dims).tobytes())
    return ids


def test_first_vector_records_the_family_and_others_leave_it(store: Store) -> None:
    first, second = make_record(), make_record()
    store.write_record(first)
    store.write_record(second)
    assert store.embedding_family() is None  # records without vectors: nothing to record yet
    store.put_embedding(first.id, "model-a", "1.0", _unit(8))
    assert store.embedding_family() == EmbeddingFamily("model-a", "1.0", 8)  # "1.0" stays text
    store.put_embedding(second.id, "model-b", "2", _unit(4))  # mixing is the runtime's concern
    assert store.embedding_family() == EmbeddingFamily("model-a", "1.0", 8)


def test_the_reembed_swap_replaces_the_family_with_the_vectors(store: Store) -> None:
    record = make_record()
    store.write_record(record)
    store.put_embedding(record.id, "model-a", "1", _unit(8))
    store.put_embedding(record.id, "model-b", "1", _unit(4))
    assert store.drop_other_embeddings("model-b", "1", 4) == 0
    assert store.embedding_family() == EmbeddingFamily("model-b", "1", 4)
    assert str(store.embedding_family()) == "model-b version 1 (4-d)"


def test_migration_3_records_the_one_family_of_an_older_store(store_path: Path) -> None:
    _older_store(store_path, [("all-MiniLM-L6-v2", "1.0", 384)] * 3)
    execute(store_path, "UPDATE store_meta SET value = 7 WHERE key = 'records_version'")
    store = Store(store_path)
    try:
        assert store.migration_report is not None
        assert store.migration_report.applied == tuple(m.version for m in MIGRATIONS[2:])
        assert store.migration_report.notes == ()
        assert store.embedding_family() == EmbeddingFamily("all-MiniLM-L6-v2", "1.0", 384)
        assert store.records_version() == 7  # the counter survives the rebuilt table
        record = make_record()
        store.write_record(record)
        assert store.records_version() == 8
    finally:
        store.close()
    assert rows(store_path, "SELECT max(version) FROM schema_migrations") == [(MIGRATIONS[-1].version,)]


def test_migration_3_on_a_mixed_store_records_none_and_says_so(
    store_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ids = _older_store(store_path, [("model-a", "1", 8), ("model-a", "1", 8), ("model-b", "2", 4)])
    with caplog.at_level(logging.WARNING, logger="retold.store.migrations"):
        store = Store(store_path)
    try:
        assert store.migration_report is not None
        (note,) = store.migration_report.notes
        assert note.startswith("migration 3: the store holds vectors of 2 embedding families")
        assert "model-a version 1 (8-d): 2 vectors; model-b version 2 (4-d): 1 vectors" in note
        assert "none is recorded" in note
        assert note.removeprefix("migration 3: ") in caplog.text  # logged for workers too
        assert store.embedding_family() is None
        # The next vector written settles it, as in a new store.
        store.put_embedding(ids[2], "model-a", "1", _unit(8))
        assert store.embedding_family() == EmbeddingFamily("model-a", "1", 8)
    finally:
        store.close()


def test_an_empty_older_store_migrates_and_records_no_family(store_path: Path) -> None:
    _older_store(store_path, [])
    store = Store(store_path)
    try:
        assert store.migration_report is not None
        assert store.migration_report.applied == tuple(m.version for m in MIGRATIONS[2:])
        assert store.embedding_family() is None and store.records_version() == 0
    finally:
        store.close()
