"""Real Celery worker (and beat) processes against real Redis and the embedded broker
(queued extraction pipeline): sessions ended in this process are extracted by the
worker, found by a search in a third process, and recovered after a broker outage.

The worker runs in replay mode (``RETOLD_REPLAY_EXTRACTION``): a recorded extraction
output and a reviewer that accepts, so no hosted model is needed.
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from retold import load_config
from retold.broker import CeleryScheduler
from retold.config import Config
from retold.ingest.extractor import output_to_json
from retold.ingest.session import InProcessScheduler
from retold.models import CandidateRecord, ExtractionOutput, SessionSummary
from retold.runtime import Runtime
from retold.store.location import add_tenant
from retold.testing import make_record
from tests.celery_support import agent_runtime as open_runtime
from tests.celery_support import flushed_redis as flushed
from tests.celery_support import store_yaml, talk, worker_args
from tests.celery_support import wait_for as shared_wait_for
from workers.app import create_app

pytestmark = pytest.mark.both_backends

ROOT = Path(__file__).resolve().parents[2]
REDIS_DB = 7
REDIS_URL = f"redis://127.0.0.1:6379/{REDIS_DB}"
DEAD_BROKER = "redis://127.0.0.1:1/0"
AGENT = "research-agent"
CONTENT = "Aditya prefers short technical answers."
QUERY = "short technical answers"
DEADLINE_S = 45

SEARCH_SCRIPT = """
import json, sys
from retold import build_runtime, load_config
from retold.models import Principal
rt = build_runtime(load_config(sys.argv[1]))
p = Principal(sys.argv[2], "aditya", "probe", None)
def ids():
    res = rt.tools.call("memory_search", p, {"queries": [sys.argv[3]]})
    return [r["id"] for r in res.get("results", [])]
print(json.dumps(ids()), flush=True)
sys.stdin.readline()
print(json.dumps(ids()), flush=True)
rt.close()
"""


@dataclass
class Setup:
    tmp: Path
    config_path: Path
    recording: Path

    def config(self, broker: str | None) -> Config:
        overrides = {"queue": {"broker_url": broker}} if broker else None
        return load_config(self.config_path, overrides=overrides)

    def env(self, broker: str | None, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RETOLD_")}
        env.update(RETOLD_CONFIG=str(self.config_path), RETOLD_REPLAY_EXTRACTION=str(self.recording),
                   PYTHONPATH=str(ROOT))
        if broker:
            env["RETOLD_BROKER_URL"] = broker
        env.update(extra)
        return env


@pytest.fixture
def setup(tmp_path: Path, store_target: str) -> Setup:
    config_path = tmp_path / "config.yaml"
    config_path.write_text(store_yaml(store_target, tmp_path) + "embedding:\n  model: fake\n")
    recording = tmp_path / "recording.json"
    candidate = CandidateRecord(type="semantic", content=CONTENT, attribute="answer_style",
                                source_kind="user_statement",
                                evidence="keep every answer short and technical", evidence_turn=1,
                                entity_mentions=[])
    output = ExtractionOutput([candidate], SessionSummary("Aditya asked for short answers.", [], []))
    recording.write_text(json.dumps(output_to_json(output)))
    return Setup(tmp_path, config_path, recording)


@pytest.fixture
def flushed_redis() -> Iterator[None]:
    with flushed(REDIS_URL):
        yield


@pytest.fixture
def processes(setup: Setup) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Start Celery processes; every one is terminated (then killed) at teardown."""
    started: list[subprocess.Popen[bytes]] = []

    def start(args: list[str], env: dict[str, str], log_name: str) -> subprocess.Popen[bytes]:
        log = (setup.tmp / log_name).open("wb")
        proc = subprocess.Popen([sys.executable, "-m", "celery", "-A", "workers", *args], cwd=setup.tmp,
                                env=env, stdout=log, stderr=subprocess.STDOUT)
        started.append(proc)
        return proc

    try:
        yield start
    finally:
        for proc in started:
            proc.terminate()
        for proc in started:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


def wait_for(predicate: Callable[[], bool], what: str, logs: list[Path], timeout: float = DEADLINE_S) -> None:
    shared_wait_for(predicate, what, logs, timeout, poll_s=0.2)


def extracted(rt: Runtime, session_id: str) -> Callable[[], bool]:
    def check() -> bool:
        session = rt.store.get_session(session_id)
        return session is not None and session.extracted_at is not None
    return check


def written_ids(rt: Runtime) -> list[str]:
    return [r.id for r in rt.store.find_records(content=CONTENT)]


def read_line(proc: subprocess.Popen[str], timeout: float) -> Any:
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout):
            pytest.fail("the search process did not answer")
    return json.loads(proc.stdout.readline())


