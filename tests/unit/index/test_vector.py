"""VectorIndex over a real store file: load, search restricted to eligible, refresh."""

from __future__ import annotations

import multiprocessing

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retold.index.vector import VectorIndex
from retold.models import RECORD_STATUSES, Scope
from retold.store import EligibleSet, Store, open_store
from retold.testing import make_record

DIMS = 16
MODEL, VERSION = "test-model", "1"


def unit(seed: int) -> np.ndarray:
    vec = np.random.default_rng(seed).standard_normal(DIMS).astype(np.float32)
    return vec / np.linalg.norm(vec)


def write(store: Store, seed: int, **fields: object) -> tuple[str, np.ndarray, int]:
    """One record plus its embedding in one transaction, as the ingestor writes it."""
    rec = make_record(**fields)
    vec = unit(seed)
    with store.atomic():
        store.write_record(rec)
        version = store.put_embedding(rec.id, MODEL, VERSION, vec)
    return rec.id, vec, version


@pytest.fixture
def index() -> VectorIndex:
    return VectorIndex(MODEL, VERSION, DIMS)


def test_load_takes_only_compatible_live_rows(store: Store, index: VectorIndex) -> None:
    keep, _, _ = write(store, 1)
    other = make_record()
    store.write_record(other)
    store.put_embedding(other.id, MODEL, "2", unit(2))  # another embedding version
    gone, _, _ = write(store, 3)
    store.transition(gone, "deleted", from_statuses=RECORD_STATUSES)
    index.load(store)
    assert index.ids == [keep]
    assert index.loaded_version == store.records_version()


def test_search_ranks_by_cosine_and_takes_the_best_of_several_queries(
    store: Store, index: VectorIndex
) -> None:
    written = [write(store, seed) for seed in range(20)]
    index.load(store)
    eligible = {rid for rid, _, _ in written}
    target_id, target_vec, _ = written[7]
    hits = index.search(target_vec, eligible, 3)
    assert hits[0][0] == target_id
    assert hits[0][1] == pytest.approx(1.0, abs=1e-5)
    assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)
    second_id, second_vec, _ = written[12]
    both = dict(index.search(np.stack([target_vec, second_vec]), eligible, 2))
    assert set(both) == {target_id, second_id}


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 300),
    picks=st.sets(st.integers(0, 299), max_size=300),
    dead=st.sets(st.integers(0, 299), max_size=40),
    k=st.integers(1, 40),
    seed=st.integers(0, 10_000),
)
def test_search_never_returns_ineligible_or_dead_rows_and_matches_brute_force(
    n: int, picks: set[int], dead: set[int], k: int, seed: int
) -> None:
    index = VectorIndex(MODEL, VERSION, DIMS)
    vectors = {f"r{i}": unit(seed * 1000 + i) for i in range(n)}
    for rid, vec in vectors.items():
        index.upsert(rid, vec)
    for i in dead:
        index.remove(f"r{i}")
    eligible = {f"r{i}" for i in picks} | {"not-indexed"}
    query = unit(seed + 7)
    hits = index.search(query, eligible, k)
    allowed = {rid for rid in eligible if rid in vectors and int(rid[1:]) not in dead}
    assert {rid for rid, _ in hits} <= allowed
    expected = sorted(allowed, key=lambda rid: -float(vectors[rid] @ query))[:k]
    assert [rid for rid, _ in hits] == expected


def test_matrix_grows_by_doubling_and_keeps_rows(index: VectorIndex) -> None:
    for i in range(2500):
        index.upsert(f"r{i}", unit(i))
    assert index._matrix.shape[0] == 4096  # 1024 -> 2048 -> 4096
    assert index.vector_for("r3") == pytest.approx(unit(3))
    assert index.cosine("r3", "r3") == pytest.approx(1.0, abs=1e-5)
    assert index.search(unit(2400), {"r2400", "r5"}, 1)[0][0] == "r2400"


def test_removed_rows_are_hidden_from_every_read(index: VectorIndex) -> None:
    index.upsert("a", unit(1))
    index.upsert("b", unit(2))
    index.remove("a")
    assert index.search(unit(1), {"a", "b"}, 5) == [("b", pytest.approx(float(unit(2) @ unit(1))))]
    assert index.vector_for("a") is None
    assert np.isnan(index.cosine("a", "b"))
    assert len(index) == 1


