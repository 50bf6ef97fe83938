"""Moving a SQLite store into PostgreSQL (``retold.store.transfer``): a store in use (see
``tests/mixed_store.py``) copied into a fresh schema, row for row; the new store carries
on where the old one stopped; and every refusal or failure leaves the target empty and
the source as it was. Needs PostgreSQL (the ``pg_database`` fixture)."""

from __future__ import annotations

import hashlib
import sqlite3
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from retold import build_runtime, load_config
from retold.errors import StoreError
from retold.models import Principal, Scope
from retold.store import open_store
from retold.store.fts import write_fts_rows
from retold.store.migrations import MIGRATIONS, migrate
from retold.store.postgres.connection import PgConnection
from retold.store.postgres.schema import TENANT_REGISTRY
from retold.store.transfer import advance_sequences, move_store
from retold.testing import AGENT, T0, FakeEmbedder, FakeJudge, InProcessScheduler, ManualClock
from tests import postgres
from tests.mixed_store import EMPTY_TABLES, MixedStore, build_mixed_store


@pytest.fixture
def mixed(tmp_path: Path) -> MixedStore:
    return build_mixed_store(tmp_path)


@pytest.fixture
def target(pg_database: str) -> str:
    return postgres.fresh_schema(pg_database)


def _pg(url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(url, autocommit=True)


def _pg_tables(url: str) -> set[str]:
    with _pg(url) as conn:
        return {name for (name,) in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
            " AND table_type = 'BASE TABLE'").fetchall()}


def _plain(value: Any) -> Any:
    return bytes(value) if isinstance(value, memoryview | bytes) else value


def _rows(conn: Any, table: str, columns: list[str]) -> list[tuple[Any, ...]]:
    rows = conn.execute(f"SELECT {', '.join(columns)} FROM {table}").fetchall()
    # store_meta keeps numbers in an untyped column on SQLite and as text on PostgreSQL.
    plain = [tuple(str(v) if table == "store_meta" else _plain(v) for v in row) for row in rows]
    return sorted(plain, key=repr)


def _pg_counts(url: str) -> dict[str, int]:
    with _pg(url) as conn:
        return {t: int(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0])  # type: ignore[index]
                for t in _pg_tables(url) if t not in ("schema_migrations", TENANT_REGISTRY)}


def _runtime(url: str, clock: ManualClock) -> Any:
    embedder = FakeEmbedder()
    config = load_config(overrides={"store": {"url": url},
                                    "embedding": {"model": "fake", "version": embedder.version,
                                                  "dims": embedder.dims}})
    return build_runtime(config, clock=clock, embedder=embedder, judge=FakeJudge(),
                         scheduler=InProcessScheduler(), environ={})


def test_every_row_comes_across_with_its_ids_seqs_and_versions(mixed: MixedStore, target: str) -> None:
    report = move_store(mixed.path, target)

    counts = {count.table: count for count in report.tables}
    assert all(count.ok for count in report.tables), report.tables
    # Every table of the PostgreSQL schema is copied or rebuilt: a table a later migration
    # adds is carried without being listed anywhere, or the move is refused.
    assert set(counts) == _pg_tables(target) - {"schema_migrations", TENANT_REGISTRY}
    assert {table for table, count in counts.items() if count.target == 0} == EMPTY_TABLES
    assert counts["records_fts"].rebuilt and counts["records_fts"].target == 9  # 10 records, 1 erased
    assert report.records_version == mixed.records_version
    assert report.sequences_advanced == 0  # the schema keeps no sequence: seq is max + 1
    source = sqlite3.connect(mixed.path)
    with _pg(target) as dest:
        for table, count in counts.items():
            if count.rebuilt:
                continue
            columns = [row[1] for row in source.execute(f"PRAGMA table_info({table})")]
            assert _rows(source, table, columns) == _rows(dest, table, columns), table
    source.close()


def test_the_lexical_index_is_what_the_store_writer_writes(mixed: MixedStore, target: str) -> None:
    move_store(mixed.path, target)
    query = ("SELECT rowid, record_id, content, subject, aliases, tags, document::text"
             " FROM records_fts ORDER BY rowid")
    with _pg(target) as conn:
        loaded = conn.execute(query).fetchall()
    store = open_store(target)
    try:
        with store.atomic() as conn:
            ids = [rid for (rid,) in conn.execute("SELECT id FROM records ORDER BY seq").fetchall()]
            write_fts_rows(conn, ids, with_tags=True)
    finally:
        store.close()
    with _pg(target) as conn:
        assert conn.execute(query).fetchall() == loaded
    assert any("aditya" in row[4] for row in loaded)  # the linked entity's alias is indexed


