"""Real workers on Redis: a killed worker's session is taken over once its lease lapses,
and a worker with no API key fails its tasks visibly, warns once and loops on nothing; on
a SQLite store and on PostgreSQL.

The workers run the production wiring (``celery -A workers worker``, the hosted models
over the real Anthropic SDK pointed at the loopback stub). Nothing here ages a claim by
hand: the first test configures a three-second lease and waits for it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from retold import load_config
from retold.config import Config
from retold.ingest.extractor import output_to_json
from retold.models import CandidateRecord, ExtractionOutput, SessionSummary
from retold.runtime import Runtime
from retold.testing.anthropic_stub import AnthropicStub, serve_anthropic_stub, tool_use
from tests.celery_support import (
    agent_runtime,
    flushed_redis,
    killed_at_exit,
    start_worker,
    store_yaml,
    talk,
    wait_for,
)
from workers.app import create_app

pytestmark = pytest.mark.both_backends

ROOT = Path(__file__).resolve().parents[2]
REDIS_URL = "redis://127.0.0.1:6379/10"  # test_workers.py uses 7, test_worker_crash.py 8
CANDIDATE = CandidateRecord(type="semantic", content="Aditya prefers short technical answers.",
                            attribute="answer_style", source_kind="user_statement",
                            evidence="keep every answer short and technical", evidence_turn=1,
                            entity_mentions=[])
LEASE_S = 3
EXTRACTION_TOOL = "record_extraction"
StartWorker = Callable[..., tuple[subprocess.Popen[bytes], Path]]


@pytest.fixture
def stub() -> Iterator[AnthropicStub]:
    with serve_anthropic_stub() as running:
        yield running


@pytest.fixture
def config(tmp_path: Path, stub: AnthropicStub, store_target: str) -> Iterator[tuple[Config, Path]]:
    path = tmp_path / "config.yaml"
    path.write_text(
        store_yaml(store_target, tmp_path) +
        "embedding:\n  model: fake\n"
        f"ingestion:\n  equivalence:\n    model: exact\n  extraction_lease_seconds: {LEASE_S}\n"
        f"hosted:\n  base_url: {stub.base_url}\n  max_retries: 0\n"
        f"queue:\n  broker_url: {REDIS_URL}\n"
    )
    with flushed_redis(REDIS_URL):
        yield load_config(path), path


@pytest.fixture
def workers(tmp_path: Path, config: tuple[Config, Path]) -> Iterator[StartWorker]:
    """Start ready solo workers (killed at teardown); ``key`` puts an API key in their
    environment, ``events`` turns on Celery's task events."""
    with killed_at_exit() as started:
        def start(name: str, *, key: bool = True,
                  events: bool = False) -> tuple[subprocess.Popen[bytes], Path]:
            env = {k: v for k, v in os.environ.items()
                   if not k.startswith("RETOLD_") and k != "ANTHROPIC_API_KEY"}
            env.update(RETOLD_CONFIG=str(config[1]), PYTHONPATH=str(ROOT))
            if key:
                env["ANTHROPIC_API_KEY"] = "test-key"
            proc, log_path = start_worker(name, tmp_path, env, *(["-E"] if events else []))
            started.append(proc)
            wait_for(lambda: b"ready." in log_path.read_bytes(), f"worker {name}", [log_path], 45)
            return proc, log_path

        yield start


def end_session(rt: Runtime, session_id: str) -> None:
    rt.hooks.on_session_end(talk(rt, session_id))


def answers() -> tuple[dict[str, Any], dict[str, Any]]:
    extraction = output_to_json(ExtractionOutput([CANDIDATE], SessionSummary("Short answers.", [], [])))
    review = {"decisions": [{"index": 0, "action": "accept", "reason": "stated", "revision": None}]}
    return extraction, review


@pytest.mark.redis
@pytest.mark.timeout(90)
def test_a_killed_workers_session_is_taken_over_once_its_lease_lapses(
    config: tuple[Config, Path], stub: AnthropicStub, workers: StartWorker,
) -> None:
    extraction, review = answers()
    # The killed worker waits on the second answer; the one taking over needs only the third.
    stub.script(tool_use(extraction), tool_use(review, delay_s=5), tool_use(review))
    first, first_log = workers("lease-first")
    rt = agent_runtime(config[0])
    try:
        end_session(rt, "s-lease")
        wait_for(lambda: rt.store.stage_row("s-lease", "extract") is not None and len(stub.requests) >= 2,
                 "the extract stage and the review request", [first_log], 45)
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=10)
        killed = time.monotonic()
        second, second_log = workers("lease-second")
        app = create_app(config[0])

        def extracted() -> bool:
            app.send_task("retold.recover")  # what beat does; the enqueued mark keeps it to one
            row = rt.store.get_session("s-lease")
            return row is not None and row.extracted_at is not None

        wait_for(extracted, "the session taken over", [second_log], 45, poll_s=1.0)
        assert time.monotonic() - killed < 60
        assert second.poll() is None
        extractions = [b for b in stub.requests
                       if (b.get("tool_choice") or {}).get("name") == EXTRACTION_TOOL]
        assert len(extractions) == 1 and len(stub.requests) == 3  # the persisted stage was reused
        assert [r.content for r in rt.store.find_records(source_kind="user_statement")] == [CANDIDATE.content]
        assert len(rt.store.events(kind="extraction.run")) == 1
        reclaimed = rt.store.events(kind="extraction.reclaimed")
        assert len(reclaimed) == 1 and reclaimed[0]["payload"]["lease_seconds"] == LEASE_S
    finally:
        rt.close()


@pytest.mark.redis
@pytest.mark.timeout(90)
def test_a_missing_key_fails_each_task_warns_once_and_recover_sends_nothing(
    config: tuple[Config, Path], workers: StartWorker,
) -> None:
    app = create_app(config[0])
    failed: list[dict[str, Any]] = []
    listening = threading.Event()

    def listen() -> None:
        with app.connection() as conn:
            def on_failed(event: dict[str, Any]) -> None:
                failed.append(event)
                receiver.should_stop = len(failed) >= 2

            receiver = app.events.Receiver(conn, handlers={
                "task-failed": on_failed, "*": lambda event: listening.set()})
            receiver.capture(limit=None, timeout=60, wakeup=True)

    thread = threading.Thread(target=listen, daemon=True)
    thread.start()
    _, log = workers("no-key", key=False, events=True)
    wait_for(listening.is_set, "the worker's events", [log], 30)
    rt = agent_runtime(config[0])
    try:
        for session_id in ("s-1", "s-2"):
            end_session(rt, session_id)
        thread.join(timeout=45)
        assert len(failed) == 2, log.read_text()[-3000:]
        for event in failed:
            assert "not_configured" in event["exception"] and "ANTHROPIC_API_KEY" in event["exception"]
        app.send_task("retold.recover")
        wait_for(lambda: "{'enqueued': []}" in log.read_text(), "recover sending nothing", [log], 30)
        text = log.read_text()
        warnings = [line for line in text.splitlines()
                    if "WARNING" in line and "extraction is not configured" in line]
        assert len(warnings) == 1 and "ANTHROPIC_API_KEY" in warnings[0], text[-3000:]
        assert "Traceback" not in text
        for session_id in ("s-1", "s-2"):
            row = rt.store.get_session(session_id)
            assert row is not None and row.blocked_by is not None and row.attempts == 0
    finally:
        rt.close()
