"""retold.operations: expiry, retention, erasure, due review, re-embedding,
snapshots and unmapped legacy rows, on a real store file with fakes at the model edges."""

from __future__ import annotations

import sqlite3
import threading
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest

from retold import build_runtime, load_config
from retold.clock import ManualClock, to_iso
from retold.config.env import store_target as store_keys
from retold.errors import EmbeddingMismatchError, MigrationIssuesError
from retold.index.embedder import FakeEmbedder
from retold.ingest.equivalence import FakeJudge
from retold.models import Scope, SearchRequest
from retold.operations import OperationError, Operations
from retold.runtime import Runtime
from retold.store import EmbeddingFamily, open_store
from retold.testing import ADITYA, T0, TEST_GATE, World, make_record
from tests.sql import execute, rows


def _ops(world: World) -> Operations:
    return world.rt.operations


def _insert(world: World, **fields: object) -> str:
    record = make_record(**fields)
    world.rt.store.write_record(record)
    return record.id


def _status(world: World, record_id: str) -> str:
    return world.record(record_id).status


# -- expire ----------------------------------------------------------------------------------


def test_expire_marks_only_active_records_past_expiry(world: World) -> None:
    past = _insert(world, status="provisional", expires_at=T0 - timedelta(days=1))
    summary = _insert(world, source_kind="session_summary", type="episodic",
                      expires_at=T0 - timedelta(seconds=1), source_ref="session:old")
    boundary = _insert(world, expires_at=T0)  # expires_at == now is still eligible
    future = _insert(world, expires_at=T0 + timedelta(days=1))
    history = _insert(world, status="superseded", expires_at=T0 - timedelta(days=3))
    before = world.rt.store.records_version()

    assert _ops(world).expire("ops") == 2
    assert [_status(world, r) for r in (past, summary, boundary, future, history)] == [
        "expired", "expired", "confirmed", "confirmed", "superseded"]
    events = world.events("record.status")
    assert sorted(e["record_id"] for e in events) == sorted([past, summary])
    assert {e["payload"]["to"] for e in events} == {"expired"} and {e["actor"] for e in events} == {"ops"}
    assert world.rt.store.records_version() == before + 1
    assert world.record(past).index_version == before + 1
    assert _ops(world).expire() == 0  # idempotent: nothing left to expire


# -- retain --------------------------------------------------------------------------------------


def _session(world: World, sid: str, ended_days_ago: float | None, extracted: bool) -> None:
    store = world.rt.store
    store.create_session(sid, "research-agent", "aditya", None, T0 - timedelta(days=200))
    store.append_turn(sid, "user", f"transcript text of {sid}", T0 - timedelta(days=200))
    execute(store, "UPDATE sessions SET ended_at = ?, extracted_at = ? WHERE id = ?",
            None if ended_days_ago is None else to_iso(T0 - timedelta(days=ended_days_ago)),
            to_iso(T0) if extracted else None, sid)


def test_retain_blanks_only_old_extracted_sessions_and_keeps_turn_rows(world: World) -> None:
    _session(world, "old-done", 91, extracted=True)
    _session(world, "old-pending", 400, extracted=False)  # never blanked, whatever its age
    _session(world, "recent-done", 10, extracted=True)
    _session(world, "open", None, extracted=True)

    assert _ops(world).retain("ops").sessions_blanked == 1
    store = world.rt.store
    assert [t.content for t in store.turns("old-done")] == [""]
    for sid in ("old-pending", "recent-done", "open"):
        assert store.turns(sid)[0].content == f"transcript text of {sid}"
    events = world.events("session.transcript_blanked")
    assert [e["payload"]["session_id"] for e in events] == ["old-done"]
    assert _ops(world).retain().sessions_blanked == 0  # already blank: no second event
    world.clock.advance(days=1000)
    assert _ops(world).retain().sessions_blanked == 1  # recent-done is now old; old-pending still never
    assert store.turns("old-pending")[0].content == "transcript text of old-pending"


# -- erase ------------------------------------------------------------------------------------------


def _written(world: World) -> str:
    world.say("user", "Please keep every answer short and technical.")
    result = world.write(content="Aditya prefers short technical answers.", attribute="answer_style",
                         source_kind="user_statement", evidence="keep every answer short and technical",
                         tags=("style",), entities=(("person", "Aditya", "about"),))
    assert result.ok and result.record_id
    return result.record_id