def test_the_moved_store_carries_on_where_sqlite_stopped(mixed: MixedStore, target: str) -> None:
    move_store(mixed.path, target)
    rt = _runtime(target, ManualClock(T0 + timedelta(days=1)))
    with rt:
        principal = Principal(AGENT, "aditya", "s2", None)
        rt.hooks.on_session_start(principal)
        rt.hooks.on_turn(principal, "user", "My desk is by the north window now.")
        out = rt.tools.call("memory_write", principal, {
            "type": "semantic", "content": "Aditya's desk is by the north window.", "attribute": "desk",
            "source_kind": "user_statement", "evidence": "My desk is by the north window"})
        assert out["outcome"] == "created", out
        written = rt.store.get_record(out["record_id"])
        assert written is not None and written.seq == mixed.last_seq + 1
        assert rt.store.records_version() > mixed.records_version

        found = rt.tools.call("memory_search", principal, {"queries": ["which editor does Aditya use?"]})
        ids = [r["id"] for r in found["results"]]
        assert mixed.current_id in ids and mixed.superseded_id not in ids
        history = rt.tools.call("memory_search", principal, {"queries": ["which editor does Aditya use?"],
                                                            "include_history": True})
        statuses = {r["id"]: r["status"] for r in history["results"]}
        assert statuses.get(mixed.superseded_id) == "superseded"
        assert statuses.get(mixed.current_id) == "confirmed"
        locker = rt.tools.call("memory_search", principal, {"queries": ["gym locker code 4417"]})
        assert mixed.erased_id not in [r["id"] for r in locker["results"]]
        erased = rt.store.get_record(mixed.erased_id)
        assert erased is not None and erased.status == "deleted"


def test_a_target_holding_rows_is_refused_and_left_as_it_was(mixed: MixedStore, target: str) -> None:
    move_store(mixed.path, target)
    before = _pg_counts(target)
    with pytest.raises(StoreError, match="already holds rows .*records.*nothing was written"):
        move_store(mixed.path, target)
    assert _pg_counts(target) == before


def test_one_grant_is_enough_to_refuse_a_target(mixed: MixedStore, target: str) -> None:
    store = open_store(target)
    try:
        store.put_grant("someone", Scope("user", "x"), read=True, write=False)
    finally:
        store.close()
    with pytest.raises(StoreError, match=r"already holds rows \(grants\)"):
        move_store(mixed.path, target)
    assert _pg_counts(target)["records"] == 0


def test_a_source_behind_the_latest_schema_is_refused_untouched(tmp_path: Path, target: str) -> None:
    path = tmp_path / "old.sqlite"
    conn = sqlite3.connect(path, isolation_level=None)
    migrate(conn, str(path), MIGRATIONS[:5])
    conn.close()
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    with pytest.raises(StoreError, match=r"schema version 5, not the latest .* `retold migrate --store"):
        move_store(path, target)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest
    assert "records" not in _pg_tables(target)  # refused before the target was opened


def test_the_source_file_is_only_read(mixed: MixedStore, target: str) -> None:
    digest = hashlib.sha256(mixed.path.read_bytes()).hexdigest()
    move_store(mixed.path, target)
    assert hashlib.sha256(mixed.path.read_bytes()).hexdigest() == digest


def test_a_table_postgresql_lacks_refuses_the_move(mixed: MixedStore, target: str) -> None:
    conn = sqlite3.connect(mixed.path, isolation_level=None)
    conn.execute("CREATE TABLE record_notes (record_id TEXT, note TEXT)")
    conn.close()
    with pytest.raises(StoreError, match="only in SQLite: record_notes; only in PostgreSQL: none"):
        move_store(mixed.path, target)
    assert not any(_pg_counts(target)[t] for t in ("records", "events", "grants"))


def test_a_row_postgresql_refuses_rolls_back_the_whole_copy(mixed: MixedStore, target: str) -> None:
    # SQLite keeps text in an INTEGER column; PostgreSQL refuses it, after every table
    # loaded before session_turns.
    conn = sqlite3.connect(mixed.path, isolation_level=None)
    conn.execute("UPDATE session_turns SET turn = 'second' WHERE turn = 2")
    conn.close()
    with pytest.raises(StoreError, match=r"the copy into .* failed \(.*\); nothing was written"):
        move_store(mixed.path, target)
    counts = _pg_counts(target)
    assert set(counts.values()) == {0, 1}  # only the new store's own records_version row
    assert counts["store_meta"] == 1


def test_sequences_continue_after_the_copied_rows(target: str) -> None:
    with _pg(target) as conn:
        conn.execute("CREATE TABLE numbered (id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, x TEXT)")
        conn.execute("INSERT INTO numbered (id, x) VALUES (1, 'a'), (7, 'b')")
    pg = PgConnection(target, connect_timeout=5)
    try:
        assert advance_sequences(pg) == 1
        pg.execute("INSERT INTO numbered (x) VALUES ('c')")
        assert pg.execute("SELECT max(id) FROM numbered").fetchone()[0] == 8
    finally:
        pg.close()


def test_a_url_is_not_a_source_and_a_path_is_not_a_target(mixed: MixedStore, target: str) -> None:
    with pytest.raises(StoreError, match="is not a PostgreSQL URL"):
        move_store(mixed.path, str(mixed.path))
    with pytest.raises(StoreError, match="the store to move from is a SQLite file"):
        move_store(target, target)
    with pytest.raises(StoreError, match="no SQLite store at"):
        move_store(mixed.path.with_name("missing.sqlite"), target)

