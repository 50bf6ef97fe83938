"""The SQLite store on real files: migrations, transactions, versions and the hard filter."""

from __future__ import annotations

import hashlib
import multiprocessing
import sqlite3
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest

from retold.errors import NotADatabaseError, SchemaTooNewError
from retold.models import RECORD_STATUSES, Scope
from retold.store import Store, open_store
from retold.store.migrations import MIGRATIONS, Migration, migrate
from retold.testing import T0, make_record

ADITYA = Scope("user", "aditya")
PRIV = Scope("agent", "research-agent/aditya")
PROJECT = Scope("project", "retold")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- migrations -------------------------------------------------------------------------


def test_new_store_records_each_migration_once(store_path: Path) -> None:
    first = Store(store_path)
    assert first.migration_report is not None
    assert first.migration_report.applied == tuple(m.version for m in MIGRATIONS)
    first.close()
    again = Store(store_path)
    assert again.migration_report is not None
    assert again.migration_report.applied == ()
    assert again.migrate().applied == ()
    rows = sqlite3.connect(store_path).execute("SELECT version, name FROM schema_migrations").fetchall()
    assert rows == [(m.version, m.name) for m in MIGRATIONS]
    again.close()


def test_failed_migration_leaves_neither_schema_nor_record(store_path: Path) -> None:
    def half_applied(conn: sqlite3.Connection) -> None:
        conn.execute("CREATE TABLE doomed (x)")
        conn.execute("THIS IS NOT SQL")

    Store(store_path).close()
    conn = sqlite3.connect(store_path, isolation_level=None)
    latest = MIGRATIONS[-1].version
    with pytest.raises(sqlite3.OperationalError):
        migrate(conn, str(store_path), (*MIGRATIONS, Migration(latest + 1, "broken", half_applied)))
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "doomed" not in tables
    assert conn.execute("SELECT max(version) FROM schema_migrations").fetchone()[0] == latest


def test_store_written_by_newer_schema_is_refused_untouched(store_path: Path) -> None:
    Store(store_path).close()
    conn = sqlite3.connect(store_path)
    conn.execute("INSERT INTO schema_migrations VALUES (99, 'from the future', 'x')")
    conn.commit()
    conn.close()
    before = _digest(store_path)
    with pytest.raises(SchemaTooNewError, match="schema version 99"):
        Store(store_path)
    assert _digest(store_path) == before


