"""Re-embedding that survives being stopped: batches are staged beside the live vectors,
a new run resumes from them, searches keep the old family until the swap, and
``retold reembed --enqueue`` hands the work to a worker on the maintenance queue."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from retold.cli import main
from retold.operations import Operations
from retold.store import EmbeddingFamily
from retold.testing import World
from tests.sql import rows
from workers.progress import PROGRESS, PROGRESS_EVENT, task_progress

RECORDS = 7
BATCH = 2
OLD = ("fake", "fake-1")
NEW = EmbeddingFamily("fake", "2", 384)


class Killed(Exception):
    """Stands in for a worker killed between two batches."""


def _ops(world: World) -> Operations:
    rt = world.rt
    config = rt.config.replace({"embedding": {"reembed_batch_size": BATCH}})
    return Operations(rt.store, rt.index, rt.embedder, config, world.clock, rt.retriever.search,
                      search_log=rt.search_log)


def _fill(world: World, count: int = RECORDS) -> list[str]:
    ids = []
    for i in range(count):
        written = world.write(content=f"Aditya maintains service number {i} in the payments team.",
                              attribute=f"service_{i}")
        assert written.record_id
        ids.append(written.record_id)
    return ids


def _stop_after(batches: int) -> Any:
    seen: list[tuple[int, int]] = []

    def progress(done: int, total: int) -> None:
        seen.append((done, total))
        if len(seen) > batches:  # the first call reports the start, before any batch
            raise Killed

    return progress


def _families(world: World) -> set[tuple[str, str]]:
    return {(m, v) for m, v in rows(world.rt.store, "SELECT model, version FROM embeddings")}


def test_a_stopped_reembed_keeps_the_live_vectors_and_resumes_where_it_stopped(world: World) -> None:
    ids = _fill(world)
    ops = _ops(world)
    with pytest.raises(Killed):
        ops.reembed(NEW.model, NEW.version, progress=_stop_after(2))

    # Nothing live changed: every search still has every vector of the old family.
    assert _families(world) == {OLD}
    assert world.rt.store.embedding_family() == EmbeddingFamily(*OLD, 384)
    world.rt.refresh_index()
    assert {rid for rid in ids if world.rt.index.vector_for(rid) is not None} == set(ids)
    assert world.rt.store.staged_vectors(NEW) == 2 * BATCH

    seen: list[tuple[int, int]] = []
    result = ops.reembed(NEW.model, NEW.version, progress=lambda done, total: seen.append((done, total)))
    assert (result.resumed, result.embedded) == (2 * BATCH, RECORDS - 2 * BATCH)
    assert seen[0] == (2 * BATCH, RECORDS) and seen[-1] == (RECORDS, RECORDS)
    assert _families(world) == {(NEW.model, NEW.version)}
    assert world.rt.store.embedding_family() == NEW
    assert rows(world.rt.store, "SELECT count(*) FROM reembed_vectors") == [(0,)]
    [event] = world.events("store.reembedded")
    assert event["payload"]["resumed"] == 2 * BATCH and event["payload"]["embedded"] == RECORDS - 2 * BATCH


def test_a_record_written_while_the_last_batch_runs_is_embedded_before_the_swap(world: World) -> None:
    _fill(world)
    late: list[str] = []

    def progress(done: int, total: int) -> None:
        if done == total and not late:  # after the last batch, before the swap
            written = world.write(content="Aditya joined the fraud review rota.", attribute="rota")
            assert written.record_id
            late.append(written.record_id)

    result = _ops(world).reembed(NEW.model, NEW.version, progress=progress)
    assert result.embedded == RECORDS + 1
    assert rows(world.rt.store, "SELECT version FROM embeddings WHERE record_id = ?", late[0]) == [("2",)]
    assert _families(world) == {(NEW.model, NEW.version)}


def test_erasing_a_record_during_a_stopped_reembed_erases_its_staged_vector(world: World) -> None:
    ids = _fill(world)
    ops = _ops(world)
    with pytest.raises(Killed):
        ops.reembed(NEW.model, NEW.version, progress=_stop_after(1))
    assert rows(world.rt.store, "SELECT count(*) FROM reembed_vectors WHERE record_id = ?", ids[0]) == [(1,)]
    ops.erase_record(ids[0], "test")
    assert rows(world.rt.store, "SELECT count(*) FROM reembed_vectors WHERE record_id = ?", ids[0]) == [(0,)]
    result = ops.reembed(NEW.model, NEW.version)
    assert result.resumed + result.embedded == RECORDS - 1
    assert rows(world.rt.store, "SELECT count(*) FROM embeddings WHERE record_id = ?", ids[0]) == [(0,)]


def test_a_reembed_to_another_family_discards_what_an_abandoned_one_staged(world: World) -> None:
    _fill(world)
    ops = _ops(world)
    with pytest.raises(Killed):
        ops.reembed("fake", "abandoned", progress=_stop_after(1))
    result = ops.reembed(NEW.model, NEW.version)
    assert (result.resumed, result.embedded) == (0, RECORDS)
    assert world.events("store.reembedded")[0]["payload"]["discarded"] == BATCH


# -- progress as task state ------------------------------------------------------------------


class _Task:
    """The two reporting calls of a running Celery task, recorded."""

    def __init__(self, task_id: str | None = "t-1", broken: bool = False) -> None:
        self.request = SimpleNamespace(id=task_id, called_directly=task_id is None)
        self.states: list[tuple[str, dict[str, int]]] = []
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.broken = broken

    def update_state(self, state: str, meta: dict[str, int]) -> None:
        if self.broken:
            raise ConnectionError("backend down")
        self.states.append((state, meta))

    def send_event(self, type_: str, **fields: Any) -> None:
        self.events.append((type_, fields))


def test_progress_reaches_the_task_state_at_most_once_a_second_plus_the_last() -> None:
    task, now = _Task(), [0.0]
    report = task_progress(task, clock=lambda: now[0])
    for done in (0, 2, 4):
        report(done, 7)
        now[0] += 0.3
    now[0] += 1.0
    report(6, 7)
    report(7, 7)
    assert task.states == [(PROGRESS, {"done": d, "total": 7}) for d in (0, 6, 7)]
    assert [(t, f["done"]) for t, f in task.events] == [(PROGRESS_EVENT, d) for d in (0, 6, 7)]


def test_progress_outside_a_worker_or_with_a_dead_backend_never_fails_the_work() -> None:
    direct = _Task(task_id=None)
    task_progress(direct)(1, 2)
    assert direct.states == [] and direct.events == []
    broken = _Task(broken=True)
    task_progress(broken)(1, 2)  # logged, not raised


# -- retold reembed --enqueue ----------------------------------------------------------------


def _config_file(tmp_path: Path, broker: str | None = None) -> Path:
    path = tmp_path / "config.yaml"
    queue = f"queue:\n  broker_url: {broker}\n" if broker else ""
    # The store path places the embedded broker's file, whichever store --store names.
    path.write_text(f"store:\n  path: {tmp_path / 'memory.sqlite'}\n"
                    f"embedding:\n  model: fake\n  version: {OLD[1]}\n{queue}")
    return path


@pytest.mark.filterwarnings("ignore:.*noload.*")  # kombu's SQLAlchemy transport, not ours
def test_enqueue_publishes_a_reembed_the_worker_app_consumes(
    world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from workers.app import create_app

    _fill(world, 1)
    store, config_path = world.target, _config_file(tmp_path)
    world.rt.close()
    assert main(["reembed", "--model", NEW.model, "--version", NEW.version, "--enqueue",
                 "--store", store, "--config", str(config_path)]) == 0
    assert "as task" in capsys.readouterr().out
    assert rows(store, "SELECT DISTINCT version FROM embeddings") == [(OLD[1],)]  # nothing ran here

    from retold.config.env import load_config_from_environment
    from retold.config.env import store_target as store_keys

    config = load_config_from_environment({}, str(config_path), {"store": store_keys(store)})
    with create_app(config).connection_for_read() as conn:  # what a worker of this config consumes
        queue = conn.SimpleQueue(config.queue.maintenance_queue)
        try:
            message = queue.get(timeout=5)
            assert message.headers["task"] == "retold.reembed"
            assert message.payload[0] == [NEW.model, NEW.version]
            assert message.payload[1] == {"dims": None}
            message.ack()
        finally:
            queue.close()


def test_enqueue_to_an_unreachable_broker_is_one_line_and_quick(
    world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store, config_path = world.target, _config_file(tmp_path, "redis://127.0.0.1:1/0")
    world.rt.close()
    started = time.monotonic()
    code = main(["reembed", "--model", NEW.model, "--version", NEW.version, "--enqueue",
                 "--store", store, "--config", str(config_path)])
    assert time.monotonic() - started < 5
    err = capsys.readouterr().err
    assert code == 1 and err.startswith("retold reembed: could not queue the re-embed on redis://")
    assert len(err.strip().splitlines()) == 1
