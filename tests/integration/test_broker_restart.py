"""A broker that restarts and forgets: a Redis that keeps nothing on disk loses the
messages it held when it restarts, while the store still marks those sessions as queued.
The next recover sweep sees a new Redis instance and hands them over again, once, instead
of waiting ``queue.requeue_after_minutes``.

The test starts its own redis-server on a free port and restarts it; the shared one on
6379 is never touched.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from retold import build_runtime
from retold.broker.identity import broker_instance
from retold.broker.waiting import waiting_sessions
from retold.clock import ManualClock
from retold.config import read_config
from retold.models import Principal, Scope
from retold.runtime import Runtime
from retold.testing import T0
from tests.celery_support import wait_for
from tests.conftest import IN_CI
from tests.ports import free_port

AGENT = "research-agent"
pytestmark = [pytest.mark.redis, pytest.mark.timeout(120)]


class RestartableRedis:
    """A redis-server of the test's own that keeps nothing on disk, as the shipped one."""

    def __init__(self, folder: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            if IN_CI:
                pytest.fail("redis-server is not installed")
            pytest.skip("redis-server is not installed")
        self.binary, self.folder, self.port = binary, folder, free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.client = redis.Redis(port=self.port, socket_timeout=5)
        self.process = self._start()

    def _start(self) -> subprocess.Popen[bytes]:
        process = subprocess.Popen([self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
                                    "--save", "", "--appendonly", "no", "--dir", str(self.folder)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def answers() -> bool:
            try:
                return bool(self.client.ping())
            except redis.ConnectionError:
                return False

        wait_for(answers, "the test's redis-server", [], timeout=15)
        return process

    def restart(self) -> None:
        self.stop()
        self.process = self._start()

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RestartableRedis]:
    server = RestartableRedis(tmp_path)
    try:
        yield server
    finally:
        server.stop()
        server.client.close()


def _queued(client: redis.Redis, queue: str) -> list[str]:
    """The session ids of the extraction messages waiting in ``queue``."""
    messages = [json.loads(raw) for raw in client.lrange(queue, 0, -1)]
    return sorted(m["headers"]["argsrepr"].strip("[]'") for m in messages)


def _end(rt: Runtime, session_id: str) -> None:
    p = rt.hooks.on_turn(Principal(AGENT, "aditya", session_id, None), "user", "Keep answers short.")
    rt.hooks.on_session_end(p)


def test_sessions_a_restarted_redis_forgot_are_queued_again_at_the_next_sweep(
    tmp_path: Path, own_redis: RestartableRedis
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f"store:\n  path: {tmp_path / 'memory.sqlite'}\nembedding:\n  model: fake\n"
                      f"queue:\n  broker_url: {own_redis.url}\n")
    rt = build_runtime(environ={"RETOLD_CONFIG": str(config)})
    try:
        rt.host.grant(AGENT, Scope("user", "aditya"), read=True, write=True)
        queue = rt.config.queue.extraction_queue

        def sweep() -> list[str]:  # what the recover task does, without a worker
            return rt.session_end.enqueue_due(lambda session_id, stage: rt.scheduler.schedule(session_id),
                                             broker_instance(own_redis.url))

        _end(rt, "s-1")
        _end(rt, "s-2")
        assert _queued(own_redis.client, queue) == ["s-1", "s-2"]
        first = broker_instance(own_redis.url)
        assert first is not None
        assert sweep() == []  # queued and still held: nothing to hand over

        own_redis.restart()
        assert _queued(own_redis.client, queue) == []  # the messages are gone
        assert broker_instance(own_redis.url) not in (None, first)
        assert sorted(sweep()) == ["s-1", "s-2"]
        assert _queued(own_redis.client, queue) == ["s-1", "s-2"]
        assert sweep() == []  # once: the new marks hold
        assert _queued(own_redis.client, queue) == ["s-1", "s-2"]
        [event] = rt.store.events(kind="queue.broker_restarted")
        assert event["payload"]["requeued"] == 2
    finally:
        rt.close()


def test_a_broker_that_does_not_answer_or_is_not_redis_has_no_instance(tmp_path: Path) -> None:
    assert broker_instance(f"redis://127.0.0.1:{free_port()}/0", timeout_seconds=0.5) is None
    assert broker_instance(f"sqla+sqlite:///{tmp_path / 'broker.sqlite'}") is None


def test_a_message_a_dead_worker_took_is_handed_over_again_after_one_lease(
    tmp_path: Path, own_redis: RestartableRedis
) -> None:
    clock = ManualClock(T0)
    config = read_config(overrides={"store": {"path": str(tmp_path / "memory.sqlite")},
                                    "embedding": {"model": "fake"}, "queue": {"broker_url": own_redis.url}})
    rt = build_runtime(config, clock=clock, environ={})
    try:
        rt.host.grant(AGENT, Scope("user", "aditya"), read=True, write=True)
        queue = rt.config.queue.extraction_queue

        def sweep() -> list[str]:  # what the recover task does, without a worker
            return rt.session_end.enqueue_due(lambda session_id, stage: rt.scheduler.schedule(session_id),
                                             broker_instance(own_redis.url),
                                             waiting_sessions(own_redis.url, [queue]))

        _end(rt, "s-taken")
        _end(rt, "s-waiting")
        assert waiting_sessions(own_redis.url, [queue]) == {"s-taken", "s-waiting"}
        # A worker takes the oldest message off the list and dies before it acknowledges
        # it or claims the session: the message is in no list any more.
        assert own_redis.client.rpop(queue) is not None
        assert waiting_sessions(own_redis.url, [queue]) == {"s-waiting"}
        assert sweep() == []  # within the lease a worker may still be starting
        clock.advance(seconds=config.ingestion.extraction_lease_seconds + 1)
        assert sweep() == ["s-taken"]
        assert sorted(_queued(own_redis.client, queue)) == ["s-taken", "s-waiting"]
        assert sweep() == []  # once
    finally:
        rt.close()


def test_a_broker_that_is_not_redis_or_does_not_answer_says_nothing_of_what_waits(tmp_path: Path) -> None:
    assert waiting_sessions(f"redis://127.0.0.1:{free_port()}/0", ["extraction"], timeout_seconds=0.5) is None
    assert waiting_sessions(f"sqla+sqlite:///{tmp_path / 'broker.sqlite'}", ["extraction"]) is None