def end_to_end(setup: Setup, broker: str | None,
               processes: Callable[..., subprocess.Popen[bytes]], name: str) -> None:
    config = setup.config(broker)
    worker_log = setup.tmp / f"{name}.log"
    processes(worker_args(name), setup.env(broker), worker_log.name)
    wait_for(lambda: worker_log.exists() and b"ready." in worker_log.read_bytes(), "the worker", [worker_log])
    rt = open_runtime(config, CeleryScheduler(config))
    searcher = subprocess.Popen([sys.executable, "-c", SEARCH_SCRIPT, str(setup.config_path), AGENT, QUERY],
                                cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert read_line(searcher, 30) == []  # the searcher's index is loaded before the write
        p = talk(rt, "s-e2e")
        rt.hooks.on_session_end(p)
        wait_for(extracted(rt, "s-e2e"), "the extraction", [worker_log])
        ids = written_ids(rt)
        assert len(ids) == 1
        assert searcher.stdin is not None
        searcher.stdin.write("go\n")
        searcher.stdin.flush()
        assert ids[0] in read_line(searcher, 30)  # found after a delta refresh, in another process
        runs = rt.store.events(kind="extraction.run")
        assert len(runs) == 1 and runs[0]["payload"]["replayed"] is True
    finally:
        searcher.kill()
        searcher.wait(timeout=10)
        rt.close()


@pytest.mark.redis
@pytest.mark.timeout(90)
def test_a_session_ended_here_is_extracted_by_a_worker_and_found_by_another_process(
    setup: Setup, flushed_redis: None, processes: Callable[..., subprocess.Popen[bytes]]
) -> None:
    end_to_end(setup, REDIS_URL, processes, "redis")


@pytest.mark.timeout(90)
@pytest.mark.filterwarnings("ignore:.*noload.*")  # kombu's SQLAlchemy transport, not ours
def test_the_same_pipeline_runs_on_the_embedded_broker(
    setup: Setup, processes: Callable[..., subprocess.Popen[bytes]]
) -> None:
    end_to_end(setup, None, processes, "embedded")
    queue_file = setup.tmp / "queue.sqlite"  # beside store.path, which a PostgreSQL URL leaves set
    assert queue_file.exists()


@pytest.mark.redis
@pytest.mark.timeout(90)
def test_a_session_ended_while_the_broker_is_down_is_recovered(
    setup: Setup, flushed_redis: None, processes: Callable[..., subprocess.Popen[bytes]]
) -> None:
    dead = setup.config(DEAD_BROKER)
    rt = open_runtime(dead, CeleryScheduler(dead))
    try:
        p = talk(rt, "s-outage")
        started = time.monotonic()
        rt.hooks.on_session_end(p)
        assert time.monotonic() - started < 2
        assert not extracted(rt, "s-outage")()
        worker_log = setup.tmp / "recover.log"
        processes(worker_args("recover"), setup.env(REDIS_URL), worker_log.name)
        create_app(setup.config(REDIS_URL)).send_task("retold.recover")
        wait_for(extracted(rt, "s-outage"), "the recovered extraction", [worker_log])
        assert len(written_ids(rt)) == 1
    finally:
        rt.close()


@pytest.mark.redis
@pytest.mark.timeout(90)
def test_beat_runs_the_maintenance_schedule(
    setup: Setup, flushed_redis: None, processes: Callable[..., subprocess.Popen[bytes]]
) -> None:
    config = setup.config(REDIS_URL)
    rt = open_runtime(config, InProcessScheduler())  # nothing enqueued: only beat can find it
    try:
        stale = make_record(status="provisional", expires_at=datetime.now(UTC) - timedelta(days=1))
        rt.store.write_record(stale)
        rt.hooks.on_session_end(talk(rt, "s-beat"))
        env = setup.env(REDIS_URL, RETOLD_BEAT_FAST="1")
        worker_log, beat_log = setup.tmp / "beat-worker.log", setup.tmp / "beat.log"
        processes(worker_args("beat-worker"), env, worker_log.name)
        processes(["beat", "--loglevel=INFO", "-s", str(setup.tmp / "beat-schedule")], env, beat_log.name)

        def expired() -> bool:
            record = rt.store.get_record(stale.id)
            return record is not None and record.status == "expired"

        wait_for(expired, "beat's expire", [worker_log, beat_log])
        wait_for(extracted(rt, "s-beat"), "beat's recover", [worker_log, beat_log])
        assert len(written_ids(rt)) == 1
    finally:
        rt.close()


@pytest.mark.redis
@pytest.mark.timeout(90)
def test_a_worker_extracts_each_session_into_its_own_tenant(
    setup: Setup, flushed_redis: None, processes: Callable[..., subprocess.Popen[bytes]]
) -> None:
    """One worker, started with no tenant, serves every tenant of the store: a session ended
    in tenant acme is extracted into acme, and the default tenant, which has a session of the
    same id still open, gains nothing."""
    config = setup.config(REDIS_URL)
    add_tenant(config.store.target, "acme")
    worker_log = setup.tmp / "tenants.log"
    processes(worker_args("tenants"), setup.env(REDIS_URL), worker_log.name)
    wait_for(lambda: worker_log.exists() and b"ready." in worker_log.read_bytes(), "the worker", [worker_log])
    home = open_runtime(config, CeleryScheduler(config))
    acme_config = config.replace({"tenancy": {"tenant": "acme"}})
    acme = open_runtime(acme_config, CeleryScheduler(acme_config))
    try:
        talk(home, "s-shared")  # open, never ended
        acme.hooks.on_session_end(talk(acme, "s-shared"))
        wait_for(extracted(acme, "s-shared"), "the extraction in acme", [worker_log])
        assert len(written_ids(acme)) == 1
        assert written_ids(home) == [] and not extracted(home, "s-shared")()
    finally:
        home.close()
        acme.close()
