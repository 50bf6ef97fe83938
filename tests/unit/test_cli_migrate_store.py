"""``retold migrate-store``: a store in use moved into a fresh PostgreSQL schema through
``main``, its report as a table and as JSON; refusals as one line and an exit code; and
the search check itself (``retold.retrieve.comparison``) on two real stores, one missing a
record. The PostgreSQL cases need the ``pg_database`` fixture."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from retold.cli import main
from retold.quiet import QUIET_ENVIRONMENT
from retold.retrieve.comparison import compare_searches, sample_query
from retold.store.sampling import sample_records
from retold.testing import AGENT, T0, make_world
from tests import postgres
from tests.mixed_store import MixedStore, build_mixed_store, config_text


@pytest.fixture(autouse=True)
def _restore_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # main() sets the quiet variables in os.environ; keep them out of later tests.
    for name, value in QUIET_ENVIRONMENT.items():
        monkeypatch.setenv(name, os.environ.get(name, value))


@pytest.fixture
def mixed(tmp_path: Path) -> MixedStore:
    return build_mixed_store(tmp_path)


@pytest.fixture
def config(tmp_path: Path) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(config_text())
    return str(path)


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["migrate-store", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_moves_a_store_and_reports_counts_and_searches(
    mixed: MixedStore, config: str, pg_database: str, capsys: pytest.CaptureFixture[str],
) -> None:
    target = postgres.fresh_schema(pg_database)
    code, out, err = _run(capsys, "--from", str(mixed.path), "--to", target, "--config", config, "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["ok"] and all(row["ok"] for row in report["tables"])
    assert {row["table"]: row["postgres"] for row in report["tables"]}["records"] == 10
    assert report["records_version"] == mixed.records_version
    search = report["search"]
    # The live records with a reader: six of Aditya's (one without a vector), the
    # project's and the summary.
    assert search["sampled"] == 8 and search["lost"] == [] and search["agreeing"] == 8
    assert search["found_in_both"] >= 7

    again = postgres.fresh_schema(pg_database)
    code, out, err = _run(capsys, "--from", str(mixed.path), "--to", again, "--config", config)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith(f"moved {mixed.path} -> postgresql://")
    assert any(line.split() == ["records", "10", "10"] for line in lines)
    assert any(line.split()[:2] == ["records_fts", "(rebuilt)"] for line in lines)
    assert "search check, top 5 of 8 sampled records: 8 agree" in lines[-1]


def test_the_check_searches_leave_no_search_log_rows(
    mixed: MixedStore, config: str, pg_database: str, capsys: pytest.CaptureFixture[str],
) -> None:
    target = postgres.fresh_schema(pg_database)
    code, out, _ = _run(capsys, "--from", str(mixed.path), "--to", target, "--config", config, "--json")
    assert code == 0
    rows = {row["table"]: (row["sqlite"], row["postgres"]) for row in json.loads(out)["tables"]}
    assert rows["search_log"] == (1, 1)
    import psycopg

    with psycopg.connect(target) as conn:
        assert conn.execute("SELECT count(*) FROM search_log").fetchone() == (1,)


def test_a_target_holding_rows_is_one_line_and_exit_1(
    mixed: MixedStore, config: str, pg_database: str, capsys: pytest.CaptureFixture[str],
) -> None:
    target = postgres.fresh_schema(pg_database)
    assert _run(capsys, "--from", str(mixed.path), "--to", target, "--config", config)[0] == 0
    code, out, err = _run(capsys, "--from", str(mixed.path), "--to", target, "--config", config)
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and "already holds rows" in err and "Traceback" not in err


@pytest.mark.parametrize(("source", "target", "code", "says"), [
    ("{store}", "{store}", 2, "--to takes a PostgreSQL URL"),
    ("postgresql://u@h/db", "postgresql://u@h/db", 2, "--from takes the SQLite store file"),
    ("{missing}", "postgresql://u@127.0.0.1:1/db", 1, "no SQLite store at"),
    ("{store}", "postgresql://u:hunter2@127.0.0.1:1/db", 1, "cannot connect to the store"),
])
def test_bad_arguments_are_one_line(
    mixed: MixedStore, config: str, capsys: pytest.CaptureFixture[str], source: str, target: str,
    code: int, says: str,
) -> None:
    where = {"store": str(mixed.path), "missing": str(mixed.path.with_name("missing.sqlite"))}
    got, out, err = _run(capsys, "--from", source.format(**where), "--to", target.format(**where),
                         "--config", config)
    assert got == code and out == ""
    assert err.startswith("retold migrate-store: ") and err.count("\n") == 1, err
    assert says in err and "hunter2" not in err and "Traceback" not in err


def test_a_record_the_target_misses_fails_the_search_check(tmp_path: Path) -> None:
    # Two real SQLite stores: the source knows where Aditya's desk is, the target does not.
    source = make_world(tmp_path / "source")
    target = make_world(tmp_path / "target")
    try:
        source.say("user", "My desk is by the north window now.")
        written = source.write(content="Aditya's desk is by the north window.", attribute="desk",
                               source_kind="user_statement", evidence="My desk is by the north window",
                               entities=[("person", "Aditya", "about")])
        samples = sample_records(source.rt.store, 50, T0)
        assert [s.record_id for s in samples] == [written.record_id]
        assert sample_query(samples[0]) == "aditya desk Aditya's desk is by the north window."
        result = compare_searches(samples, source.rt.store, source.rt.comparison_retriever().search,
                                  target.rt.comparison_retriever().search)
    finally:
        source.rt.close()
        target.rt.close()
    assert not result.ok and result.agreeing == 0
    assert [s.record_id for s in result.lost] == [written.record_id]
    assert result.lost[0].target_ids == () and result.mean_overlap == 0.0


def test_a_sampled_record_nobody_may_read_is_counted_not_searched(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    try:
        world.say("user", "My desk is by the north window now.")
        world.write(content="Aditya's desk is by the north window.", attribute="desk",
                    source_kind="user_statement", evidence="My desk is by the north window")
        samples = sample_records(world.rt.store, 50, T0)
        world.rt.store.delete_grant(AGENT, samples[0].scope)
        search = world.rt.comparison_retriever().search
        result = compare_searches(samples, world.rt.store, search, search)
    finally:
        world.rt.close()
    assert result.unreadable == 1 and result.samples == () and result.ok


def test_a_record_with_the_very_same_text_counts_as_found(tmp_path: Path) -> None:
    # A search keeps one of several identical memories; which one may differ between the
    # stores' rankings, so the same text under another id is the record found.
    worlds = [make_world(tmp_path / name) for name in ("source", "target")]
    try:
        written = []
        for world in worlds:
            world.say("user", "My desk is by the north window now.")
            written.append(world.write(content="Aditya's desk is by the north window.", attribute="desk",
                                       source_kind="user_statement",
                                       evidence="My desk is by the north window").record_id)
        samples = sample_records(worlds[0].rt.store, 50, T0)
        result = compare_searches(samples, worlds[0].rt.store, worlds[0].rt.comparison_retriever().search,
                                  worlds[1].rt.comparison_retriever().search)
    finally:
        for world in worlds:
            world.rt.close()
    assert written[0] != written[1]
    assert result.ok and result.found_in_both == 1 and result.mean_overlap == 0.0
    assert result.samples[0].target_ids == (written[1],)
