"""The Celery layer without a broker: thin tasks, the scheduler's bounded failure, the
per-process runtime and the embedded broker's sweep."""

from __future__ import annotations

import contextlib
import inspect
import logging
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import workers.process_runtime
import workers.tasks
from retold.broker import CeleryScheduler
from retold.config import read_config
from retold.errors import ExtractionError
from retold.ingest.extractor import FakeExtractor, ReplayExtractor
from retold.ingest.reviewer import TableReviewer
from retold.models import CandidateRecord, ExtractionOutput, SessionSummary
from retold.testing import T0, InProcessScheduler, World, make_record
from workers.app import app as worker_app
from workers.app import purge_consumed_messages

DEAD_BROKER = "redis://127.0.0.1:1/0"
TASKS = ("extract_session", "review_session", "recover", "end_idle_sessions", "temporal_review",
         "expire", "retain", "capacity", "backfill", "reembed", "queue_maintenance", "audit_sample")
RETOLD_CALLS = ("_extract(", ".session_end.", ".operations.", ".hooks.")


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
    scheduler = CeleryScheduler(read_config(overrides={"queue": {"broker_url": DEAD_BROKER}}))
    started = time.monotonic()
    try:
        with pytest.raises(Exception):  # noqa: B017  (kombu's OperationalError, whatever the cause)
            scheduler.schedule("s1")
    finally:
        scheduler.close()
    assert time.monotonic() - started < 2


