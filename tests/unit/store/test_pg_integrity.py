"""``retold check`` on PostgreSQL: amcheck's btree check where the database has the
extension, a skip that says how to get it where it has not, a skip (not a failure) for a
role that may read but not run amcheck, and a database without a store refused. Each test
has a database of its own, made from template0, since an extension belongs to a whole
database. The agreement check is tested on both backends in test_integrity.py."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from retold.cli import main
from retold.cli.check import EXIT_PROBLEMS
from retold.store.postgres.integrity import check_database
from retold.testing import make_world
from tests import postgres
from tests.sql import dump_lines, execute, rows

_databases = itertools.count(1)


@pytest.fixture
def database(pg_database: str) -> Iterator[str]:
    """A database of this test's own, without any extension."""
    with postgres.test_database(f"_check{next(_databases)}", template="template0") as url:
        yield url


@pytest.fixture
def store_url(database: str, tmp_path: Path) -> str:
    """A store with three records written through the write path, closed."""
    world = make_world(tmp_path / "w", store=database)
    for n in range(3):
        result = world.write(content=f"Aditya keeps item {n} on the desk.", attribute=f"desk_{n}")
        assert result.ok, result
    world.rt.close()
    return database


def _amcheck(url: str) -> None:
    if not rows(url, "SELECT 1 FROM pg_available_extensions WHERE name = 'amcheck'"):
        pytest.skip("this PostgreSQL server has no amcheck extension to install")
    execute(url, "CREATE EXTENSION amcheck")


def _check(capsys: pytest.CaptureFixture[str], url: str, *flags: str) -> tuple[int, str]:
    code = main(["check", "--store", url, *flags])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return code, captured.out + captured.err


def test_without_amcheck_the_index_check_is_skipped_and_says_how_to_enable_it(
    store_url: str, capsys: pytest.CaptureFixture[str],
) -> None:
    for flags in ((), ("--quick",)):
        code, out = _check(capsys, store_url, *flags)
        assert code == 0, out
        lines = out.splitlines()
        assert "no problems (agreement; 3 active records;" in lines[0]
        assert lines[1:-1] == ["  skipped btree index check: the amcheck extension is not installed in this "
                               "database (a role allowed to create extensions adds it: CREATE EXTENSION"
                               " amcheck)"]
        assert lines[-1].startswith("equivalence judge: ")
    assert not rows(store_url, "SELECT 1 FROM pg_extension WHERE extname = 'amcheck'")  # not created


def test_with_amcheck_every_btree_index_is_checked(store_url: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    _amcheck(store_url)
    code, out = _check(capsys, store_url)
    assert code == 0 and "no problems (bt_index_check heapallindexed, agreement; 3 active records" in out, out
    assert "skipped" not in out
    assert check_database(store_url, quick=True).checks == ("bt_index_check", "agreement")


def test_an_index_that_lacks_rows_of_its_table_is_named(
    store_url: str, capsys: pytest.CaptureFixture[str],
) -> None:
    _amcheck(store_url)
    # An index whose expression changed meaning after it was built holds entries that no
    # longer match its table: what a damaged index looks like to amcheck.
    execute(store_url, "CREATE FUNCTION shout(t text) RETURNS text IMMUTABLE LANGUAGE sql"
                       " AS 'SELECT lower(t)'")
    execute(store_url, "CREATE INDEX records_shout ON records (shout(content))")
    execute(store_url, "CREATE OR REPLACE FUNCTION shout(t text) RETURNS text IMMUTABLE LANGUAGE sql"
                       " AS 'SELECT upper(t)'")
    before = dump_lines(store_url)
    code, out = _check(capsys, store_url)
    assert code == EXIT_PROBLEMS
    assert "1 problem: btree_index (1)" in out
    assert ("  btree_index: 1 btree index(es) amcheck found damaged, so lookups through them can miss or"
            " misreport rows (REINDEX rebuilds one from its table): records_shout: heap tuple") in out
    report = check_database(store_url)
    assert report.damaged and report.findings[0].ids == ("records_shout",)
    # --quick checks each index's structure, which this damage leaves intact.
    assert _check(capsys, store_url, "--quick")[0] == 0
    assert dump_lines(store_url) == before


def test_a_role_that_may_only_read_runs_the_check_and_skips_amcheck(
    store_url: str, capsys: pytest.CaptureFixture[str],
) -> None:
    _amcheck(store_url)
    role = f"retold_reader_{os.getpid()}"
    execute(store_url, f"CREATE ROLE {role} NOLOGIN")
    try:
        execute(store_url, f"GRANT USAGE ON SCHEMA public TO {role}")
        execute(store_url, f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}")
        code, out = _check(capsys, f"{store_url}?options=-crole%3D{role}")
        assert code == 0, out
        assert "no problems (agreement; 3 active records" in out
        assert "  skipped btree index check: this role may not run amcheck's bt_index_check (" in out
    finally:
        execute(store_url, f"DROP OWNED BY {role}")
        execute(store_url, f"DROP ROLE {role}")


def test_a_database_without_a_store_is_refused(pg_database: str, capsys: pytest.CaptureFixture[str]) -> None:
    empty = postgres.fresh_schema(pg_database)
    code, out = _check(capsys, empty)
    assert code == 1
    assert out.strip() == (f"retold check: no store at {empty}: the database holds no Retold schema;"
                           f" `retold migrate --store {empty}` creates one")
    assert not rows(empty, "SELECT 1 FROM information_schema.tables WHERE table_schema = current_schema()")
