"""``retold reembed --enqueue`` run by a real worker on Redis: its progress reaches the
event stream Flower reads as the ``PROGRESS`` state, searches keep working while it runs,
and after the worker is killed part-way a second worker resumes from the staged batches.

The test pauses the worker deterministically by holding the store's write lock: the
worker embeds its next batch and then waits to stage it, so "part-way" is exact. It runs
on a SQLite file and on PostgreSQL (the advisory write lock).
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from retold import build_runtime, load_config
from retold.cli import main
from retold.config import Config
from retold.index.embedder import FakeEmbedder
from retold.models import Principal, Scope, SearchRequest
from retold.testing import make_record
from tests.celery_support import StartWorker, solo_workers, store_yaml, wait_for
from tests.celery_support import flushed_redis as flushed
from tests.conditions import WriteLocker
from tests.sql import rows
from workers.app import create_app

pytestmark = pytest.mark.both_backends

REDIS_URL = "redis://127.0.0.1:6379/14"
RECORDS = 400
BATCH = 20
DEADLINE_S = 45


@pytest.fixture
def config_path(tmp_path: Path, store_target: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(
        store_yaml(store_target, tmp_path) + "  busy_timeout_seconds: 120\n"
        f"embedding:\n  model: fake\n  version: fake-1\n  reembed_batch_size: {BATCH}\n"
        f"queue:\n  broker_url: {REDIS_URL}\n"
    )
    return path


def _fill(config: Config) -> None:
    embedder = FakeEmbedder()
    records = [make_record(content=f"Service {i} of the payments team is owned by Aditya.",
                           attribute=f"service_{i}") for i in range(RECORDS)]
    vectors = embedder.embed_documents([r.content for r in records])
    with build_runtime(config, environ={}) as rt:
        rt.host.grant("research-agent", Scope("user", "aditya"), read=True, write=True)
        with rt.store.atomic():
            for record in records:
                rt.store.write_record(record)
        rt.store.put_embeddings([(r.id, vectors[i]) for i, r in enumerate(records)], "fake", "fake-1")


class _Monitor:
    """What Flower does: every event of the broker folded into Celery's event ``State``."""

    def __init__(self, config: Config) -> None:
        self.app = create_app(config)
        self.state = self.app.events.State()
        self._receiver: Any = None
        self._thread = threading.Thread(target=self._listen, daemon=True)
        self._thread.start()

    def _listen(self) -> None:
        with self.app.connection_for_read() as conn:
            self._receiver = self.app.events.Receiver(conn, handlers={"*": self.state.event})
            self._receiver.capture(limit=None, timeout=None, wakeup=True)

    def task(self, task_id: str) -> Any:
        return self.state.tasks.get(task_id)

    def stop(self) -> None:
        if self._receiver is not None:
            self._receiver.should_stop = True
        self._thread.join(timeout=5)


@pytest.fixture
def monitor(config_path: Path) -> Iterator[_Monitor]:
    with flushed(REDIS_URL):
        watching = _Monitor(load_config(config_path))
        try:
            yield watching
        finally:
            watching.stop()


@pytest.fixture
def start_worker(tmp_path: Path, config_path: Path) -> Iterator[StartWorker]:
    with solo_workers(tmp_path, {"RETOLD_CONFIG": str(config_path)}, "-E") as start:
        yield start


def _enqueue(config_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["reembed", "--model", "fake", "--version", "2", "--enqueue",
                 "--config", str(config_path)]) == 0
    found = re.search(r"as task (\S+)", capsys.readouterr().out)
    assert found is not None
    return found.group(1)


def _staged(path: str) -> int:
    return int(rows(path, "SELECT count(*) FROM reembed_vectors")[0][0])


def _live(path: str) -> list[tuple[Any, ...]]:
    return rows(path, "SELECT version, count(*) FROM embeddings GROUP BY version")


def _stop_after(lock: WriteLocker, least: int, log: Path) -> int:
    """Take the write lock once at least ``least`` vectors are staged, and return how many.

    The count is read while holding the lock, between two of the worker's batches, and the
    lock is let go only for a moment between looks, so the worker cannot race past the end
    of the run while the test decides to stop it.
    """
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        lock.take()
        staged = int(lock.scalar("SELECT count(*) FROM reembed_vectors"))
        if staged >= least:
            return staged
        lock.release()
        time.sleep(0.005)
    tail = log.read_text(errors="replace")[-3000:]
    pytest.fail(f"fewer than {least} vectors staged in {DEADLINE_S} s\n{tail}")


def _ready(log: Path) -> bool:
    return log.exists() and b"ready." in log.read_bytes()


@pytest.mark.redis
@pytest.mark.timeout(150)
def test_a_killed_reembed_worker_is_resumed_by_the_next_and_progress_shows_as_task_state(
    config_path: Path, monitor: _Monitor, start_worker: StartWorker, capsys: pytest.CaptureFixture[str]
) -> None:
    config = load_config(config_path)
    path = config.store.target
    _fill(config)
    first, first_log = start_worker("reembed-first")
    # Its online event proves the monitor listens before any progress is sent.
    wait_for(lambda: any(w.alive for w in monitor.state.workers.values()), "the first worker online",
             [first_log], DEADLINE_S)

    lock = WriteLocker(path)
    try:
        lock.take()  # the worker will wait to stage its first batch
        task_id = _enqueue(config_path, capsys)
        wait_for(lambda: getattr(monitor.task(task_id), "state", None) == "PROGRESS",
                 "the first progress report", [first_log], DEADLINE_S)
        lock.release()
        staged = _stop_after(lock, 2 * BATCH, first_log)  # the worker waits at its next batch
        assert 2 * BATCH <= staged < RECORDS
        # Part-way, the live vectors are all still the old family's.
        assert _live(path) == [("fake-1", RECORDS)]
        task = monitor.task(task_id)
        assert task.state == "PROGRESS" and 0 <= task.done < RECORDS and task.total == RECORDS
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=10)
    finally:
        lock.close()

    # A stopped re-embed leaves the store as searchable as before it started.
    with build_runtime(config, environ={}) as rt:
        found = rt.retriever.search(Principal("research-agent", "aditya", "probe", None),
                                    SearchRequest(queries=["Who owns service 7 of the payments team?"]))
        assert found.response.results

    second, second_log = start_worker("reembed-second")
    wait_for(lambda: _ready(second_log), "the second worker", [second_log], DEADLINE_S)
    again = _enqueue(config_path, capsys)
    wait_for(lambda: getattr(monitor.task(again), "state", None) == "SUCCESS",
             "the resumed re-embed", [second_log], DEADLINE_S)

    [(payload,)] = rows(path, "SELECT payload FROM events WHERE kind = 'store.reembedded'")
    result = json.loads(payload)
    assert result["resumed"] >= staged and result["resumed"] + result["embedded"] == RECORDS
    assert _live(path) == [("2", RECORDS)]
    assert _staged(path) == 0
    assert monitor.task(task_id).state == "PROGRESS"  # the killed run never finished
