"""The search-log migrations: a store that logged searches before decisions were logged
keeps its rows, says they cannot be replayed, and logs decisions from then on; host-issued
searches logged under their old trigger name ``auto`` read as ``host``; a new store says
nothing. Both backends reach the same schema version."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from retold.models import SearchRequest
from retold.retrieve.replay import NotReplayable, replay
from retold.store import Store
from retold.store.migrations import LATEST, MIGRATIONS, migrate
from retold.store.postgres.schema import PG_MIGRATIONS
from retold.testing import make_world
from tests.sql import execute

_BEFORE = MIGRATIONS[:[m.name for m in MIGRATIONS].index("search decision column")]
_DECISION = _BEFORE[-1].version + 1
_BEFORE_HOST = MIGRATIONS[:[m.name for m in MIGRATIONS].index("host trigger name")]
COLUMNS = ("id", "at", "agent_id", "user_id", "trigger", "request", "rewrite_status", "readable_scopes",
           "dense", "lexical", "entity", "fused", "freshness", "gated_out", "deduped_out", "budget_out",
           "returned", "explanations", "config_flags", "warm", "timings_ms")


def test_both_backends_end_at_the_same_schema_version() -> None:
    assert PG_MIGRATIONS[-1][0] == LATEST == MIGRATIONS[-1].version


@pytest.mark.sqlite_only("the bytes of an older SQLite store")
def test_an_older_store_keeps_its_rows_but_refuses_to_replay_them(tmp_path: Path) -> None:
    path = tmp_path / "memory.sqlite"
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        migrate(conn, str(path), _BEFORE)
    old = dict.fromkeys(COLUMNS, "[]") | {"id": "old-search", "at": "2026-01-01T00:00:00.000000Z",
                                            "agent_id": "a", "user_id": "u", "trigger": "tool",
                                            "request": "{}", "rewrite_status": "disabled",
                                            "config_flags": "{}", "warm": 1, "timings_ms": "{}"}
    execute(path, f"INSERT INTO search_log({', '.join(old)}) VALUES ({', '.join('?' * len(old))})",
            *old.values())
    store = Store(path)
    try:
        report = store.migration_report
        assert report is not None
        assert report.applied == tuple(m.version for m in MIGRATIONS if m.version >= _DECISION)
        assert report.notes == (f"migration {_DECISION}: search_log rows written before this migration are "
                                "kept but cannot be replayed",)
        row = store.search_log_row("old-search")
        assert row is not None and row["decision"] is None
    finally:
        store.close()
    world = make_world(tmp_path, store=str(path))
    with pytest.raises(NotReplayable):
        replay(row, world.rt.config.retrieval.gate)
    world.write(content="Aditya prefers concise technical explanations.", attribute="explanation_style")
    outcome = world.rt.retriever.search(world.p, SearchRequest(queries=["concise explanations"]))
    world.rt.flush_search_log()
    logged = world.rt.store.search_log_row(outcome.response.search_id)
    assert logged is not None and json.loads(logged["decision"])["answered"] is True
    returned = [r.record.id for r in outcome.response.results]
    assert replay(logged, world.rt.config.retrieval.gate).kept == returned
    world.rt.close()


def test_a_new_store_has_nothing_to_say_about_old_rows(tmp_path: Path) -> None:
    store = Store(tmp_path / "new.sqlite")
    try:
        report = store.migration_report
        assert report is not None and LATEST in report.applied and report.notes == ()
    finally:
        store.close()


@pytest.mark.sqlite_only("the bytes of an older SQLite store")
def test_host_issued_searches_logged_as_auto_count_as_host(tmp_path: Path) -> None:
    path = tmp_path / "memory.sqlite"
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        migrate(conn, str(path), _BEFORE_HOST)
    for search_id, trigger in (("host-search", "auto"), ("tool-search", "tool")):
        row = dict.fromkeys(COLUMNS, "[]") | {
            "id": search_id, "at": "2026-01-01T00:00:00.000000Z", "agent_id": "a", "user_id": "u",
            "trigger": trigger, "request": "{}", "rewrite_status": "disabled", "config_flags": "{}",
            "warm": 1, "timings_ms": "{}"}
        execute(path, f"INSERT INTO search_log({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                *row.values())
    store = Store(path)
    try:
        assert store.search_counts() == {"host": (1, 1), "tool": (1, 1)}
    finally:
        store.close()
