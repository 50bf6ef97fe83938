"""Helpers shared by the tests that run real Celery processes against Redis."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis

ROOT = Path(__file__).resolve().parents[1]
StartWorker = Callable[[str], tuple[subprocess.Popen[bytes], Path]]


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


@contextmanager
def solo_workers(tmp: Path, env: dict[str, str], queues: str, *extra: str) -> Iterator[StartWorker]:
    """Start named workers with the solo pool (the main process runs each task, so killing
    it kills the task), each logging to ``tmp/<name>.log``, with ``env`` over this
    environment less its ``RETOLD_*`` variables; every one is killed on exit."""
    started: list[subprocess.Popen[bytes]] = []

    def start(name: str) -> tuple[subprocess.Popen[bytes], Path]:
        full = {k: v for k, v in os.environ.items() if not k.startswith("RETOLD_")}
        full.update(PYTHONPATH=str(ROOT), **env)
        log_path = tmp / f"{name}.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "workers", "worker", "-P", "solo", *extra,
                 "-Q", queues, "--loglevel=INFO", "-n", f"{name}-{os.getpid()}@%h",
                 "--without-gossip", "--without-mingle"],
                cwd=tmp, env=full, stdout=log, stderr=subprocess.STDOUT)
        started.append(proc)
        return proc, log_path

    try:
        yield start
    finally:
        for proc in started:
            if proc.poll() is None:
                proc.kill()
        for proc in started:
            proc.wait(timeout=10)
