"""Reliability suite: real processes killed with SIGKILL, then the store checked.

Workers killed mid-extraction, again and again, on Redis and on the embedded file broker,
lose no session and write none twice: every session ends up extracted with its record and
its summary exactly once. The hosted model is the loopback Anthropic stub, answering after
a short delay so each kill lands while a run waits on it; the lease is a few seconds and
the test drives the recover sweep itself, since no beat runs.

An agent process killed mid-write leaves a store whose records, lexical rows and vectors
agree (and that ``retold check`` passes) and that a new runtime opens:
every write is one transaction, so a kill can only lose the write in flight, never leave
half of it.

Both run on SQLite and on PostgreSQL.

The other ways a store can fail to open (a corrupt file, a lock held by another process, a
read-only file, a full disk) are covered where they are raised and reported, not repeated
here: tests/unit/store/test_store_open.py for the store and tests/unit/test_cli_failures.py
for the one-line CLI errors. A worker killed between pipeline stages is covered by
tests/integration/test_worker_crash.py.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import nullcontext
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from retold import load_config
from retold.config import Config
from retold.ingest.extractor import output_to_json
from retold.models import CandidateRecord, ExtractionOutput, Principal, SessionSummary
from retold.runtime import Runtime
from retold.testing.anthropic_stub import AnthropicStub, serve_anthropic_stub, tool_use
from retold.testing.loopback import Reply
from tests.celery_support import AGENT, ROOT, agent_runtime, flushed_redis, solo_workers, store_yaml, wait_for
from tests.sql import disagreements
from workers.app import create_app

pytestmark = pytest.mark.both_backends

REDIS_URL = "redis://127.0.0.1:6379/11"  # a database no other test or benchmark uses
SESSIONS = 20
KILLS = 5
ANSWER_DELAY_S = 0.4
EXTRACTION_TOOL = "record_extraction"

WRITES_BEFORE_KILL = 40
DEADLINE_S = 60

# The agent: a runtime over the store, one session, explicit writes in a loop, one line of
# output per committed write so the test knows when to kill it.
AGENT_SCRIPT = textwrap.dedent("""
    import sys
    from retold import load_config
    from retold.ingest.ingestor import WriteRequest
    from tests.celery_support import agent_runtime, talk

    rt = agent_runtime(load_config(sys.argv[1]))
    p = talk(rt, "s-agent")
    i = 0
    while True:
        rt.ingestor.write(p, WriteRequest(type="semantic", content=f"Aditya fact number {i}.",
                                          attribute=f"fact_{i}"))
        i += 1
        print(i, flush=True)
