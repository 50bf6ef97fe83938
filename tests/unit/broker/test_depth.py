"""Queue depths come from the broker agents and workers share, and asking never takes
longer than the deadline: a refused port, a broker that accepts and never answers, the
embedded broker before anything was queued, and (with Redis) real messages waiting."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from retold.broker import CeleryScheduler
from retold.broker.depth import QueueDepths, queue_depths
from retold.config import Config, read_config
from tests.ports import free_port


def _config(tmp_path: Path, url: str | None, **queue: str) -> Config:
    return read_config(overrides={"store": {"path": str(tmp_path / "m.sqlite")},
                                  "queue": {"broker_url": url, **queue}})


@pytest.fixture
def silent_broker() -> Iterator[str]:
    """A port whose listener completes TCP handshakes (the kernel does) and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield f"redis://127.0.0.1:{sock.getsockname()[1]}/0"


def test_a_broker_that_never_answers_costs_at_most_the_deadline(tmp_path: Path, silent_broker: str) -> None:
    started = time.monotonic()
    short = queue_depths(_config(tmp_path, silent_broker), timeout_seconds=0.2)
    assert time.monotonic() - started < 1.0
    assert short == QueueDepths(silent_broker, False, {}, "no answer within 0.2 s")
    started = time.monotonic()
    default = queue_depths(_config(tmp_path, silent_broker))
    assert time.monotonic() - started < 2.5  # two seconds, plus slack for a loaded machine
    assert not default.reachable and default.error and default.depths == {}


def test_a_refused_port_is_unreachable_with_its_reason_and_no_password(tmp_path: Path) -> None:
    url = f"redis://:hunter2@127.0.0.1:{free_port()}/0"
    depths = queue_depths(_config(tmp_path, url))
    assert not depths.reachable and depths.error and "refused" in depths.error.lower()
    assert "hunter2" not in depths.broker


def test_the_embedded_broker_before_any_publish_is_empty_and_is_not_created(tmp_path: Path) -> None:
    depths = queue_depths(_config(tmp_path, None))
    assert depths.reachable and depths.depths == {"extraction": 0, "maintenance": 0}
    assert not (tmp_path / "queue.sqlite").exists()


def test_the_embedded_broker_counts_waiting_messages(tmp_path: Path) -> None:
    config = _config(tmp_path, None)
    scheduler = CeleryScheduler(config)
    for session_id in ("s1", "s2"):
        scheduler.schedule(session_id)
    scheduler.close()
    assert queue_depths(config).depths == {"extraction": 2, "maintenance": 0}


@pytest.mark.redis
def test_redis_queue_lengths(tmp_path: Path) -> None:
    import redis

    name = f"test-depth-{uuid.uuid4().hex}"  # the shared Redis may hold other tests' queues
    config = _config(tmp_path, "redis://127.0.0.1:6379/0", extraction_queue=name,
                     maintenance_queue=f"{name}-m")
    assert queue_depths(config).depths == {name: 0, f"{name}-m": 0}  # never declared
    scheduler = CeleryScheduler(config)
    try:
        for session_id in ("s1", "s2", "s3"):
            scheduler.schedule(session_id)
        assert queue_depths(config) == QueueDepths("redis://127.0.0.1:6379/0", True,
                                                   {name: 3, f"{name}-m": 0})
    finally:
        scheduler.close()
        redis.Redis().delete(name)