def test_file_that_is_not_sqlite_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("these are my notes, not a database\n" * 20)
    before = _digest(path)
    with pytest.raises(NotADatabaseError, match="not a SQLite database"):
        Store(path)
    assert _digest(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


# -- transactions ------------------------------------------------------------------------


class Boom(Exception):
    pass


def _count(store: Store) -> int:
    with store.snapshot() as conn:
        return int(conn.execute("SELECT count(*) FROM records").fetchone()[0])


def test_atomic_rolls_back_everything_and_reraises_the_original(store: Store) -> None:
    with pytest.raises(Boom), store.atomic():
        store.write_record(make_record())
        store.write_record(make_record())
        raise Boom
    assert _count(store) == 0
    assert store.records_version() == 0
    assert not store.in_transaction


def test_nested_failure_rolls_back_only_the_savepoint(store: Store) -> None:
    kept = make_record()
    with store.atomic():
        store.write_record(kept)
        with pytest.raises(Boom), store.atomic():
            store.write_record(make_record())
            raise Boom
    assert _count(store) == 1
    assert store.get_record(kept.id) is not None


def test_original_error_survives_a_failing_rollback(store: Store) -> None:
    # A COMMIT inside the block ends the transaction, so the ROLLBACK that follows the
    # error fails too; the caller must still see Boom, not the rollback's error.
    with pytest.raises(Boom), store.atomic() as conn:
        conn.execute("COMMIT")
        raise Boom


# -- records_version -------------------------------------------------------------------


def test_every_index_change_bumps_records_version_and_stamps_the_row(store: Store) -> None:
    rec = make_record()
    v1 = store.write_record(rec).index_version
    v2 = store.put_embedding(rec.id, "m", "1", np.ones(4, dtype=np.float32) / 2)
    v3 = _set_status(store, rec.id, "superseded")
    assert store.drop_other_embeddings("other-model", "1", 4) == 1
    v4 = store.records_version()
    assert [v1, v2, v3, v4] == [1, 2, 3, 4]
    assert store.records_version() == 4
    with store.snapshot() as conn:
        assert conn.execute("SELECT index_version FROM records").fetchone()[0] == 4
        assert conn.execute("SELECT count(*) FROM embeddings").fetchone()[0] == 0


def test_rolled_back_change_does_not_move_records_version(store: Store) -> None:
    store.write_record(make_record())
    with pytest.raises(Boom), store.atomic():
        store.write_record(make_record())
        raise Boom
    assert store.records_version() == 1


@pytest.mark.sqlite_only("reads the FTS5 table with MATCH")
def test_deleting_a_record_removes_its_fts_row(store: Store) -> None:
    rec = make_record(content="The deploy pipeline uses bge-m3 embeddings")
    store.write_record(rec)

    def hits() -> list[str]:
        with store.snapshot() as conn:
            return [r[0] for r in conn.execute(
                "SELECT record_id FROM records_fts WHERE records_fts MATCH 'pipeline'")]

    assert hits() == [rec.id]
    _set_status(store, rec.id, "deleted")
    assert hits() == []


def _writer(path: str, n: int) -> None:
    store = open_store(path)
    for _ in range(n):
        rec = make_record()
        with store.atomic():
            store.write_record(rec)
            store.put_embedding(rec.id, "m", "1", np.ones(4, dtype=np.float32) / 2)
    store.close()


def test_concurrent_writer_processes_lose_nothing(store_target: str) -> None:
    open_store(store_target).close()
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(store_target, 40)) for _ in range(3)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    store = open_store(store_target)
    assert _count(store) == 120
    assert store.records_version() == 240
    store.close()


# -- eligible_ids ----------------------------------------------------------------------


def test_eligible_ids_applies_scope_status_expiry_type_window_and_history(store: Store) -> None:
    now = T0 + timedelta(days=10)
    mine = make_record()
    private = make_record(scope=PRIV, type="procedural")
    other_user = make_record(scope=Scope("user", "vera"))
    superseded = make_record(status="superseded")
    expired_status = make_record(status="expired")
    deleted = make_record(status="deleted")
    past_expiry = make_record(expires_at=now - timedelta(seconds=1), status="provisional")
    future_expiry = make_record(expires_at=now + timedelta(days=1), status="provisional")
    old_episode = make_record(type="episodic", event_at=T0 - timedelta(days=40))
    for rec in (mine, private, other_user, superseded, expired_status, deleted,
                past_expiry, future_expiry, old_episode):
        store.write_record(rec)

    def ids(**kw: object) -> set[str]:
        return set(store.eligible_ids([ADITYA, PRIV], now=now, **kw))  # type: ignore[arg-type]

    assert ids() == {mine.id, private.id, future_expiry.id, old_episode.id}
    assert ids(types=["procedural"]) == {private.id}
    assert ids(since=T0 - timedelta(days=1)) == {mine.id, private.id, future_expiry.id}
    assert ids(until=T0 - timedelta(days=1)) == {old_episode.id}
    assert ids(include_history=True) == {
        mine.id, private.id, superseded.id, expired_status.id, past_expiry.id,
        future_expiry.id, old_episode.id,
    }
    assert len(store.eligible_ids([], now=now)) == 0
    both = store.eligible_ids([ADITYA, PRIV], now=now)
    with store.snapshot() as conn:
        seq_of = dict(conn.execute("SELECT id, seq FROM records").fetchall())
    assert both.seqs.tolist() == [seq_of[rid] for rid in both.ids]
    assert set(store.eligible_ids([Scope("user", "vera")], now=now)) == {other_user.id}


