"""Search-log rows are written off the search path: a held write lock, a read-only file or
a full queue never slows or fails a search, and a late row never outlives an erasure."""

from __future__ import annotations

import logging
import threading
import time
from contextlib import closing
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from retold import build_runtime, load_config
from retold.clock import new_id, to_iso
from retold.config import SearchLogConfig
from retold.models import SearchRequest
from retold.retrieve.retriever import SearchOutcome
from retold.retrieve.search_log import LogJson, SearchLogWriter
from retold.runtime import Runtime
from retold.store import Store, open_store
from retold.testing import TEST_GATE, World, make_world
from tests.conditions import write_lock_held
from tests.sql import rows

FACT = "Aditya prefers concise technical explanations."
QUERY = "concise technical explanations"


def hold_write_lock(path: str, seconds: float) -> threading.Thread:
    """Another connection takes the write lock now and releases it after ``seconds``."""
    taken = threading.Event()

    def hold() -> None:
        with write_lock_held(path):
            taken.set()
            time.sleep(seconds)

    thread = threading.Thread(target=hold)
    thread.start()
    assert taken.wait(5)
    return thread


def remember(world: World) -> str:
    world.say("user", FACT)
    result = world.write(content=FACT, attribute="explanation_style", source_kind="user_statement",
                         evidence=FACT)
    assert result.ok and result.record_id
    return result.record_id


def reopen(world: World, **overrides: Any) -> Runtime:
    """A second runtime on the world's file (fakes and clock shared) with config overrides."""
    store = overrides.pop("store", {})
    config = load_config(overrides={
        "store": {"path": world.rt.store.path, **store}, "embedding": {"model": "fake"},
        "retrieval": {"gate": TEST_GATE, "search_log": overrides}})
    return build_runtime(config, clock=world.clock, embedder=world.embedder, judge=world.judge,
                         environ={})


def search(rt: Runtime, world: World) -> SearchOutcome:
    return rt.retriever.search(world.p, SearchRequest(queries=[QUERY]))


def logged(path: str) -> int:
    return int(rows(path, "SELECT count(*) FROM search_log")[0][0])


def log_row(world: World, *, at: str, user_id: str = "aditya") -> dict[str, Any]:
    """A complete row, as a search would hand over."""
    row: dict[str, Any] = {column: "[]" for column in (
        "dense", "lexical", "entity", "fused", "freshness", "gated_out", "deduped_out",
        "reranked_out", "budget_out", "returned", "explanations", "readable_scopes")}
    return row | {
        "id": new_id(), "at": at, "agent_id": world.p.agent_id, "user_id": user_id,
        "session_id": world.p.session_id, "trigger": "tool", "request": "{}", "context": None,
        "rewrite_status": "disabled", "rewritten_queries": None, "reranked": None,
        "rerank_status": "disabled", "rerank_error": None, "config_flags": "{}", "warm": 1,
        "timings_ms": "{}", "decision": "{}",
    }


def test_a_search_returns_while_another_process_holds_the_write_lock(world: World) -> None:
    record_id = remember(world)
    search(world.rt, world)  # warm: the index is loaded and the writer is running
    assert world.rt.flush_search_log()
    assert world.rt.config.store.busy_timeout_seconds == 30
    with write_lock_held(world.rt.store.path):
        held = time.monotonic()
        started = time.perf_counter()
        outcome = search(world.rt, world)
        elapsed = time.perf_counter() - started
        assert [r.record.id for r in outcome.response.results] == [record_id]
        assert elapsed < 0.5, elapsed  # the busy timeout is 30 s, the lock is held for 2 s
        assert world.rt.store.search_log_row(outcome.response.search_id) is None
        assert world.rt.search_log.stats().pending == 1
        time.sleep(max(0.0, 2.0 - (time.monotonic() - held)))
    assert world.rt.flush_search_log()
    assert world.rt.store.search_log_row(outcome.response.search_id) is not None
    stats = world.rt.search_log.stats()
    assert (stats.submitted, stats.written, stats.pending, stats.failed) == (2, 2, 0, 0)


