"""Integrity checks on real store files: SQLite damage made with the file's bytes, and
disagreement made by removing or adding one row, each found by ``retold check`` with
the record it concerns named; ``snapshot load`` refusing such a copy."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from retold.cli import main
from retold.cli.check import EXIT_PROBLEMS
from retold.operations import OperationError
from retold.store.integrity import check_file
from retold.testing import World, make_world
from tests.conditions import corrupt_page
from tests.sql import execute, rows


@pytest.fixture
def written(tmp_path: Path) -> tuple[Path, list[str]]:
    """A closed store holding three records written through the write path, with their
    FTS rows and vectors; returns its path and the record ids."""
    world = make_world(tmp_path / "w")
    ids = [_write(world, f"Aditya keeps {thing} on the desk.", f"desk_{n}")
           for n, thing in enumerate(("a red lamp", "two plants", "a chess clock"))]
    world.rt.close()
    return Path(world.rt.store.path), ids


def _write(world: World, content: str, attribute: str) -> str:
    result = world.write(content=content, attribute=attribute)
    assert result.ok and result.record_id, result
    return result.record_id


def _copy(path: Path, name: str) -> Path:
    target = path.with_name(name)
    shutil.copyfile(path, target)
    return target


def _check(capsys: pytest.CaptureFixture[str], path: Path, *flags: str) -> tuple[int, str]:
    code = main(["check", "--store", str(path), *flags])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return code, captured.out


def _seq(path: Path, record_id: str) -> int:
    ((seq,),) = rows(path, "SELECT seq FROM records WHERE id = ?", record_id)
    return int(seq)


def test_a_whole_store_passes_every_check(written: tuple[Path, list[str]],
                                          capsys: pytest.CaptureFixture[str]) -> None:
    path, _ = written
    for flags in ((), ("--quick",)):
        code, out = _check(capsys, path, *flags)
        assert code == 0, out
        assert "no problems" in out and "3 active records" in out
    report = check_file(path)
    assert report.ok and report.checks == ("integrity_check", "fts_index", "agreement")


@pytest.mark.parametrize("quick", [False, True], ids=["full", "quick"])
def test_an_overwritten_index_page_is_found(written: tuple[Path, list[str]],
                                            capsys: pytest.CaptureFixture[str], quick: bool) -> None:
    path, _ = written
    damaged = _copy(path, "damaged.sqlite")
    corrupt_page(damaged, "records_scope")
    code, out = _check(capsys, damaged, *(["--quick"] if quick else []))
    assert code == EXIT_PROBLEMS
    assert "sqlite" in out and "PRAGMA quick_check reports" in out
    assert check_file(path).ok  # the original beside it is untouched


def test_an_overwritten_fts_page_is_found(written: tuple[Path, list[str]],
                                          capsys: pytest.CaptureFixture[str]) -> None:
    path, _ = written
    damaged = _copy(path, "damaged.sqlite")
    corrupt_page(damaged, "records_fts_idx")
    code, out = _check(capsys, damaged)
    assert code == EXIT_PROBLEMS
    assert "fts_index" in out


def test_a_damaged_schema_page_is_reported_not_raised(written: tuple[Path, list[str]],
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    path, _ = written
    damaged = _copy(path, "damaged.sqlite")
    corrupt_page(damaged)
    code, out = _check(capsys, damaged)
    assert code == EXIT_PROBLEMS
    assert "unreadable" in out and "schema cannot be read" in out


def test_a_missing_fts_row_names_its_record(written: tuple[Path, list[str]],
                                            capsys: pytest.CaptureFixture[str]) -> None:
    path, ids = written
    execute(path, "DELETE FROM records_fts WHERE rowid = ?", _seq(path, ids[1]))
    code, out = _check(capsys, path)
    assert code == EXIT_PROBLEMS
    assert ("missing_fts_row: 1 active record(s) without an FTS row, so lexical search cannot find"
            f" them: {ids[1]}") in out
    assert ids[0] not in out and ids[2] not in out


def test_a_missing_embedding_names_its_record(written: tuple[Path, list[str]],
                                              capsys: pytest.CaptureFixture[str]) -> None:
    path, ids = written
    execute(path, "DELETE FROM embeddings WHERE record_id = ?", ids[2])
    code, out = _check(capsys, path, "--quick")
    assert code == EXIT_PROBLEMS
    assert "missing_embedding: 1 active record(s) without a vector" in out and ids[2] in out


def test_stray_rows_orphan_vectors_and_foreign_vectors_are_named(written: tuple[Path, list[str]]) -> None:
    path, ids = written
    execute(path, "UPDATE records SET status = 'deleted' WHERE id = ?", ids[0])  # FTS row left behind
    execute(path, "PRAGMA foreign_keys = OFF")
    execute(path, "INSERT INTO embeddings(record_id, model, version, dims, vector)"
                  " VALUES ('gone', 'fake', 'fake-1', 2, x'0000000000000000')")
    execute(path, "UPDATE embeddings SET version = 'other' WHERE record_id = ?", ids[1])
    execute(path, "UPDATE embeddings SET dims = 3 WHERE record_id = ?", ids[2])
    found = {f.problem: f for f in check_file(path).findings}
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
                     f"retold check: no store at {tmp_path / 'missing.sqlite'}"]


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