""")


@pytest.fixture
def config_path(tmp_path: Path, store_target: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(
        store_yaml(store_target, tmp_path) +
        "embedding:\n  model: fake\n"
        "ingestion:\n  equivalence:\n    model: exact\n"
    )
    return path


def written(log: Path) -> int:
    lines = log.read_text().split() if log.exists() else []
    return int(lines[-1]) if lines else 0


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_an_agent_killed_mid_write_leaves_a_store_that_checks_clean_and_reopens(
    tmp_path: Path, config_path: Path, store_target: str,
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RETOLD_")}
    env.update(PYTHONPATH=str(ROOT))
    log = tmp_path / "agent.log"
    with log.open("wb") as out:
        agent = subprocess.Popen([sys.executable, "-c", AGENT_SCRIPT, str(config_path)], cwd=ROOT,
                                 env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: agent.poll() is not None or written(log) >= WRITES_BEFORE_KILL,
                 "the agent's writes", [log], DEADLINE_S)
        assert agent.poll() is None, log.read_text()
        os.kill(agent.pid, signal.SIGKILL)
        agent.wait(timeout=10)
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait(timeout=10)
    assert agent.returncode == -signal.SIGKILL
    committed = written(log)

    assert disagreements(store_target) == {}
    check = subprocess.run([sys.executable, "-m", "retold.cli", "check", "--config", str(config_path)],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr

    rt = agent_runtime(load_config(config_path))
    try:
        facts = [r for r in rt.store.find_records() if r.content.startswith("Aditya fact number")]
        # Every write the agent reported is there; at most the one in flight is extra.
        assert committed <= len(facts) <= committed + 1
        assert len({r.content for r in facts}) == len(facts)
    finally:
        rt.close()


def user_turn(n: int) -> str:
    return f"Note for later: I drink tea number {n} every morning."


def fact(n: int) -> str:
    return f"Aditya drinks tea number {n} every morning."


class RoutingStub(AnthropicStub):
    """The stub answering each request from what it asks (extract or review, and which
    session's tea), since kills make the order of requests unpredictable."""

    def respond(self, body: dict[str, Any], headers: dict[str, str], scripted: Any) -> Reply:
        found = re.search(r"tea number (\d+)", json.dumps(body))
        n = int(found.group(1)) if found else -1
        if (body.get("tool_choice") or {}).get("name") == EXTRACTION_TOOL:
            candidate = CandidateRecord(type="semantic", content=fact(n),
                                        attribute=f"tea_{n}", source_kind="user_statement",
                                        evidence=user_turn(n), evidence_turn=1, entity_mentions=[])
            summary = SessionSummary(f"Aditya mentioned tea number {n}.", [], [])
            answer = tool_use(output_to_json(ExtractionOutput([candidate], summary)), delay_s=ANSWER_DELAY_S)
        else:
            answer = tool_use({"decisions": [{"index": 0, "action": "accept", "reason": "stated by the user",
                                              "revision": None}]}, delay_s=ANSWER_DELAY_S)
        return super().respond(body, headers, answer)


@pytest.fixture
def routing_stub() -> Iterator[RoutingStub]:
    with serve_anthropic_stub(RoutingStub()) as stub:
        assert isinstance(stub, RoutingStub)
        yield stub


def crash_config(tmp_path: Path, stub: AnthropicStub, broker_url: str | None, store_target: str) -> Path:
    path = tmp_path / "crash.yaml"
    broker = f"  broker_url: {broker_url}\n" if broker_url else ""
    path.write_text(
        store_yaml(store_target, tmp_path) +
        "embedding:\n  model: fake\n"
        "ingestion:\n  equivalence:\n    model: exact\n"
        "  extraction_lease_seconds: 3\n  extraction_max_attempts: 20\n  extraction_retry_seconds: 1\n"
        f"queue:\n{broker}  requeue_after_minutes: 1\n"
        f"hosted:\n  base_url: {stub.base_url}\n  max_retries: 0\n"
    )
    return path


def sweep(rt: Runtime, config: Config) -> None:
    """What the recover beat would do: hand every due session to the queue again."""
    app = create_app(config)
    rt.session_end.enqueue_due(lambda session_id, stage: app.send_task(
        "retold.review_session" if stage == "review" else "retold.extract_session", args=[session_id]))


def more_requests(stub: AnthropicStub, seen: int) -> bool:
    return len(stub.requests) > seen


def all_extracted(rt: Runtime) -> bool:
    return all((row := rt.store.get_session(f"s-{n}")) is not None and row.extracted_at is not None
               for n in range(SESSIONS))


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("broker", [
    pytest.param("redis", marks=pytest.mark.redis),
    # The broker and the store fail independently: the Redis case shows PostgreSQL's recovery,
    # and the file broker's own case needs no second half-minute run.
    pytest.param("embedded", marks=pytest.mark.sqlite_only("the embedded broker is covered on SQLite")),
])
def test_workers_killed_mid_extraction_lose_no_session_and_write_none_twice(
    tmp_path: Path, routing_stub: RoutingStub, broker: str, store_target: str,
) -> None:
    broker_url = REDIS_URL if broker == "redis" else None
    config_path = crash_config(tmp_path, routing_stub, broker_url, store_target)
    config = load_config(config_path)
    env = {"RETOLD_CONFIG": str(config_path), "ANTHROPIC_API_KEY": "test-key"}
    fresh_broker = flushed_redis(REDIS_URL) if broker_url else nullcontext()
    with fresh_broker, solo_workers(tmp_path, env) as start:
        rt = agent_runtime(config)
        logs: list[Path] = []
        try:
            for n in range(SESSIONS):
                p = Principal(AGENT, "aditya", f"s-{n}", None)
                rt.hooks.on_session_start(p)
                p = rt.hooks.on_turn(p, "user", user_turn(n))
                p = rt.hooks.on_turn(p, "assistant", "Noted.")
                rt.hooks.on_session_end(p)
            for kill in range(KILLS):
                seen = len(routing_stub.requests)
                worker, log = start(f"victim-{kill}")
                logs.append(log)
                sweep(rt, config)
                wait_for(partial(more_requests, routing_stub, seen), "a request in flight", logs, 60,
                         poll_s=0.02)
                os.kill(worker.pid, signal.SIGKILL)
                worker.wait(timeout=10)
                assert worker.returncode == -signal.SIGKILL
            assert not all_extracted(rt)
            _, log = start("survivor")
            logs.append(log)

            def swept_and_done() -> bool:
                sweep(rt, config)
                return all_extracted(rt)

            wait_for(swept_and_done, "every session extracted", logs, 120, poll_s=1.0)
            records = [r.content for r in rt.store.find_records() if r.source_kind != "session_summary"]
            summaries = [r.content for r in rt.store.find_records(source_kind="session_summary")]
            assert sorted(records) == sorted(fact(n) for n in range(SESSIONS))
            assert sorted(summaries) == sorted(f"Aditya mentioned tea number {n}." for n in range(SESSIONS))
            assert len(rt.store.events(kind="extraction.run")) == SESSIONS
            # Each kill left a claim that a later run took over once its lease lapsed.
            assert len(rt.store.events(kind="extraction.reclaimed")) == KILLS
        finally:
            rt.close()
