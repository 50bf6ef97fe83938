"""Integrity checks on real stores: SQLite damage made with the file's bytes, and
disagreement made by removing or adding one row (on both backends), each found by
``retold check`` with the record it concerns named; ``snapshot load`` refusing such a
copy. PostgreSQL's own part (amcheck) is tested in test_pg_integrity.py."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from retold.cli import main
from retold.cli.check import EXIT_PROBLEMS
from retold.config import is_database_url
from retold.operations import OperationError
from retold.store import Store
from retold.store.integrity import IntegrityReport, check_file
from retold.store.postgres.integrity import check_database
from retold.testing import World, make_world
from tests.conditions import corrupt_fts_segments, corrupt_page
from tests.sql import dump_lines, execute, rows

SQLITE_PAGES = "SQLite's page checks of a store file; PostgreSQL keeps its own pages"


@pytest.fixture
def written(tmp_path: Path, store_target: str) -> tuple[str, list[str]]:
    """A closed store holding three records written through the write path, with their
    FTS rows and vectors; returns where it is (a file or a URL) and the record ids."""
    world = make_world(tmp_path / "w", store=store_target)
    ids = [_write(world, f"Aditya keeps {thing} on the desk.", f"desk_{n}")
           for n, thing in enumerate(("a red lamp", "two plants", "a chess clock"))]
    world.rt.close()
    return (store_target if is_database_url(store_target) else world.rt.store.path), ids


def _report(target: str) -> IntegrityReport:
    return check_database(target) if is_database_url(target) else check_file(target)


def _write(world: World, content: str, attribute: str) -> str:
    result = world.write(content=content, attribute=attribute)
    assert result.ok and result.record_id, result
    return result.record_id


def _copy(path: str, name: str) -> Path:
    target = Path(path).with_name(name)
    shutil.copyfile(path, target)
    return target


def _check(capsys: pytest.CaptureFixture[str], target: str | Path, *flags: str) -> tuple[int, str]:
    code = main(["check", "--store", str(target), *flags])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return code, captured.out


def _seq(target: str, record_id: str) -> int:
    ((seq,),) = rows(target, "SELECT seq FROM records WHERE id = ?", record_id)
    return int(seq)


def test_a_whole_store_passes_every_check(written: tuple[str, list[str]], backend: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    target, _ = written
    for flags in ((), ("--quick",)):
        code, out = _check(capsys, target, *flags)
        assert code == 0, out
        assert "no problems" in out and "3 active records" in out
    report = _report(target)
    assert report.ok and report.checks[-1] == "agreement"
    if backend == "sqlite":
        assert report.checks == ("integrity_check", "fts_index", "agreement")


def test_the_check_changes_nothing(written: tuple[str, list[str]],
                                   capsys: pytest.CaptureFixture[str]) -> None:
    target, ids = written
    execute(target, "DELETE FROM embeddings WHERE record_id = ?", ids[0])  # a problem to report, too
    before = dump_lines(target)
    for flags in ((), ("--quick",)):
        code, _ = _check(capsys, target, *flags)
        assert code == EXIT_PROBLEMS
    assert dump_lines(target) == before


@pytest.mark.sqlite_only(SQLITE_PAGES)
@pytest.mark.parametrize("quick", [False, True], ids=["full", "quick"])
def test_an_overwritten_index_page_is_found(written: tuple[str, list[str]],
                                            capsys: pytest.CaptureFixture[str], quick: bool) -> None:
    path, _ = written
    damaged = _copy(path, "damaged.sqlite")
    corrupt_page(damaged, "records_scope")
    code, out = _check(capsys, damaged, *(["--quick"] if quick else []))
    assert code == EXIT_PROBLEMS
    assert "sqlite" in out and "PRAGMA quick_check reports" in out
    assert check_file(path).ok  # the original beside it is untouched


@pytest.mark.sqlite_only(SQLITE_PAGES)
def test_an_overwritten_fts_page_is_found(written: tuple[str, list[str]],
                                          capsys: pytest.CaptureFixture[str]) -> None:
    path, _ = written
    damaged = _copy(path, "damaged.sqlite")
    corrupt_page(damaged, "records_fts_idx")
    code, out = _check(capsys, damaged)
    assert code == EXIT_PROBLEMS
    assert "fts_index" in out


@pytest.mark.sqlite_only(SQLITE_PAGES)
@pytest.mark.parametrize("quick", [False, True], ids=["full", "quick"])
def test_damaged_full_text_segments_are_reported_not_raised(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], quick: bool,
) -> None:
    # Garbage inside a segment can read as a length FTS5 then tries to allocate, which
    # SQLite answers as out of memory: the check must call that damage, not crash.
    world = make_world(tmp_path / "w")
    for n in range(300):
        _write(world, f"Aditya note {n} about topic{n} and widget{n % 7}.", f"note_{n}")
    world.rt.close()
    damaged = _copy(world.rt.store.path, "damaged.sqlite")
    corrupt_fts_segments(damaged)
    code, out = _check(capsys, damaged, *(["--quick"] if quick else []))
    assert code == EXIT_PROBLEMS
    assert "fts_index" in out


@pytest.mark.sqlite_only(SQLITE_PAGES)
def test_a_damaged_schema_page_is_reported_not_raised(written: tuple[str, list[str]],
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    path, _ = written
    damaged = _copy(path, "damaged.sqlite")
    corrupt_page(damaged)
    code, out = _check(capsys, damaged)
    assert code == EXIT_PROBLEMS
    assert "unreadable" in out and "schema cannot be read" in out


def test_a_missing_fts_row_names_its_record(written: tuple[str, list[str]],
                                            capsys: pytest.CaptureFixture[str]) -> None:
    target, ids = written
    execute(target, "DELETE FROM records_fts WHERE rowid = ?", _seq(target, ids[1]))
    code, out = _check(capsys, target)
    assert code == EXIT_PROBLEMS
    assert ("missing_fts_row: 1 active record(s) without an FTS row, so lexical search cannot find"
            f" them: {ids[1]}") in out
    assert ids[0] not in out and ids[2] not in out


def test_a_missing_embedding_names_its_record(written: tuple[str, list[str]],
                                              capsys: pytest.CaptureFixture[str]) -> None:
    target, ids = written
    execute(target, "DELETE FROM embeddings WHERE record_id = ?", ids[2])
    code, out = _check(capsys, target, "--quick")
    assert code == EXIT_PROBLEMS
    assert "missing_embedding: 1 active record(s) without a vector" in out and ids[2] in out


def test_stray_rows_orphan_vectors_and_foreign_vectors_are_named(
    written: tuple[str, list[str]], backend: str, capsys: pytest.CaptureFixture[str],
) -> None:
    target, ids = written
    execute(target, "UPDATE records SET status = 'deleted' WHERE id = ?", ids[0])  # FTS row left behind
    if backend == "postgres":  # SQLite's connections leave foreign keys off; a restore may, too
        execute(target, "ALTER TABLE embeddings DROP CONSTRAINT embeddings_record_id_fkey")
    execute(target, "INSERT INTO embeddings(record_id, model, version, dims, vector)"
                    " VALUES ('gone', 'fake', 'fake-1', 2, ?)", bytes(8))
    execute(target, "UPDATE embeddings SET version = 'other' WHERE record_id = ?", ids[1])
    execute(target, "UPDATE embeddings SET dims = 3 WHERE record_id = ?", ids[2])
    code, out = _check(capsys, target, "--quick")
    assert code == EXIT_PROBLEMS
    assert "  orphan_embedding: 1 vector(s) whose record does not exist: gone" in out
    found = {f.problem: f for f in _report(target).findings}
    assert set(found) == {"stray_fts_row", "orphan_embedding", "foreign_embedding", "malformed_vector"}
    assert f"({ids[0]})" in found["stray_fts_row"].detail
    assert found["orphan_embedding"].ids == ("gone",)
    assert found["foreign_embedding"].ids == (ids[1],)
    assert "fake version fake-1 (384-d)" in found["foreign_embedding"].detail
    assert found["malformed_vector"].ids == (ids[2],)


def test_check_refuses_what_is_not_a_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("meeting notes\n" * 50)
    assert main(["check", "--store", str(notes)]) == 1
    assert main(["check", "--store", str(tmp_path / "missing.sqlite")]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [f"retold check: {notes} is not a SQLite database; refusing to open it",
                     f"retold check: no store at {tmp_path / 'missing.sqlite'}; `retold migrate --store"
                     f" {tmp_path / 'missing.sqlite'}` creates one"]


def test_a_store_whose_header_is_damaged_is_reported_as_damaged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = Store(tmp_path / "memory.sqlite")
    store.close()
    path = tmp_path / "memory.sqlite"
    with path.open("r+b") as raw:  # SQLite's signature kept, the page size after it garbled
        raw.seek(16)
        raw.write(b"\xff" * 8)
    assert main(["check", "--store", str(path)]) == EXIT_PROBLEMS
    out = capsys.readouterr().out
    assert "unreadable" in out and "not a SQLite database" in out


@pytest.mark.sqlite_only("snapshots are SQLite files; a PostgreSQL store is dumped with pg_dump")
def test_snapshot_load_refuses_a_damaged_snapshot_before_touching_the_store(
    world: World, tmp_path: Path,
) -> None:
    for n in range(3):
        _write(world, f"Aditya keeps item {n} in the drawer.", f"drawer_{n}")
    ops = world.rt.operations
    snap = tmp_path / "snap.sqlite"
    ops.snapshot_save(snap)
    corrupt_page(snap, "records_scope")
    fresh = _write(world, "Aditya keeps a torch in the car.", "car")
    before = world.counts()
    with pytest.raises(OperationError, match=r"fails its integrity check \(1 problem: sqlite"):
        ops.snapshot_load(snap)
    assert world.counts() == before and world.rt.store.get_record(fresh) is not None


@pytest.mark.sqlite_only("snapshots are SQLite files; a PostgreSQL store is dumped with pg_dump")
def test_snapshot_load_refuses_a_snapshot_whose_rows_disagree(world: World, tmp_path: Path) -> None:
    record_id = _write(world, "Aditya keeps a torch in the car.", "car")
    ops = world.rt.operations
    snap = tmp_path / "snap.sqlite"
    ops.snapshot_save(snap)
    execute(snap, "DELETE FROM embeddings WHERE record_id = ?", record_id)
    with pytest.raises(OperationError, match=r"missing_embedding \(1\).*retold check --store"):
        ops.snapshot_load(snap)
    whole = tmp_path / "whole.sqlite"
    ops.snapshot_save(whole)
    assert ops.snapshot_load(whole).records == 1