def test_erase_record_keeps_a_tombstone_and_nothing_else(world: World) -> None:
    rid = _written(world)
    world.rt.refresh_index()
    store = world.rt.store
    assert store.record_links(rid)

    result = _ops(world).erase_record(rid, "user asked", "ops")
    record = world.record(rid)
    assert (record.content, record.evidence, record.tags, record.status) == ("", None, [], "deleted")
    assert record.attribute is None and record.entity_ids == []
    assert record.created_at == T0 and record.source_kind == "user_statement"  # ids, kinds, times stay
    assert rows(store, "SELECT count(*) FROM embeddings WHERE record_id = ?", rid) == [(0,)]
    assert rows(store, "SELECT count(*) FROM records_fts WHERE record_id = ?", rid) == [(0,)]
    payloads = [(e["kind"], e["payload"]) for e in store.events(record_id=rid)]
    assert payloads[:-1] and all(p == {} for _, p in payloads[:-1])
    kind, last = payloads[-1]
    assert kind == "record.erased" and last["reason"] == "user asked"
    assert "short" not in str(last)
    assert result.counts["records"] == 1 and result.counts["embeddings"] == 1
    assert rid not in world.rt.index.ids or not world.rt.index.live[world.rt.index.pos[rid]]
    assert result.compacted
    with pytest.raises(OperationError, match="no record"):
        _ops(world).erase_record("missing", "x")
    with pytest.raises(OperationError, match="reason"):
        _ops(world).erase_record(rid, "  ")


def test_erase_session_blanks_turns_and_quotes_but_keeps_the_claim(world: World) -> None:
    rid = _written(world)
    sid = world.p.session_id
    assert sid is not None
    result = _ops(world).erase_session(sid, "privacy")
    turns = world.rt.store.turns(sid)
    assert turns and all(t.content == "" for t in turns)
    record = world.record(rid)
    assert record.evidence is None and record.content == "Aditya prefers short technical answers."
    assert result.counts["turns"] == len(turns) and world.events("session.erased")
    with pytest.raises(OperationError, match="no session"):
        _ops(world).erase_session("nope", "x")


# -- review-due --------------------------------------------------------------------------------------


def _runtime(target: str, clock: ManualClock, *, embedder: FakeEmbedder | None = None,
             allow_embedding_mismatch: bool = False, **over: object) -> Runtime:
    config = load_config(overrides={"store": store_keys(target), "embedding": {"model": "fake"},
                                    "retrieval": {"gate": TEST_GATE}, **over})
    return build_runtime(config, clock=clock, embedder=embedder or FakeEmbedder(), judge=FakeJudge(),
                         allow_embedding_mismatch=allow_embedding_mismatch)