def test_refresh_after_own_write_reports_current(store: Store, index: VectorIndex) -> None:
    index.load(store)
    rid, vec, version = write(store, 5)
    index.upsert(rid, vec, version)  # the writer updates its own index after commit
    assert index.refresh(store, 512) == "current"
    assert index.loaded_version == store.records_version()
    assert index.search(vec, {rid}, 1)[0][0] == rid


def test_refresh_applies_a_second_store_handles_writes_as_delta(
    store: Store, store_target: str, index: VectorIndex
) -> None:
    keep, keep_vec, _ = write(store, 1)
    doomed, doomed_vec, _ = write(store, 2)
    index.load(store)
    other = open_store(store_target)
    new_id_, new_vec, _ = write(other, 3)
    other.transition(doomed, "deleted", from_statuses=RECORD_STATUSES)
    other.close()
    assert index.refresh(store, 512) == "delta"
    eligible = {keep, doomed, new_id_}
    assert index.search(new_vec, eligible, 1)[0][0] == new_id_
    assert doomed not in {rid for rid, _ in index.search(doomed_vec, eligible, 3)}
    assert index.refresh(store, 512) == "current"


def test_a_change_made_here_to_a_record_written_elsewhere_still_loads_its_row(
    store: Store, store_target: str, index: VectorIndex, caplog: pytest.LogCaptureFixture
) -> None:
    index.load(store)
    other = open_store(store_target)
    theirs, their_vec, _ = write(other, 7, status="provisional")
    other.close()
    # This process confirms the record before its index has seen it: the confirm's version
    # is this process's own, but the row it describes was never loaded here.
    change = store.transition(theirs, "confirmed", from_statuses=("provisional",))
    assert change is not None
    index.acknowledge(theirs, change.index_version)
    assert index.refresh(store, 512) == "delta"
    assert index.search(their_vec, {theirs}, 1)[0][0] == theirs
    assert index.refresh(store, 512) == "current"


def test_a_row_counted_as_applied_but_missing_is_loaded_and_said_once(
    store: Store, store_target: str, index: VectorIndex, caplog: pytest.LogCaptureFixture
) -> None:
    index.load(store)
    other = open_store(store_target)
    first, first_vec, v1 = write(other, 8)
    second, second_vec, v2 = write(other, 9)
    other.close()
    index._note(first, v1)  # an index out of step, however it came to be
    index._note(second, v2)
    with caplog.at_level("WARNING", logger="retold.index.vector"):
        assert index.refresh(store, 512) == "delta"
    assert [r.message for r in caplog.records].count(
        f"vector index: record {first} was counted as applied but its row was missing; "
        "loading it from the store") == 1
    assert len(caplog.records) == 1  # said once, not once per row
    assert index.search(first_vec, {first}, 1)[0][0] == first
    assert index.search(second_vec, {second}, 1)[0][0] == second


def test_reembedding_under_another_model_drops_the_row_on_refresh(
    store: Store, index: VectorIndex
) -> None:
    rid, vec, _ = write(store, 1)
    index.load(store)
    store.put_embedding(rid, "another-model", "1", unit(9))
    assert index.refresh(store, 512) == "delta"
    assert index.search(vec, {rid}, 1) == []


def test_refresh_reloads_past_the_incremental_limit(
    store: Store, store_target: str, index: VectorIndex
) -> None:
    index.load(store)
    other = open_store(store_target)
    written = [write(other, seed) for seed in range(6)]
    other.close()
    assert index.refresh(store, 5) == "reload"
    assert set(index.ids) == {rid for rid, _, _ in written}


def test_local_burst_does_not_force_a_reload(store: Store, index: VectorIndex) -> None:
    index.load(store)
    for seed in range(10):
        rid, vec, version = write(store, seed)
        index.upsert(rid, vec, version)
    assert index.refresh(store, 3) == "current"


def _other_process_writes(path: str) -> None:
    store = open_store(path)
    write(store, 42)
    store.close()


def test_refresh_sees_a_real_second_process_as_delta(
    store: Store, store_target: str, index: VectorIndex
) -> None:
    write(store, 1)
    index.load(store)
    proc = multiprocessing.get_context("spawn").Process(target=_other_process_writes, args=(store_target,))
    proc.start()
    proc.join(60)
    assert proc.exitcode == 0
    assert index.refresh(store, 512) == "delta"
    eligible = store.eligible_ids([make_record().scope])
    assert index.search(unit(42), eligible, 1)[0][1] == pytest.approx(1.0, abs=1e-5)


