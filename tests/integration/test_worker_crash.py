"""A worker killed with SIGKILL after the model stage loses nothing and pays for nothing twice
(resumable, idempotent pipeline stages).

The worker runs the production wiring: the hosted extractor and reviewer over the real
Anthropic SDK, pointed (``hosted.base_url``) at the loopback stub from
``tests/stub_anthropic.py``. The extraction answer is immediate and the review answer is
delayed, so the worker's main process (``-P solo``: it runs the task itself) is killed
while it waits for the reviewer, with the ``extract`` stage already persisted. A second
worker then recovers the session: it resumes at the review stage, so the stub sees ONE
extraction request in total, and the candidates and the summary are written once.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from retold import load_config
from retold.clock import to_iso
from retold.ingest.extractor import output_to_json
from retold.models import CandidateRecord, ExtractionOutput, Principal, SessionSummary
from retold.runtime import Runtime
from retold.testing.anthropic_stub import AnthropicStub, serve_anthropic_stub, tool_use
from tests.celery_support import StartWorker, agent_runtime, solo_workers, store_yaml
from tests.celery_support import flushed_redis as flushed
from tests.celery_support import wait_for as shared_wait_for
from tests.sql import execute
from workers.app import create_app

pytestmark = pytest.mark.both_backends

REDIS_DB = 8  # test_workers.py uses 7
REDIS_URL = f"redis://127.0.0.1:6379/{REDIS_DB}"
AGENT = "research-agent"
SESSION = "s-crash"
USER_SAYS = "Please keep every answer short and technical, I read them on my phone."
CANDIDATES = [
    ("Aditya prefers short technical answers.", "answer_style", "keep every answer short and technical"),
    ("Aditya reads answers on his phone.", "reading_device", "I read them on my phone"),
]
SUMMARY = "Aditya asked for short technical answers he can read on his phone."
REVIEW_DELAY_S = 5.0
DEADLINE_S = 45
EXTRACTION_TOOL = "record_extraction"


def extraction_answer() -> dict[str, Any]:
    candidates = [
        CandidateRecord(type="semantic", content=content, attribute=attribute, source_kind="user_statement",
                        evidence=evidence, evidence_turn=1, entity_mentions=[])
        for content, attribute, evidence in CANDIDATES
    ]
    return output_to_json(ExtractionOutput(candidates, SessionSummary(SUMMARY, [], [])))


def review_answer() -> dict[str, Any]:
    return {"decisions": [{"index": i, "action": "accept", "reason": "stated by the user", "revision": None}
                          for i in range(len(CANDIDATES))]}


@pytest.fixture
def stub() -> Iterator[AnthropicStub]:
    with serve_anthropic_stub() as running:
        yield running


@pytest.fixture
def flushed_redis() -> Iterator[None]:
    with flushed(REDIS_URL):
        yield


@pytest.fixture
def config_path(tmp_path: Path, stub: AnthropicStub, store_target: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(
        store_yaml(store_target, tmp_path) +
        "embedding:\n  model: fake\n"
        "ingestion:\n  equivalence:\n    model: exact\n"
        f"hosted:\n  base_url: {stub.base_url}\n  max_retries: 0\n"
    )
    return path


@pytest.fixture
def workers(tmp_path: Path, config_path: Path) -> Iterator[StartWorker]:
    """Start solo workers on Redis with the hosted models at the stub; all are killed at teardown."""
    env = {"RETOLD_CONFIG": str(config_path), "RETOLD_BROKER_URL": REDIS_URL, "ANTHROPIC_API_KEY": "test-key"}
    with solo_workers(tmp_path, env) as start:
        yield start


def wait_for(predicate: Callable[[], bool], what: str, logs: list[Path], timeout: float = DEADLINE_S) -> None:
    shared_wait_for(predicate, what, logs, timeout, poll_s=0.05)


def ready(log: Path) -> Callable[[], bool]:
    return lambda: log.exists() and b"ready." in log.read_bytes()


def candidates(rt: Runtime) -> list[str]:
    return [r.content for r in rt.store.find_records() if r.source_kind != "session_summary"]


def summaries(rt: Runtime) -> list[str]:
    return [r.id for r in rt.store.find_records(source_kind="session_summary")]


def extraction_requests(stub: AnthropicStub) -> int:
    return sum(1 for body in stub.requests if (body.get("tool_choice") or {}).get("name") == EXTRACTION_TOOL)


@pytest.mark.redis
@pytest.mark.timeout(120)
def test_a_worker_killed_after_the_extract_stage_is_recovered_without_a_second_extraction(
    tmp_path: Path, config_path: Path, stub: AnthropicStub, flushed_redis: None,
    workers: StartWorker,
) -> None:
    config = load_config(config_path, overrides={"queue": {"broker_url": REDIS_URL}})
    # The killed worker gets the first two answers (the review one never reaches it);
    # the recovering worker must need only the third.
    stub.script(tool_use(extraction_answer()), tool_use(review_answer(), delay_s=REVIEW_DELAY_S),
                tool_use(review_answer()))
    first, first_log = workers("crash-first")
    wait_for(ready(first_log), "the first worker", [first_log])
    rt = agent_runtime(config)  # its own scheduler publishes to the worker's broker
    try:
        p = Principal(AGENT, "aditya", SESSION, None)
        rt.hooks.on_session_start(p)
        p = rt.hooks.on_turn(p, "user", USER_SAYS)
        p = rt.hooks.on_turn(p, "assistant", "Understood: short and technical from now on.")
        rt.hooks.on_session_end(p)

        # The extract stage is persisted and the review request is in flight (sleeping in the stub).
        wait_for(lambda: rt.store.stage_row(SESSION, "extract") is not None and len(stub.requests) >= 2,
                 "the extract stage and the review request", [first_log])
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=10)
        assert first.returncode == -signal.SIGKILL

        # Nothing partial: no candidate, no summary, not extracted, no review stage.
        session = rt.store.get_session(SESSION)
        assert session is not None and session.extracted_at is None
        assert session.extraction_started_at is not None  # the dead worker's claim
        assert candidates(rt) == [] and summaries(rt) == []
        assert rt.store.stage_row(SESSION, "review") is None
        assert rt.store.events(kind="extraction.run") == []
        assert extraction_requests(stub) == 1

        # Age the dead worker's claim past the claim timeout (the config allows whole minutes only).
        stale = datetime.now(UTC) - timedelta(minutes=config.ingestion.extraction_claim_timeout_minutes + 1)
        execute(config.store.target, "UPDATE sessions SET extraction_started_at = ? WHERE id = ?",
                to_iso(stale), SESSION)

        second, second_log = workers("crash-second")
        wait_for(ready(second_log), "the second worker", [second_log])
        create_app(config).send_task("retold.recover")

        def extracted() -> bool:
            row = rt.store.get_session(SESSION)
            return row is not None and row.extracted_at is not None

        wait_for(extracted, "the recovered extraction", [second_log])
        assert second.poll() is None

        assert extraction_requests(stub) == 1  # the persisted extract stage was reused
        assert len(stub.requests) == 3  # plus two review requests: the killed one and the resumed one
        assert sorted(candidates(rt)) == sorted(content for content, _, _ in CANDIDATES)
        assert len(summaries(rt)) == 1
        runs = rt.store.events(kind="extraction.run")
        assert len(runs) == 1
        assert runs[0]["payload"]["extract_stage"] == "persisted"
        assert runs[0]["payload"]["review_stage"] == "model"
        assert len(rt.store.events(kind="extraction.reclaimed")) == 1
    finally:
        rt.close()
