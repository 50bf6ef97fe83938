"""A worker's start-up check of its store, without a broker: damage stops it with one
error line, disagreement lets it start with one warning (on both backends), a whole store
one info line, an empty PostgreSQL database none; and a real worker process on a damaged
copy exits before it takes any task."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from retold.config import Config, is_database_url, read_config
from retold.config.env import store_target as store_keys
from retold.store.postgres.url import redact
from retold.testing import World
from tests import postgres
from tests.conditions import corrupt_page, write_lock_held
from tests.sql import execute
from workers.startup import EXIT_DAMAGED, check_store

ROOT = Path(__file__).resolve().parents[2]
SQLITE_FILE = "damage and locks of a SQLite file; PostgreSQL keeps its own pages and locks"


def _closed_copy(world: World, name: str) -> Path:
    result = world.write(content="Aditya keeps a torch in the car.", attribute="car")
    assert result.ok and result.record_id
    world.rt.close()
    copy = Path(world.rt.store.path).with_name(name)
    shutil.copyfile(world.rt.store.path, copy)
    return copy


def _closed_store(world: World, store_target: str) -> str:
    """A copy of the world's store file, or on PostgreSQL the store itself, closed."""
    if not is_database_url(store_target):
        return str(_closed_copy(world, "copy.sqlite"))
    result = world.write(content="Aditya keeps a torch in the car.", attribute="car")
    assert result.ok and result.record_id
    world.rt.close()
    return store_target


def _config(target: str | Path) -> Config:
    return read_config(overrides={"store": store_keys(str(target)), "embedding": {"model": "fake"}})


def _messages(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "workers.startup"]


@pytest.mark.sqlite_only(SQLITE_FILE)
def test_a_damaged_store_stops_the_worker_with_one_error_line(
    world: World, caplog: pytest.LogCaptureFixture,
) -> None:
    damaged = _closed_copy(world, "damaged.sqlite")
    corrupt_page(damaged, "records_scope")
    with caplog.at_level(logging.INFO), pytest.raises(SystemExit) as stopped:
        check_store(_config(damaged))
    assert stopped.value.code == EXIT_DAMAGED
    ((level, message),) = _messages(caplog)
    assert level == logging.ERROR
    assert message.startswith(f"refusing to start: store {damaged} is damaged (1 problem: sqlite")


def test_rows_that_disagree_log_one_warning_and_the_worker_starts(
    world: World, store_target: str, caplog: pytest.LogCaptureFixture,
) -> None:
    copy = _closed_store(world, store_target)
    execute(copy, "DELETE FROM records_fts")
    with caplog.at_level(logging.INFO):
        check_store(_config(copy))
    ((level, message),) = _messages(caplog)
    assert level == logging.WARNING and "missing_fts_row (1)" in message
    assert message.startswith(f"store {redact(copy)}: 1 problem")


@pytest.mark.sqlite_only(SQLITE_FILE)
def test_a_store_locked_past_the_wait_lets_the_worker_start(
    world: World, caplog: pytest.LogCaptureFixture,
) -> None:
    copy = _closed_copy(world, "copy.sqlite")
    config = read_config(overrides={"store": {"path": str(copy), "busy_timeout_seconds": 0.2},
                                    "embedding": {"model": "fake"}})
    with caplog.at_level(logging.INFO), write_lock_held(copy):
        check_store(config)
    ((level, message),) = _messages(caplog)
    assert level == logging.WARNING and "start-up check skipped" in message and "is locked" in message


def test_a_whole_store_logs_one_info_line(
    world: World, store_target: str, caplog: pytest.LogCaptureFixture,
) -> None:
    copy = _closed_store(world, store_target)
    with caplog.at_level(logging.INFO):
        check_store(_config(copy))
    ((level, message),) = _messages(caplog)
    assert level == logging.INFO and "passed its quick check (1 active records" in message


def test_an_empty_postgresql_database_is_left_to_the_runtime(
    pg_database: str, caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO):
        check_store(_config(postgres.fresh_schema(pg_database)))
    assert _messages(caplog) == []


@pytest.mark.sqlite_only(SQLITE_FILE)
def test_a_worker_process_on_a_damaged_store_exits_before_taking_tasks(world: World, tmp_path: Path) -> None:
    damaged = _closed_copy(world, "damaged.sqlite")
    corrupt_page(damaged, "records_scope")
    config = tmp_path / "worker.yaml"
    config.write_text(f"store:\n  path: {damaged}\nembedding:\n  model: fake\n  version: fake-1\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RETOLD_")}
    env.update(RETOLD_CONFIG=str(config), PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "celery", "-A", "workers", "worker", "--pool", "solo",
                           "-Q", "extraction"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == EXIT_DAMAGED, done.stderr[-2000:]
    refusals = [line for line in done.stderr.splitlines() if "refusing to start" in line]
    assert len(refusals) == 1 and "is damaged" in refusals[0], done.stderr[-2000:]
    assert "Traceback" not in done.stderr and "ready." not in done.stderr
