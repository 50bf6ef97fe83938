"""Helpers shared by the tests that run real Celery processes against Redis."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis

from retold import build_runtime
from retold.config import Config, is_database_url
from retold.ingest.session import ExtractionScheduler
from retold.models import Principal, Scope
from retold.runtime import Runtime

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


def store_yaml(target: str, folder: Path) -> str:
    """The ``store:`` block of a test's config file for ``target`` (the ``store_target``
    fixture: a SQLite file or a PostgreSQL URL). A URL keeps a store path in ``folder``,
    where the embedded broker puts its file, so no process of the test writes one into
    its working directory."""
    if is_database_url(target):
        return f"store:\n  url: {json.dumps(target)}\n  path: {json.dumps(str(folder / 'memory.sqlite'))}\n"
    return f"store:\n  path: {json.dumps(target)}\n"


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


USER_SAYS = "Please keep every answer short and technical, I read them on my phone."
AGENT = "research-agent"


def worker_args(name: str, *extra: str) -> list[str]:
    """The arguments after ``celery -A workers`` of a solo worker on both queues, named
    for this test process so parallel runs never share a node name."""
    return ["worker", "-P", "solo", "-Q", "extraction,maintenance", "--loglevel=INFO",
            "-n", f"{name}-{os.getpid()}@%h", "--without-gossip", "--without-mingle", *extra]


def start_worker(name: str, cwd: Path, env: dict[str, str],
                 *extra: str) -> tuple[subprocess.Popen[bytes], Path]:
    """Start a solo worker whose output goes to ``cwd/<name>.log``; return it and the log."""
    log_path = cwd / f"{name}.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "celery", "-A", "workers", *worker_args(name, *extra)],
                                cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
    return proc, log_path


@contextmanager
def killed_at_exit() -> Iterator[list[subprocess.Popen[bytes]]]:
    """A list for the processes a test starts; each still running is killed on exit."""
    started: list[subprocess.Popen[bytes]] = []
    try:
        yield started
    finally:
        for proc in started:
            if proc.poll() is None:
                proc.kill()
        for proc in started:
            proc.wait(timeout=10)


def agent_runtime(config: Config, scheduler: ExtractionScheduler | None = None) -> Runtime:
    """An agent's runtime over ``config`` with ``research-agent`` granted ``user:aditya``;
    no API key reaches it, so it never extracts."""
    rt = build_runtime(config, scheduler=scheduler, environ={})
    rt.host.grant(AGENT, Scope("user", "aditya"), read=True, write=True)
    rt.host.provision_user("aditya", aliases=["Aditya"])
    return rt


def talk(rt: Runtime, session_id: str) -> Principal:
    """Start ``session_id`` and record one user turn and one assistant turn."""
    p = Principal(AGENT, "aditya", session_id, None)
    rt.hooks.on_session_start(p)
    p = rt.hooks.on_turn(p, "user", USER_SAYS)
    return rt.hooks.on_turn(p, "assistant", "Understood: short and technical from now on.")


@contextmanager
def solo_workers(tmp: Path, env: dict[str, str], *extra: str) -> Iterator[StartWorker]:
    """Start named solo workers (the main process runs each task, so killing it kills the
    task), each logging to ``tmp/<name>.log``, with ``env`` over this environment less its
    ``RETOLD_*`` variables; every one is killed on exit."""
    with killed_at_exit() as started:
        def start(name: str) -> tuple[subprocess.Popen[bytes], Path]:
            full = {k: v for k, v in os.environ.items() if not k.startswith("RETOLD_")}
            full.update(PYTHONPATH=str(ROOT), **env)
            proc, log_path = start_worker(name, tmp, full, *extra)
            started.append(proc)
            return proc, log_path

        yield start
