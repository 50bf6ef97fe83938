"""The Celery layer without a broker: thin tasks, the scheduler's bounded failure, the
per-process runtime and the embedded broker's sweep."""

from __future__ import annotations

import inspect
import logging
import sqlite3
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import workers.runtime
import workers.tasks
from retold.config import load_config
from retold.ingest.extractor import ReplayExtractor
from retold.testing import T0, World, make_record
from workers.app import create_app, purge_consumed_messages
from workers.scheduler import CeleryScheduler

DEAD_BROKER = "redis://127.0.0.1:1/0"
TASKS = ("extract_session", "review_session", "recover", "temporal_review", "expire", "retain",
         "reembed", "queue_maintenance")
RETOLD_CALLS = ("_extract(", ".extraction.", ".operations.")


@pytest.mark.parametrize("name", TASKS)
def test_each_task_is_a_thin_wrapper_over_a_plain_function(name: str) -> None:
    task = getattr(workers.tasks, name)
    source = inspect.getsource(task.run)
    body = [line for line in source.splitlines()[2:] if line.strip()]
    assert len(body) <= 6, source
    assert task.name == f"retold.{name}"
    if name == "queue_maintenance":
        assert "purge_consumed_messages(" in source
    else:
        assert any(call in source for call in RETOLD_CALLS), source


def test_the_scheduler_raises_quickly_when_the_broker_is_unreachable() -> None:
    app = create_app(load_config(overrides={"queue": {"broker_url": DEAD_BROKER}}))
    started = time.monotonic()
    with pytest.raises(Exception):  # noqa: B017  (kombu's OperationalError, whatever the cause)
        CeleryScheduler(app, "extraction").schedule("s1")
    assert time.monotonic() - started < 2


def test_session_end_with_an_unreachable_broker_logs_one_warning_and_returns(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    app = create_app(load_config(overrides={"queue": {"broker_url": DEAD_BROKER}}))
    world.rt.hooks.scheduler = CeleryScheduler(app, "extraction")
    world.say("user", "Please keep every answer short.")
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="retold"):
        world.rt.hooks.on_session_end(world.p)
    assert time.monotonic() - started < 2
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "could not schedule extraction of session s1" in warnings[0].getMessage()
    session = world.rt.store.get_session("s1")
    assert session is not None and session.ended_at is not None


def test_recover_enqueues_each_pending_session_by_stage(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    world.say("user", "Please keep every answer short.")
    world.rt.hooks.on_session_end(world.p)
    sent: list[tuple[str, list[Any]]] = []
    monkeypatch.setattr(workers.tasks, "current_runtime", lambda: world.rt)
    monkeypatch.setattr(workers.tasks.extract_session, "apply_async",
                        lambda args: sent.append(("extract", args)))
    monkeypatch.setattr(workers.tasks.review_session, "apply_async",
                        lambda args: sent.append(("review", args)))
    assert workers.tasks.recover.run() == {"enqueued": ["s1"]}
    assert sent == [("extract", ["s1"])]


def test_the_sweep_tasks_call_operations_on_the_process_runtime(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(workers.tasks, "current_runtime", lambda: world.rt)
    past = make_record(status="provisional", expires_at=T0 - timedelta(days=1))
    world.rt.store.write_record(past)
    assert workers.tasks.expire.run() == {"expired": 1}
    assert workers.tasks.expire.run() == {"expired": 0}  # idempotent
    assert world.record(past.id).status == "expired"
    assert workers.tasks.retain.run() == {"blanked": 0}
    assert workers.tasks.temporal_review.run() == {"flagged": 0}
    # Without an extractor, extraction reports it instead of failing silently.
    world.rt.hooks.on_session_end(world.p)
    assert workers.tasks.extract_session.run("s1")["outcome"] == "not_configured"


def test_queue_maintenance_deletes_only_consumed_messages(tmp_path: Path) -> None:
    queue = tmp_path / "queue.sqlite"
    url = f"sqla+sqlite:///{queue}"
    assert purge_consumed_messages(url) == 0  # no file yet
    with sqlite3.connect(queue) as conn:
        conn.execute("CREATE TABLE kombu_message (id INTEGER PRIMARY KEY, visible BOOLEAN)")
        conn.executemany("INSERT INTO kombu_message (visible) VALUES (?)", [(0,), (0,), (1,)])
    conn.close()
    assert purge_consumed_messages(url) == 2
    assert purge_consumed_messages(url) == 0
    assert purge_consumed_messages("redis://127.0.0.1:6379/0") == 0


def test_the_worker_runtime_is_built_once_and_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f"store:\n  path: {tmp_path / 'w.sqlite'}\nembedding:\n  model: fake\n")
    monkeypatch.setenv("RETOLD_CONFIG", str(config))
    monkeypatch.delenv("RETOLD_STORE", raising=False)
    monkeypatch.delenv("RETOLD_REPLAY_EXTRACTION", raising=False)
    monkeypatch.setattr(workers.runtime, "_runtime", None)
    try:
        first = workers.runtime.current_runtime()
        assert workers.runtime.current_runtime() is first
        assert first.config.store.path == str(tmp_path / "w.sqlite")
        assert not isinstance(first.extractor, ReplayExtractor)
        assert isinstance(first.scheduler, CeleryScheduler)
    finally:
        workers.runtime.close_runtime()
    assert workers.runtime._runtime is None
    workers.runtime.close_runtime()  # safe twice


def test_replay_mode_uses_the_recording_and_an_accepting_reviewer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    from retold.ingest.extractor import output_to_json
    from retold.ingest.reviewer import TableReviewer
    from retold.models import ExtractionOutput, SessionSummary

    recording = tmp_path / "rec.json"
    output = ExtractionOutput([], SessionSummary("A session.", [], []))
    recording.write_text(json.dumps(output_to_json(output)))
    config = tmp_path / "config.yaml"
    config.write_text(f"store:\n  path: {tmp_path / 'w.sqlite'}\nembedding:\n  model: fake\n")
    monkeypatch.setenv("RETOLD_CONFIG", str(config))
    monkeypatch.setenv("RETOLD_REPLAY_EXTRACTION", str(recording))
    rt = workers.runtime.open_runtime()
    try:
        assert isinstance(rt.extractor, ReplayExtractor) and isinstance(rt.reviewer, TableReviewer)
    finally:
        rt.close()