def test_eligible_set_from_the_store_finds_rows_upserted_without_their_seq(
    store: Store, index: VectorIndex
) -> None:
    loaded, loaded_vec, _ = write(store, 1)
    index.load(store)
    local, local_vec, version = write(store, 2)
    index.upsert(local, local_vec, version)  # no seq: the search must still find it
    eligible = store.eligible_ids([make_record().scope])
    assert {rid for rid, _ in index.search(local_vec, eligible, 5)} == {loaded, local}
    assert index.search(local_vec, eligible, 1)[0][0] == local
    assert index.refresh(store, 512) == "current"  # and refresh learns its seq
    assert index.search(loaded_vec, eligible, 1)[0][0] == loaded


def test_a_repeated_eligible_set_sees_every_change_made_between_searches(
    store: Store, index: VectorIndex
) -> None:
    # Few eligible rows among many, so search gathers and keeps the eligible rows.
    mine = [write(store, seed) for seed in range(3)]
    for seed in range(12):
        write(store, 100 + seed, scope=Scope("user", "someone-else"))
    index.load(store)
    eligible = store.eligible_ids([Scope("user", "aditya")])
    query = unit(999)
    before = index.search(query, eligible, 3)
    assert {rid for rid, _ in before} == {rid for rid, _, _ in mine}
    moved = mine[1][0]
    index.upsert(moved, query)  # the same eligible set, one of its rows changed
    best_id, best_cos = index.search(query, eligible, 1)[0]
    assert (best_id, round(best_cos, 5)) == (moved, 1.0)
    index.remove(moved)
    after = index.search(query, eligible, 3)
    assert [rid for rid, _ in after] == [rid for rid, _ in before if rid != moved]
    assert [cos for _, cos in after] == pytest.approx([cos for rid, cos in before if rid != moved])


def test_a_set_searched_once_and_again_ranks_the_same_as_brute_force() -> None:
    """More eligible rows than one scoring block, a tenth of the index: the first search
    scores them in place, block by block, and the second from the rows it copied out; both
    answer exactly what scoring every eligible row at once answers."""
    n, eligible_count = 30_000, 3_000
    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((n, DIMS)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    index = VectorIndex(MODEL, VERSION, DIMS)
    for i in range(n):
        index.upsert(f"r{i}", vectors[i], seq=i + 1)
    picked = np.sort(rng.choice(n, eligible_count, replace=False))
    eligible = EligibleSet([f"r{i}" for i in picked], picked + 1)
    queries = vectors[rng.choice(n, 2)] + 0.1 * rng.standard_normal((2, DIMS)).astype(np.float32)
    best = (vectors[picked] @ queries.T).max(axis=1)
    expected = [f"r{picked[i]}" for i in np.argsort(-best, kind="stable")[:20]]
    first = index.search(queries, eligible, 20)
    again = index.search(queries, eligible, 20)
    assert [rid for rid, _ in first] == expected == [rid for rid, _ in again]
    assert [cos for _, cos in first] == pytest.approx([cos for _, cos in again], abs=1e-6)
    assert [cos for _, cos in first] == pytest.approx(sorted(best, reverse=True)[:20], abs=1e-5)


def test_a_load_past_one_batch_holds_every_row_and_grows_after(store: Store, index: VectorIndex) -> None:
    # More rows than one batch of the cold load: each row must land in its own place, and
    # the index must keep growing by writes after taking the store's matrix as its own.
    written = []
    with store.atomic():
        for seed in range(5000):
            rec = make_record()
            store.write_record(rec)
            written.append((rec.id, unit(seed)))
        store.put_embeddings(written, MODEL, VERSION)
    index.load(store)
    assert len(index) == 5000
    rows, present = index.rows([rid for rid, _ in written])
    assert present.all()
    assert np.allclose(rows, np.stack([vec for _, vec in written]), atol=1e-6)
    for seed in range(5000, 8300):  # past the loaded capacity (8,192 rows)
        index.upsert(f"new{seed}", unit(seed))
    assert index.search(unit(4321), {written[4321][0], "new8000"}, 1)[0][0] == written[4321][0]
    assert index.search(unit(8000), {written[10][0], "new8000"}, 1)[0][0] == "new8000"