def test_inline_writes_wait_for_the_lock_but_a_timeout_never_fails_the_search(world: World) -> None:
    record_id = remember(world)
    rt = reopen(world, writes="inline", store={"busy_timeout_seconds": 0.2})
    try:
        with write_lock_held(rt.store.path):
            outcome = search(rt, world)
        assert [r.record.id for r in outcome.response.results] == [record_id]
        stats = rt.search_log.stats()
        assert (stats.submitted, stats.written, stats.failed) == (1, 0, 1)
        assert rt.store.search_log_row(outcome.response.search_id) is None
    finally:
        rt.close()


@pytest.mark.parametrize("writes", ["background", "inline"])
def test_a_read_only_store_serves_searches_and_logs_nothing_without_warning(
    world: World, writes: str, caplog: pytest.LogCaptureFixture,
) -> None:
    record_id = remember(world)
    world.rt.close()
    rt = reopen(world, writes=writes, store={"read_only": True})
    try:
        with caplog.at_level(logging.WARNING, logger="retold.retrieve.search_log"):
            for _ in range(3):
                outcome = search(rt, world)
                assert [r.record.id for r in outcome.response.results] == [record_id]
            assert rt.flush_search_log()
        stats = rt.search_log.stats()
        # a log the store cannot keep is not attempted, so no search warns about it
        assert (stats.submitted, stats.written, stats.failed, stats.pending) == (0, 0, 0, 0)
        assert not [r for r in caplog.records if "search log" in r.getMessage()]
    finally:
        rt.close()
    assert logged(world.rt.store.path) == 0


def test_a_full_queue_drops_rows_and_counts_them(world: World, caplog: pytest.LogCaptureFixture) -> None:
    record_id = remember(world)
    rt = reopen(world, queue_size=1)
    try:
        with caplog.at_level(logging.WARNING, logger="retold.retrieve.search_log"):
            with write_lock_held(rt.store.path):
                # The writer holds at most one row in its blocked batch and one in the queue.
                for _ in range(5):
                    outcome = search(rt, world)
                    assert [r.record.id for r in outcome.response.results] == [record_id]
                assert rt.search_log.stats().dropped >= 3
            assert rt.flush_search_log()
        stats = rt.search_log.stats()
        assert stats.written + stats.dropped == 5 and stats.written >= 1 and stats.failed == 0
        drops = [r for r in caplog.records if "row dropped" in r.getMessage()]
        assert len(drops) == 1
        assert logged(rt.store.path) == stats.written
    finally:
        rt.close()


def test_a_tool_search_logs_its_row_once_the_result_is_built(world: World) -> None:
    record_id = remember(world)
    writer = world.rt.search_log
    with writer.held():
        outcome = search(world.rt, world)
        # Still with the thread that answers: no writer works on it while the result is built.
        assert writer.stats().submitted == 0
    assert world.rt.flush_search_log()
    assert world.rt.store.search_log_row(outcome.response.search_id) is not None
    result = world.rt.tools.call("memory_search", world.p, {"queries": [QUERY]})
    assert [r["id"] for r in result["results"]] == [record_id]
    assert world.rt.flush_search_log()
    assert world.rt.store.search_log_row(result["search_id"]) is not None


def test_a_held_row_is_handed_over_when_the_block_fails(world: World) -> None:
    remember(world)
    with pytest.raises(RuntimeError), world.rt.search_log.held():
        outcome = search(world.rt, world)
        with world.rt.search_log.held():  # nested: handed over by the outer block only
            search(world.rt, world)
        raise RuntimeError("rendering failed")
    assert world.rt.flush_search_log()
    assert world.rt.store.search_log_row(outcome.response.search_id) is not None
    assert world.rt.search_log.stats().written == 2


def test_inline_writes_are_not_held(world: World) -> None:
    remember(world)
    rt = reopen(world, writes="inline")
    try:
        with rt.search_log.held():
            outcome = search(rt, world)
            # Written by the search itself, so its log stage still counts the write.
            assert rt.store.search_log_row(outcome.response.search_id) is not None
    finally:
        rt.close()


