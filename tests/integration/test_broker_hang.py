"""A hung broker never blocks an agent: with its own redis-server stopped by SIGSTOP (the
process alive, its socket open, nothing answering), ending a session returns within two
seconds and logs once, both in an agent that has published before and in a fresh one
whose first publish also imports Celery; after SIGCONT the ``recover`` task enqueues what
was left pending, and a worker configured by the agent's config file alone extracts it.

The test starts its own redis-server on a free port; the shared one on 6379 is never
stopped.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from retold import build_runtime
from retold.ingest.extractor import output_to_json
from retold.models import ExtractionOutput, Principal, Scope, SessionSummary
from retold.runtime import Runtime
from retold.testing.anthropic_stub import serve_anthropic_stub, tool_use
from tests.celery_support import wait_for
from tests.conftest import IN_CI
from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
AGENT = "research-agent"
pytestmark = [pytest.mark.redis, pytest.mark.timeout(150)]
BUDGET_S = 2.5  # two seconds, plus slack for a loaded test machine

# An agent process that ends its first session: the publisher app (and Celery) load then.
FRESH_AGENT = """
import time
from retold import build_runtime
from retold.models import Principal
rt = build_runtime()
p = rt.hooks.on_turn(Principal("research-agent", "aditya", "s-fresh", None), "user", "Hello there.")
started = time.monotonic()
rt.hooks.on_session_end(p)
print(time.monotonic() - started)
rt.close()
"""


@dataclass
class OwnRedis:
    process: subprocess.Popen[bytes]
    url: str
    client: redis.Redis


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[OwnRedis]:
    binary = shutil.which("redis-server")
    if binary is None:
        if IN_CI:
            pytest.fail("redis-server is not installed")
        pytest.skip("redis-server is not installed")
    port = free_port()
    process = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                "--appendonly", "no", "--dir", str(tmp_path)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis(port=port, socket_timeout=5)

    def answers() -> bool:
        try:
            return bool(client.ping())
        except redis.ConnectionError:
            return False

    try:
        wait_for(answers, "the test's redis-server", [], timeout=15)
        yield OwnRedis(process, f"redis://127.0.0.1:{port}/0", client)
    finally:
        process.send_signal(signal.SIGCONT)  # a stopped process cannot act on SIGTERM
        process.terminate()
        process.wait(timeout=10)
        client.close()


def _talk(rt: Runtime, session_id: str) -> Principal:
    p = Principal(AGENT, "aditya", session_id, None)
    return rt.hooks.on_turn(p, "user", "Please keep every answer short.")


def _queued(client: redis.Redis, queue: str) -> list[str]:
    """The session ids of the extraction messages waiting in ``queue``."""
    messages = [json.loads(raw) for raw in client.lrange(queue, 0, -1)]
    return sorted(m["headers"]["argsrepr"].strip("[]'") for m in messages)


def _extracted(rt: Runtime, session_id: str) -> bool:
    session = rt.store.get_session(session_id)
    return session is not None and session.extracted_at is not None


def test_a_stopped_redis_costs_an_agent_two_seconds_once_and_recover_enqueues_what_it_left(
    tmp_path: Path, own_redis: OwnRedis, caplog: pytest.LogCaptureFixture
) -> None:
    config_path = tmp_path / "config.yaml"
    config_path.write_text(f"store:\n  path: {tmp_path / 'memory.sqlite'}\nembedding:\n  model: fake\n"
                           f"queue:\n  broker_url: {own_redis.url}\n")
    recording = tmp_path / "recording.json"
    summary_only = ExtractionOutput([], SessionSummary("A short chat.", [], []))
    recording.write_text(json.dumps(output_to_json(summary_only)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RETOLD_")}
    env.update(RETOLD_CONFIG=str(config_path), PYTHONPATH=str(ROOT))
    rt = build_runtime(environ={"RETOLD_CONFIG": str(config_path)})  # configured by the file alone
    worker: subprocess.Popen[bytes] | None = None
    worker_log = tmp_path / "worker.log"
    try:
        rt.host.grant(AGENT, Scope("user", "aditya"), read=True, write=True)
        queue = rt.config.queue.extraction_queue
        rt.hooks.on_session_end(_talk(rt, "s-before"))  # Redis answers: published, connection pooled
        assert _queued(own_redis.client, queue) == ["s-before"]

        own_redis.process.send_signal(signal.SIGSTOP)
        with caplog.at_level(logging.DEBUG, logger="retold"):
            hung = _talk(rt, "s-hung")
            started = time.monotonic()
            rt.hooks.on_session_end(hung)
            took = time.monotonic() - started
            later = _talk(rt, "s-later")
            started = time.monotonic()
            rt.hooks.on_session_end(later)  # inside the pause after a failure: no broker wait
            took_later = time.monotonic() - started
        assert took <= BUDGET_S, took
        assert took_later < 0.5, took_later
        warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warnings) == 1 and "could not schedule extraction of session s-hung" in warnings[0]
        fresh = subprocess.run([sys.executable, "-c", FRESH_AGENT], cwd=ROOT, env=env,
                               capture_output=True, text=True, timeout=60, check=True)
        assert float(fresh.stdout.splitlines()[-1]) <= BUDGET_S, fresh.stdout
        assert "could not schedule extraction of session s-fresh" in fresh.stderr
        pending = [sid for sid, _stage in rt.session_end.pending()]
        assert pending == ["s-before", "s-hung", "s-later", "s-fresh"]  # nothing extracted, nothing lost

        own_redis.process.send_signal(signal.SIGCONT)
        recover = subprocess.run(
            [sys.executable, "-c", "import json, workers.tasks as t; print(json.dumps(t.recover.run()))"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=True)
        # s-before still waits in the queue, so recover hands over only what the hang left.
        assert json.loads(recover.stdout.splitlines()[-1]) == {"enqueued": pending[1:]}
        # A publish that timed out may still have reached Redis once it resumed; either
        # way each pending session now waits in the queue, and the claim makes extra
        # copies harmless.
        assert set(_queued(own_redis.client, queue)) == set(pending)

        env["RETOLD_REPLAY_EXTRACTION"] = str(recording)
        with worker_log.open("wb") as log:
            worker = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "workers", "worker", "-P", "solo",
                 "-Q", f"{queue},{rt.config.queue.maintenance_queue}", "--without-gossip",
                 "--without-mingle", "-n", f"hang-{os.getpid()}@%h", "--loglevel=INFO"],
                cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT)
        wait_for(lambda: all(_extracted(rt, sid) for sid in pending), "the worker's extractions",
                 [worker_log], timeout=60)
    finally:
        own_redis.process.send_signal(signal.SIGCONT)
        if worker is not None:
            worker.terminate()
            try:
                worker.wait(timeout=15)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait(timeout=10)
        rt.close()


ACK_DELAY_S = 4.0  # the extraction answer's delay: Redis is stopped while the task runs


def test_a_worker_that_lost_an_ack_while_redis_hung_exits_for_its_supervisor(
    tmp_path: Path, own_redis: OwnRedis,
) -> None:
    # Without broker heartbeats a consumer never notices that its connection died with
    # the acknowledgement; it would sit idle forever, looking alive.
    with serve_anthropic_stub() as stub:
        stub.script(tool_use(output_to_json(ExtractionOutput([], SessionSummary("A short chat.", [], []))),
                             delay_s=ACK_DELAY_S),
                    tool_use({"decisions": []}))
        config_path = tmp_path / "config.yaml"
        config_path.write_text(f"store:\n  path: {tmp_path / 'memory.sqlite'}\nembedding:\n  model: fake\n"
                               f"ingestion:\n  equivalence:\n    model: exact\n"
                               f"hosted:\n  base_url: {stub.base_url}\n  max_retries: 0\n"
                               f"queue:\n  broker_url: {own_redis.url}\n")
        env = {k: v for k, v in os.environ.items() if not k.startswith("RETOLD_")}
        env.update(RETOLD_CONFIG=str(config_path), PYTHONPATH=str(ROOT), ANTHROPIC_API_KEY="test-key")
        rt = build_runtime(environ={"RETOLD_CONFIG": str(config_path)})
        worker_log = tmp_path / "worker.log"
        with worker_log.open("wb") as log:
            worker = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "workers", "worker", "-P", "solo",
                 "-Q", f"{rt.config.queue.extraction_queue},{rt.config.queue.maintenance_queue}",
                 "--without-gossip", "--without-mingle", "--without-heartbeat",
                 "-n", f"ack-{os.getpid()}@%h", "--loglevel=INFO"],
                cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            rt.host.grant(AGENT, Scope("user", "aditya"), read=True, write=True)
            wait_for(lambda: b"ready." in worker_log.read_bytes(), "the worker", [worker_log], timeout=60)
            rt.hooks.on_session_end(_talk(rt, "s-acked"))
            wait_for(lambda: len(stub.requests) >= 1, "the extraction request", [worker_log], timeout=30)
            own_redis.process.send_signal(signal.SIGSTOP)  # the task finishes into a hung broker
            wait_for(lambda: _extracted(rt, "s-acked"), "the extraction", [worker_log], timeout=30)
            time.sleep(15)  # the acknowledgement times out meanwhile
            own_redis.process.send_signal(signal.SIGCONT)
            resumed = time.monotonic()
            wait_for(lambda: worker.poll() is not None, "the worker to stop", [worker_log], timeout=30)
            assert time.monotonic() - resumed <= 30
            assert worker.returncode == 1
            assert b"the broker lost a task acknowledgement" in worker_log.read_bytes()
        finally:
            own_redis.process.send_signal(signal.SIGCONT)
            if worker.poll() is None:
                worker.kill()
            worker.wait(timeout=15)
            rt.close()