def test_sessions_ended_while_the_broker_is_unreachable_log_one_warning_and_stay_pending(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    scheduler = CeleryScheduler(read_config(overrides={"queue": {"broker_url": DEAD_BROKER}}))
    world.rt.hooks.scheduler = scheduler
    ended = []
    try:
        with caplog.at_level(logging.DEBUG, logger="retold"):
            for n, wait in enumerate((0, 5, 60)):  # the last one tries the broker again
                world.clock.advance(seconds=wait)
                p = replace(world.p, session_id=f"s{n}")
                world.rt.hooks.on_turn(p, "user", "Please keep every answer short.")
                started = time.monotonic()
                world.rt.hooks.on_session_end(p)
                ended.append(time.monotonic() - started)
    finally:
        scheduler.close()
    assert max(ended) < 2
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "could not schedule extraction of session s0" in warnings[0]
    assert [sid for sid, _stage in world.rt.session_end.pending()] == ["s0", "s1", "s2"]


def serve_only(monkeypatch: pytest.MonkeyPatch, rt: Any) -> None:
    """Make the tasks see one tenant, served by ``rt``."""
    @contextlib.contextmanager
    def lease(tenant: str | None = None) -> Iterator[Any]:
        yield rt

    monkeypatch.setattr(workers.tasks, "tenant_runtime", lease)
    monkeypatch.setattr(workers.tasks, "served_tenants", lambda: [rt.tenant])


def test_recover_enqueues_each_pending_session_by_stage(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    world.say("user", "Please keep every answer short.")
    world.rt.hooks.on_session_end(world.p)
    sent: list[tuple[str, list[Any]]] = []
    serve_only(monkeypatch, world.rt)
    monkeypatch.setattr(workers.tasks.extract_session, "apply_async",
                        lambda args, kwargs: sent.append(("extract", args)))
    monkeypatch.setattr(workers.tasks.review_session, "apply_async",
                        lambda args, kwargs: sent.append(("review", args)))
    assert workers.tasks.recover.run() == {"enqueued": ["s1"]}
    assert sent == [("extract", ["s1"])]


def test_the_sweep_tasks_call_operations_on_the_process_runtime(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    serve_only(monkeypatch, world.rt)
    past = make_record(status="provisional", expires_at=T0 - timedelta(days=1))
    world.rt.store.write_record(past)
    assert workers.tasks.expire.run() == {"expired": 1}
    assert workers.tasks.expire.run() == {"expired": 0}  # idempotent
    assert world.record(past.id).status == "expired"
    assert workers.tasks.retain.run() == {"blanked": 0, "search_logs_deleted": 0, "event_payloads_thinned": 0,
                                           "forgotten_erased": 0}
    assert workers.tasks.temporal_review.run() == {"flagged": 0}
    assert workers.tasks.capacity.run() == {"scopes_over": 0, "archived": 0}  # no cap configured
    assert workers.tasks.backfill.run() == {"embedded": 0, "pending": 0, "error": None}
    # Without an extractor the task fails, naming what to set, instead of succeeding.
    world.rt.hooks.on_session_end(world.p)
    with pytest.raises(ExtractionError, match="s1 not_configured: .*no extractor is configured"):
        workers.tasks.extract_session.run("s1")


def test_the_weekly_audit_task_samples_the_weeks_extraction_writes_once(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    serve_only(monkeypatch, world.rt)
    said = "I keep my bike in the basement storage room next to the boiler."
    world.say("user", said)
    world.say("assistant", "Noted, the basement storage room.")
    world.rt.hooks.on_session_end(world.p)
    fact = CandidateRecord(type="semantic", content="Aditya keeps his bike in the basement storage room.",
                           attribute="bike_location", source_kind="user_statement", evidence=said,
                           evidence_turn=1, entity_mentions=[], confidence=0.9)
    output = ExtractionOutput([fact], SessionSummary("Aditya said where his bike is.", [], []))
    assert world.rt.session_end.using(FakeExtractor(output), TableReviewer()).run("s1").outcome == "extracted"
    assert workers.tasks.audit_sample.run() == {"sampled": 1, "written": 1}
    assert workers.tasks.audit_sample.run() == {"sampled": 0, "written": 1}  # a record is sampled once
    (item,) = world.rt.store.audit_items()
    assert world.record(item.record_id).content == fact.content


def test_the_idle_task_ends_quiet_sessions_and_schedules_them(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    serve_only(monkeypatch, world.rt)
    world.say("user", "Please keep every answer short.")
    world.clock.advance(minutes=world.rt.config.ingestion.session_idle_timeout_minutes - 1)
    assert workers.tasks.end_idle_sessions.run() == {"ended": []}
    world.clock.advance(minutes=2)
    assert workers.tasks.end_idle_sessions.run() == {"ended": ["s1"]}
    assert isinstance(world.rt.scheduler, InProcessScheduler) and world.rt.scheduler.scheduled == ["s1"]


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


def worker_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store: Path) -> None:
    """A worker's environment: a config naming ``store`` with the fake embedder, no other
    RETOLD_ variable, and no runtime built yet."""
    config = tmp_path / "config.yaml"
    config.write_text(f"store:\n  path: {store}\nembedding:\n  model: fake\n")
    monkeypatch.setenv("RETOLD_CONFIG", str(config))
    for variable in ("RETOLD_STORE", "RETOLD_TENANT", "RETOLD_REPLAY_EXTRACTION"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setattr(workers.process_runtime, "_pool", None)


def test_the_worker_runtime_is_built_once_and_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker_config(tmp_path, monkeypatch, tmp_path / "w.sqlite")
    try:
        first = workers.process_runtime.current_runtime()
        assert workers.process_runtime.current_runtime() is first
        assert first.config.store.path == str(tmp_path / "w.sqlite")
        assert not isinstance(first.extractor, ReplayExtractor)
        # the worker publishes (what the idle sweep ends) through its own app
        assert isinstance(first.scheduler, CeleryScheduler) and first.scheduler.app is worker_app
    finally:
        workers.process_runtime.close_runtime()
    assert workers.process_runtime._pool is None
    workers.process_runtime.close_runtime()  # safe twice


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
    rt = workers.process_runtime.open_runtime()
    try:
        assert isinstance(rt.extractor, ReplayExtractor) and isinstance(rt.reviewer, TableReviewer)
    finally:
        rt.close()


def test_the_sweeps_run_in_every_tenant_and_send_each_session_with_its_tenant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from retold.errors import StoreMissingError
    from retold.store.location import add_tenant, drop_tenant
    from retold.testing import make_world

    store = tmp_path / "w.sqlite"
    home, acme = make_world(tmp_path, store=str(store)), make_world(tmp_path, store=str(store), tenant="acme")
    for world in (home, acme):  # the same session id in both tenants, ended, not yet queued
        world.say("user", "Please keep every answer short.")
        world.rt.hooks.on_session_end(world.p)
        world.rt.close()
    assert add_tenant(store, "acme") is False
    worker_config(tmp_path, monkeypatch, store)
    sent: list[tuple[list[Any], dict[str, str]]] = []
    monkeypatch.setattr(workers.tasks.extract_session, "apply_async",
                        lambda args, kwargs: sent.append((args, kwargs)))
    try:
        # The recover sweep goes through both tenants; each session is sent with its own.
        assert sorted(workers.tasks.recover.run()["enqueued"]) == ["s1", "s1"]
        assert sorted(sent, key=lambda s: len(s[1])) == [(["s1"], {}), (["s1"], {"tenant": "acme"})]
        default_rt = workers.process_runtime.current_runtime()
        acme_rt = workers.process_runtime.current_runtime("acme")
        assert (default_rt.tenant, acme_rt.tenant) == ("default", "acme")
        assert acme_rt.store.path != default_rt.store.path
        assert workers.process_runtime.current_runtime("acme") is acme_rt
        # The acme runtime keeps its own query cache over the home runtime's model.
        assert acme_rt.embedder is not default_rt.embedder
        # A tenant dropped while its runtime is open is refused, not written into.
        drop_tenant(store, "acme")
        with pytest.raises(StoreMissingError, match="no tenant 'acme'"):
            workers.process_runtime.current_runtime("acme")
        assert workers.tasks.recover.run() == {"enqueued": []}  # the default tenant sweeps on
    finally:
        workers.process_runtime.close_runtime()