def test_close_writes_the_queued_rows(world: World) -> None:
    remember(world)
    holder = hold_write_lock(world.rt.store.path, 0.5)
    for _ in range(3):
        search(world.rt, world)
    assert world.rt.search_log.stats().pending == 3
    world.rt.close()  # the lock is still held here: close waits for it, then writes
    holder.join()
    assert world.rt.search_log.stats().written == 3
    assert logged(world.rt.store.path) == 3


def test_close_waits_a_bounded_time_for_a_held_lock(world: World, caplog: pytest.LogCaptureFixture) -> None:
    remember(world)
    rt = reopen(world, flush_timeout_seconds=0.3)
    with write_lock_held(rt.store.path):
        search(rt, world)
        started = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="retold.retrieve.search_log"):
            rt.close()
        assert time.monotonic() - started < 1.5  # not the 30 s busy timeout
        assert rt.search_log.stats().pending == 1
        assert any("1 rows not written" in r.getMessage() for r in caplog.records)


def test_erasing_a_user_removes_rows_queued_before_the_erase(world: World) -> None:
    remember(world)
    holder = hold_write_lock(world.rt.store.path, 0.3)
    search(world.rt, world)
    assert world.rt.search_log.stats().pending == 1
    # Queued before the erase: written first (the erase flushes), then erased.
    world.rt.operations.erase_user("aditya", reason="user request")
    holder.join()
    assert rows(world.rt.store.path, "SELECT count(*) FROM search_log WHERE user_id = 'aditya'") == [(0,)]
    assert world.rt.search_log.stats().written == 1


def test_a_row_reaching_the_store_after_its_users_erasure_is_left_out(world: World) -> None:
    remember(world)
    before = to_iso(world.clock.now())
    world.clock.advance(minutes=1)
    # Another process erases the user while this process still holds a row from before.
    with closing(open_store(world.rt.store.path, clock=world.clock, migrate_schema=False)) as other:
        other.erase_user("aditya", "admin", "user request")
    world.clock.advance(minutes=1)
    after = to_iso(world.clock.now())
    writer = SearchLogWriter(world.rt.store, replace(SearchLogConfig(), writes="background"))
    late, fresh = log_row(world, at=before), log_row(world, at=after)
    writer.submit(late)
    writer.submit(fresh)
    assert writer.close()
    stats = writer.stats()
    assert (stats.written, stats.erased) == (1, 1)
    assert world.rt.store.search_log_row(late["id"]) is None
    assert world.rt.store.search_log_row(fresh["id"]) is not None


def test_an_in_memory_store_writes_inline_and_building_a_runtime_starts_no_thread(
    tmp_path: Path, store_target: str,
) -> None:
    store = Store(":memory:")
    try:
        assert not SearchLogWriter(store, SearchLogConfig()).background
    finally:
        store.close()
    before = [t for t in threading.enumerate() if t.name == "retold-search-log"]
    world = make_world(tmp_path, store=store_target)
    try:
        assert world.rt.search_log.background
        assert [t for t in threading.enumerate() if t.name == "retold-search-log"] == before
    finally:
        world.rt.close()


def test_log_columns_are_serialised_by_the_writer_and_a_bad_one_fails_only_its_batch(
    world: World, caplog: pytest.LogCaptureFixture,
) -> None:
    writer = SearchLogWriter(world.rt.store, replace(SearchLogConfig(), writes="background"))
    good = log_row(world, at=to_iso(world.clock.now())) | {
        "returned": LogJson(lambda: ["a", "b"])}

    def broken() -> list[str]:
        raise RuntimeError("cannot build this column")

    writer.submit(good)
    assert writer.flush()
    writer.submit(log_row(world, at=to_iso(world.clock.now())) | {"returned": LogJson(broken)})
    with caplog.at_level(logging.WARNING):
        assert writer.close()
    stats = writer.stats()
    assert (stats.written, stats.failed) == (1, 1)
    row = world.rt.store.search_log_row(good["id"])
    assert row is not None and row["returned"] == '["a", "b"]'
    assert "cannot build this column" in caplog.text