@pytest.mark.sqlite_only("reads SQLite's statement trace")
def test_eligible_ids_is_one_indexed_query(store: Store) -> None:
    captured: list[str] = []
    with store.snapshot() as conn:
        conn.set_trace_callback(captured.append)
        store.eligible_ids([ADITYA, PROJECT], types=["semantic"], now=T0)
        conn.set_trace_callback(None)
        (sql,) = [s for s in captured if s.startswith("SELECT id")]
        plan = " ".join(str(r) for r in conn.execute("EXPLAIN QUERY PLAN " + sql.replace("?", "NULL")))
    assert "records_scope" in plan
    assert "SCAN records" not in plan


def _plans(store: Store, read: object, prefix: str) -> list[str]:
    """SQLite's plan of every statement ``read()`` ran that starts with ``prefix``."""
    captured: list[str] = []
    with store.snapshot() as conn:
        conn.set_trace_callback(captured.append)
        read()  # type: ignore[operator]
        conn.set_trace_callback(None)
        return [" ".join(str(r) for r in conn.execute("EXPLAIN QUERY PLAN " + sql))
                for sql in captured if sql.startswith(prefix)]


@pytest.mark.sqlite_only("reads SQLite's query plan")
def test_what_a_write_reads_of_its_scope_is_bounded_by_an_index(store: Store) -> None:
    """The subject scan walks the subject's records newest first and stops at its cap; one
    attribute's rows come from the subject index; the kept eligible set reads only rows
    changed since a version. None of them reads and sorts the whole scope."""
    (scan,) = _plans(store, lambda: store.active_for_subject(ADITYA, "semantic", "ent_aditya", T0, limit=3),
                     "SELECT")
    assert "records_subject_recent" in scan and "TEMP B-TREE" not in scan
    (one,) = _plans(store, lambda: store.active_for_subject(ADITYA, "semantic", "ent_aditya", T0,
                                                            attribute="fact_1"), "SELECT")
    assert "records_subject " in one
    (since,) = _plans(store, lambda: store.scope_rows_since(3, ADITYA, "semantic", 10), "SELECT id")
    assert "records_index_version" in since


@pytest.mark.sqlite_only("reads SQLite's query plan")
def test_a_lineage_walk_reads_no_whole_table(store: Store) -> None:
    older = make_record(content="Aditya's editor is nano.", attribute="editor")
    store.write_record(older)
    captured: list[str] = []
    with store.snapshot() as conn:
        conn.set_trace_callback(captured.append)
        store.lineage_ids(older.id)
        conn.set_trace_callback(None)
        (sql,) = [s for s in captured if s.startswith("WITH RECURSIVE")]
        plan = " ".join(str(r) for r in conn.execute("EXPLAIN QUERY PLAN " + sql))
    assert "records_supersedes" in plan  # the forward walk: what replaced a record
    assert "SCAN r " not in plan and "SCAN records" not in plan.replace("SCAN back", "")


def test_store_with_unresolved_migration_issues_refuses_to_open(store_path: Path) -> None:
    from retold.errors import MigrationIssuesError

    store = Store(store_path)
    rec = make_record()
    store.write_record(rec)
    with store.atomic() as conn:
        conn.execute("INSERT INTO migration_issues VALUES (2, ?, 'zero about links')", (rec.id,))
    store.close()
    with pytest.raises(MigrationIssuesError, match="1 legacy records"):
        Store(store_path)
    opened = Store(store_path, allow_migration_issues=True)
    assert opened.migration_report is not None and opened.migration_report.unresolved == 1
    opened.close()


def _set_status(store: Store, record_id: str, status: str) -> int:
    change = store.transition(record_id, status, from_statuses=RECORD_STATUSES)
    assert change is not None
    return change.index_version