def test_review_due_racing_callers_flag_each_row_once(store_target: str) -> None:
    clock = ManualClock(T0)
    first, second = (_runtime(store_target, clock) for _ in range(2))
    try:
        due = [make_record(review_at=T0 - timedelta(hours=i)) for i in range(60)]
        for record in due:
            first.store.write_record(record)
        later = make_record(review_at=T0 + timedelta(days=1))
        first.store.write_record(later)
        gone = make_record(review_at=T0 - timedelta(days=1), status="expired")
        first.store.write_record(gone)
        counts: list[int] = []
        barrier = threading.Barrier(2)

        def run(rt: Runtime) -> None:
            barrier.wait()
            counts.append(rt.operations.review_due())

        threads = [threading.Thread(target=run, args=(rt,)) for rt in (first, second)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sum(counts) == 60
        events = first.store.events(kind="record.review_due")
        assert sorted(e["record_id"] for e in events) == sorted(r.id for r in due)
        assert {e["actor"] for e in events} == {"temporal_reviewer"}
        assert {"review_at", "valid_from", "valid_until"} <= set(events[0]["payload"])
        assert first.store.get_record(later.id).review_flagged_at is None  # type: ignore[union-attr]
        assert first.store.get_record(gone.id).review_flagged_at is None  # type: ignore[union-attr]
        assert second.operations.review_due() == 0
    finally:
        first.close()
        second.close()


def test_review_due_claims_one_bounded_batch(store_target: str) -> None:
    rt = _runtime(store_target, ManualClock(T0), ingestion={"temporal_review_batch_size": 5})
    with rt:
        for i in range(12):
            rt.store.write_record(make_record(review_at=T0 - timedelta(minutes=i)))
        assert [rt.operations.review_due() for _ in range(4)] == [5, 5, 2, 0]


# -- reembed ----------------------------------------------------------------------------------------------


def _vectors(world: World) -> dict[str, tuple[str, str]]:
    return {r: (m, v) for r, m, v in rows(world.rt.store, "SELECT record_id, model, version FROM embeddings")}


def test_reembed_writes_the_new_version_and_drops_the_old(world: World) -> None:
    ids = [_written(world)]
    for i in range(4):
        written = world.write(content=f"Aditya works on project number {i} this quarter.",
                              attribute=f"project_{i}", entities=(("person", "Aditya", "about"),))
        assert written.record_id
        ids.append(written.record_id)
    blank = _insert(world, content="")  # an erased tombstone whose vector was left behind
    world.rt.store.put_embedding(blank, "fake", "fake-1", np.ones(384, dtype=np.float32) / np.sqrt(384))
    seen: list[tuple[int, int]] = []

    result = _ops(world).reembed("fake", "2", progress=lambda done, total: seen.append((done, total)))
    assert result.embedded == 5 and result.dropped == 1
    assert _vectors(world) == {rid: ("fake", "2") for rid in ids}
    assert seen[0] == (0, 5) and seen[-1] == (5, 5)
    events = world.events("store.reembedded")
    assert len(events) == 1 and events[0]["payload"]["embedded"] == 5
    assert events[0]["payload"]["before"] == [{"model": "fake", "version": "fake-1", "vectors": 6}]


def test_reembed_accepts_a_version_bump_and_records_the_new_family(world: World) -> None:
    _written(world)
    world.rt.retriever.search(world.p, SearchRequest(queries=["answer style"]))  # logged under fake-1
    assert world.rt.store.embedding_family() == EmbeddingFamily("fake", "fake-1", 384)

    # Same model, new version: the floors still fit, so no recalibration is asked for.
    result = _ops(world).reembed("fake", "2")
    assert result.embedded == 1 and set(_vectors(world).values()) == {("fake", "2")}
    assert world.rt.store.embedding_family() == EmbeddingFamily("fake", "2", 384)
    path = world.target
    world.rt.close()
    with pytest.raises(EmbeddingMismatchError, match="holds fake version 2 .* asks for fake version fake-1"):
        _runtime(path, ManualClock(T0))  # still configured for the old version
    with _runtime(path, ManualClock(T0), embedder=FakeEmbedder(version="2")) as bumped:
        assert bumped.refresh_index() == "reload" and len(bumped.index) == 1


def test_reembed_to_another_model_refuses_while_the_gate_is_not_fitted_for_it(world: World) -> None:
    _written(world)
    world.rt.retriever.search(world.p, SearchRequest(queries=["answer style"]))
    ops = _ops(world)
    before = world.counts()
    with pytest.raises(OperationError, match="fit retrieval.gate for the new model") as refused:
        ops.reembed("fake-b", "1")
    message = str(refused.value)
    assert ("`python -m benchmarks.fit_gate --config <a config with embedding.model fake-b, version 1, "
            "dims 384>`") in message
    assert "set retrieval.gate to the values it reports" in message
    assert not world.events("store.reembedded") and world.counts() == before
    assert world.rt.store.embedding_family() == EmbeddingFamily("fake", "fake-1", 384)
    ops.reembed("fake", "fake-1")  # the version the search ran under: nothing to recalibrate
    path = world.target
    world.rt.close()
    # A gate fitted anew (other values), opened the way `retold reembed` opens a store that
    # still holds the old family.
    refitted = {**TEST_GATE, "bias": -7.5}
    recalibrated = _runtime(path, ManualClock(T0), retrieval={"gate": refitted},
                            embedder=FakeEmbedder(name="fake-b", version="1"), allow_embedding_mismatch=True)
    with recalibrated:
        assert recalibrated.operations.reembed("fake-b", "1").embedded == 1
        assert recalibrated.store.embedding_family() == EmbeddingFamily("fake-b", "1", 384)


def test_reembed_to_the_model_the_gate_was_fitted_for_passes_with_equal_values(world: World) -> None:
    _written(world)
    world.rt.retriever.search(world.p, SearchRequest(queries=["answer style"]))
    path = world.target
    world.rt.close()
    # A fit may find the old values best for the new model too: the config saying so is
    # what lets the switch through, not a change of numbers.
    same_gate = {**TEST_GATE, "calibrated_for": "fake-b"}
    with _runtime(path, ManualClock(T0), retrieval={"gate": same_gate},
                  embedder=FakeEmbedder(name="fake-b", version="1"), allow_embedding_mismatch=True) as rt:
        assert rt.operations.reembed("fake-b", "1").embedded == 1
        assert rt.store.embedding_family() == EmbeddingFamily("fake-b", "1", 384)


# -- snapshots -----------------------------------------------------------------------------------------------


@pytest.mark.sqlite_only("snapshots are SQLite files; a PostgreSQL store refuses them (pg_dump)")
def test_snapshot_round_trip_restores_every_table(world: World, tmp_path: Path) -> None:
    rid = _written(world)
    ops = _ops(world)
    saved = ops.snapshot_save(tmp_path / "snap.sqlite")
    assert saved.records == 1
    before = world.counts()
    ops.erase_record(rid, "test")
    _insert(world)
    loaded = ops.snapshot_load(tmp_path / "snap.sqlite")
    assert loaded.records == 1
    assert world.counts() == before
    assert world.record(rid).content == "Aditya prefers short technical answers."
    with pytest.raises(OperationError, match="already exists"):
        ops.snapshot_save(tmp_path / "snap.sqlite")
    (tmp_path / "notes.txt").write_text("hello " * 20)
    with pytest.raises(OperationError, match="not a SQLite database"):
        ops.snapshot_load(tmp_path / "notes.txt")
    sqlite3.connect(tmp_path / "other.sqlite").execute("CREATE TABLE t(x)").connection.close()
    with pytest.raises(OperationError, match="not a Retold store"):
        ops.snapshot_load(tmp_path / "other.sqlite")
    with pytest.raises(OperationError, match="no snapshot file"):
        ops.snapshot_load(tmp_path / "missing.sqlite")


# -- migrate -------------------------------------------------------------------------------------------------


def test_migrate_expire_unmapped_retires_legacy_rows(store_target: str, clock: ManualClock) -> None:
    store = open_store(store_target, clock=clock)
    legacy, fine = make_record(), make_record()
    store.write_record(legacy)
    store.write_record(fine)
    execute(store, "INSERT INTO migration_issues VALUES (2, ?, 'zero about links')", legacy.id)
    store.close()
    with pytest.raises(MigrationIssuesError):
        open_store(store_target)
    rt = build_runtime(load_config(overrides={"store": store_keys(store_target),
                                              "embedding": {"model": "fake"}}),
                       clock=clock, allow_migration_issues=True)
    with rt:
        ops = rt.operations
        listed = ops.migrate()
        assert listed.unresolved == 1 and [i.record_id for i in listed.issues] == [legacy.id]
        acknowledged = ops.migrate(allow_unmapped=True)
        assert acknowledged.acknowledged and acknowledged.unresolved == 1
        done = ops.migrate(expire_unmapped=True, actor="ops")
        assert done.expired == [legacy.id] and done.unresolved == 0
        assert rt.store.get_record(legacy.id).status == "expired"  # type: ignore[union-attr]
        assert rt.store.get_record(fine.id).status == "confirmed"  # type: ignore[union-attr]
        assert [e["record_id"] for e in rt.store.events(kind="record.status")] == [legacy.id]
    open_store(store_target).close()  # opens again without allow_migration_issues


# -- reads -------------------------------------------------------------------------------------------


def test_get_returns_lineage_conflicts_and_events_and_dump_lists_active(world: World) -> None:
    old = _insert(world, status="superseded", content="Old answer style.")
    new = _insert(world, supersedes_id=old, version=2, content="New answer style.")
    other = _insert(world, scope=Scope("user", "someone-else"))
    world.rt.store.add_conflict(new, other)
    world.rt.store.append_event("record.created", "tester", {"n": 1}, record_id=new)

    detail = _ops(world).get(old)
    assert [r.id for r in detail.lineage] == [old, new]
    detail = _ops(world).get(new)
    assert [r.id for r in detail.lineage] == [old, new] and detail.conflicts == [other]
    assert [e["kind"] for e in detail.events] == ["record.created"]
    assert [r.id for r in _ops(world).dump(ADITYA)] == [new]
    with pytest.raises(OperationError, match="no record"):
        _ops(world).get("missing")


def test_search_returns_the_logged_row(world: World) -> None:
    _written(world)
    report = _ops(world).search("research-agent", "aditya", "short technical answers")
    assert report.log["id"] == report.outcome.response.search_id
    assert report.outcome.response.results
    with pytest.raises(OperationError):
        _ops(world).search("research-agent", "a/b", "x")
    with pytest.raises(OperationError, match="empty"):
        _ops(world).search("research-agent", "aditya", "  ")
