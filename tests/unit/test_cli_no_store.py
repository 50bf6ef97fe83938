"""A command that reads, pointed at a database or file without Retold's schema (a mistyped
name), creates nothing there: one line naming it and the command that creates a store,
and a non-zero exit. Only ``retold migrate`` makes the schema."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from retold.cli import main
from tests import postgres
from tests.sql import rows

READS = [["dump", "--scope", "user:x"], ["export", "--scope", "user:x"], ["get", "some-id"],
         ["search", "--agent", "a", "--user", "x", "where", "is", "it"], ["sessions"], ["events"],
         ["check"]]
# What a store adds to a database: tables, functions and extensions, outside the catalogs.
_OBJECTS = ("SELECT (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            "  WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')),"
            " (SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
            "  WHERE n.nspname NOT IN ('pg_catalog', 'information_schema')),"
            " (SELECT count(*) FROM pg_extension)")


@pytest.fixture
def empty_database(pg_database: str) -> Iterator[str]:
    """A database of its own with nothing in it (from template0, so not even what the
    server's template1 carries)."""
    with postgres.test_database("_empty", template="template0") as url:
        yield url


def _refused(capsys: pytest.CaptureFixture[str], argv: list[str], target: str) -> str:
    code = main([*argv, "--store", target])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and len(err) == 1, (argv, code, err)
    assert target in err[0] and f"`retold migrate --store {target}` creates one" in err[0], err
    return err[0]


@pytest.mark.parametrize("argv", READS, ids=lambda argv: argv[0])
def test_a_read_of_an_empty_database_creates_nothing(empty_database: str, argv: list[str],
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    before = rows(empty_database, _OBJECTS)
    line = _refused(capsys, argv, empty_database)
    assert "no Retold schema" in line
    assert rows(empty_database, _OBJECTS) == before


def test_migrate_creates_the_store_the_reads_then_use(empty_database: str,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    before = rows(empty_database, _OBJECTS)
    assert main(["migrate", "--store", empty_database]) == 0
    assert rows(empty_database, _OBJECTS) != before
    assert main(["dump", "--scope", "user:x", "--store", empty_database]) == 0
    assert "0 active records in user:x" in capsys.readouterr().err


@pytest.mark.parametrize("argv", READS, ids=lambda argv: argv[0])
def test_a_read_of_a_missing_or_empty_file_creates_nothing(tmp_path: Path, argv: list[str],
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "mistyped.sqlite"
    _refused(capsys, argv, str(missing))
    assert list(tmp_path.iterdir()) == []
    empty = tmp_path / "empty.sqlite"
    empty.touch()
    assert "holds no tables" in _refused(capsys, argv, str(empty))
    assert [p.name for p in tmp_path.iterdir()] == ["empty.sqlite"] and empty.stat().st_size == 0
