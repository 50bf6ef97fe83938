"""Helpers shared by the tests that run real Celery processes against Redis."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis


@contextmanager
def flushed_redis(url: str) -> Iterator[None]:
    """An empty Redis database for the test, emptied again afterwards."""
    client = redis.Redis.from_url(url)
    client.flushdb()
    try:
        yield
    finally:
        client.flushdb()
        client.close()


def wait_for(predicate: Callable[[], bool], what: str, logs: list[Path], timeout: float,
             poll_s: float = 0.1) -> None:
    """Poll ``predicate`` until it holds; on timeout fail with the tail of each log."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(poll_s)
    tails = "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in logs if p.exists())
    pytest.fail(f"timed out waiting for {what}\n{tails}")
