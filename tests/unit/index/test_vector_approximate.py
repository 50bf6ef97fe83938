"""VectorIndex's approximate path: an HNSW graph for large eligible sets, exact otherwise.

A small ``min_rows`` puts a few thousand rows over the threshold, so the graph is built
here in well under a second. ``approximate_searches`` counts the searches the graph served.
"""

from __future__ import annotations

import sys
import threading
import time

import numpy as np
import pytest

from retold.config import ApproximateConfig
from retold.index.approximate import graph_available
from retold.index.vector import VectorIndex
from retold.store import Store
from retold.testing import make_record

# Every test but the one about a missing faiss needs the scale extra, which make test installs.
needs_faiss = pytest.mark.skipif(not graph_available(), reason="faiss-cpu (the scale extra) is not installed")

DIMS, ROWS, MIN_ROWS = 32, 3000, 2000
MODEL, VERSION = "test-model", "1"
CONFIG = ApproximateConfig(min_rows=MIN_ROWS, m=16, ef_construction=40, ef_search=64)


def clustered(n: int, seed: int = 0) -> np.ndarray:
    """Unit vectors around 40 centres, so neighbours are close as real embeddings are."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((40, DIMS))
    vecs = centres[rng.integers(0, 40, n)] + 0.4 * rng.standard_normal((n, DIMS))
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    return vecs.astype(np.float32)


def near(vec: np.ndarray, seed: int) -> np.ndarray:
    """A near-duplicate of ``vec``: the wording of a query that restates a memory."""
    out = vec + 0.05 * np.random.default_rng(seed).standard_normal(DIMS).astype(np.float32)
    return out / np.linalg.norm(out)


def filled(config: ApproximateConfig = CONFIG) -> tuple[VectorIndex, list[str], np.ndarray]:
    index = VectorIndex(MODEL, VERSION, DIMS, approximate=config)
    vecs = clustered(ROWS)
    ids = [f"r{i}" for i in range(ROWS)]
    for rid, vec in zip(ids, vecs, strict=True):
        index.upsert(rid, vec)
    return index, ids, vecs


@pytest.fixture
def built() -> tuple[VectorIndex, list[str], np.ndarray]:
    index, ids, vecs = filled()
    assert index.wait_for_graph(timeout=60)
    return index, ids, vecs


@needs_faiss
def test_large_set_uses_the_graph_and_finds_what_exact_search_finds(built) -> None:
    index, ids, vecs = built
    exact, _, _ = filled(ApproximateConfig(enabled=False))
    eligible = set(ids)
    for i in range(0, ROWS, 150):
        query = np.stack([near(vecs[i], i), near(vecs[i + 1], i)])  # two query columns
        hits = index.search(query, eligible, 5)
        assert hits[0][0] in {ids[i], ids[i + 1]}
        # scores are exact cosines, equal to the exact path's for the same records
        expected = exact.search(query, eligible, 5)
        assert [rid for rid, _ in hits] == [rid for rid, _ in expected]
        assert [score for _, score in hits] == pytest.approx([score for _, score in expected])
    assert index.approximate_searches == ROWS // 150
    assert exact.approximate_searches == 0


@needs_faiss
def test_score_callable_sees_every_query_column(built) -> None:
    index, ids, vecs = built
    query = np.stack([vecs[10], vecs[20]])
    hits = index.search(query, set(ids), 3, score=lambda products: products[:, 1])
    assert hits[0] == (ids[20], pytest.approx(1.0, abs=1e-5))


@needs_faiss
def test_never_returns_an_ineligible_or_removed_record(built) -> None:
    index, ids, vecs = built
    eligible = set(ids[:2500])
    removed = ids[:100]
    for rid in removed:
        index.remove(rid)
    allowed = eligible - set(removed)
    for i in list(range(0, 100, 10)) + list(range(2500, ROWS, 50)):  # removed, then ineligible
        hits = index.search(near(vecs[i], i), eligible, 10)
        assert hits and {rid for rid, _ in hits} <= allowed
        assert ids[i] not in {rid for rid, _ in hits}
    assert index.approximate_searches == 20


@needs_faiss
def test_sees_records_written_after_the_graph_was_built(built) -> None:
    index, ids, vecs = built
    fresh = clustered(2, seed=7)
    index.upsert("new", fresh[0])  # a row the graph never held
    index.upsert(ids[5], fresh[1])  # a row the graph holds with its old vector
    eligible = set(ids) | {"new"}
    assert index.search(near(fresh[0], 1), eligible, 3)[0][0] == "new"
    assert index.search(near(fresh[1], 2), eligible, 3)[0][0] == ids[5]
    # the old vector no longer finds the overwritten record at its old cosine
    old = index.search(vecs[5], eligible, 3)
    assert all(score < 0.999 for rid, score in old if rid == ids[5])
    assert index.approximate_searches == 3


@needs_faiss
def test_many_writes_rebuild_the_graph(built) -> None:
    index, ids, vecs = built
    moved = clustered(400, seed=9)  # over a tenth of the graph's rows
    for rid, vec in zip(ids[:400], moved, strict=True):
        index.upsert(rid, vec)
    assert index.approximate_stale_rows == 400
    assert index.search(moved[3], set(ids), 1)[0][0] == ids[3]
    assert index.wait_for_graph(timeout=60)
    assert index.approximate_stale_rows == 0
    assert index.search(near(moved[3], 3), set(ids), 1)[0][0] == ids[3]


@needs_faiss
def test_small_set_or_small_index_stays_exact(built) -> None:
    index, ids, vecs = built
    hits = index.search(vecs[42], set(ids[:MIN_ROWS - 1]), 3)
    assert hits[0] == (ids[42], pytest.approx(1.0, abs=1e-5))
    assert index.approximate_searches == 0
    small = VectorIndex(MODEL, VERSION, DIMS, approximate=CONFIG)
    for rid, vec in zip(ids[:MIN_ROWS - 1], vecs[:MIN_ROWS - 1], strict=True):
        small.upsert(rid, vec)
    assert not small.wait_for_graph(timeout=5)
    assert small.search(vecs[42], set(ids), 1)[0][0] == ids[42]
    assert small.approximate_searches == 0


def test_without_faiss_every_search_is_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "faiss", None)  # what an install without the extra sees
    index, ids, vecs = filled()
    assert not index.wait_for_graph(timeout=5)
    assert index.search(vecs[7], set(ids), 1)[0] == (ids[7], pytest.approx(1.0, abs=1e-5))
    assert index.approximate_searches == 0


@needs_faiss
def test_load_builds_the_graph_in_the_background(store: Store) -> None:
    vecs = clustered(MIN_ROWS + 50)
    ids = []
    with store.atomic():
        for vec in vecs:
            rec = make_record()
            store.write_record(rec)
            store.put_embedding(rec.id, MODEL, VERSION, vec)
            ids.append(rec.id)
    index = VectorIndex(MODEL, VERSION, DIMS, approximate=CONFIG)
    index.load(store)
    deadline = time.monotonic() + 60
    while not index.approximate_ready and time.monotonic() < deadline:  # no search asked
        time.sleep(0.05)
    assert index.approximate_ready
    assert index.search(near(vecs[9], 9), set(ids), 1)[0][0] == ids[9]
    assert index.approximate_searches == 1


@needs_faiss
def test_the_graph_counts_in_the_bytes_a_process_budget_sees() -> None:
    # A tenant's index with a graph holds the rows twice (the matrix and the graph's copy)
    # plus the neighbour lists; a budget that counted the matrix alone would keep too many.
    index, _ids, _vecs = filled()
    without = filled(ApproximateConfig(enabled=False))[0].nbytes
    assert index.wait_for_graph(timeout=60)
    assert index.nbytes >= without + ROWS * DIMS * 4


@needs_faiss
def test_a_set_admitting_few_of_the_graphs_rows_is_scored_exactly() -> None:
    # Over min_rows, but a narrow slice of the graph: a filtered walk through the graph
    # would pass mostly refused nodes and miss neighbours, so the exact path answers.
    index, ids, vecs = filled(ApproximateConfig(min_rows=MIN_ROWS, min_share=0.9, m=16,
                                                ef_construction=40, ef_search=64))
    assert index.wait_for_graph(timeout=60)
    exact, _, _ = filled(ApproximateConfig(enabled=False))
    narrow = set(ids[:2500])  # 2,500 of 3,000 rows: 83% < 90%
    for i in range(0, 2500, 250):
        assert index.search(vecs[i], narrow, 5) == exact.search(vecs[i], narrow, 5)
    assert index.approximate_searches == 0
    index.search(vecs[0], set(ids), 5)  # every row: 100% >= 90%
    assert index.approximate_searches == 1


def big_index() -> tuple[VectorIndex, np.ndarray]:
    """30,000 rows of 64 dims with a slow graph setting: a build that takes seconds."""
    rng = np.random.default_rng(0)
    rows = rng.standard_normal((30000, 64)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    index = VectorIndex("m", "1", 64, approximate=ApproximateConfig(min_rows=2000, m=32, ef_construction=200))
    for i, row in enumerate(rows):
        index.upsert(f"r{i}", row)
    return index, rows


@needs_faiss
def test_close_stops_a_build_and_search_stays_exact() -> None:
    index, rows = big_index()
    eligible = {f"r{i}" for i in range(rows.shape[0])}
    index.search(rows[0], eligible, 5)  # starts the build
    started = time.perf_counter()
    index.close()
    assert time.perf_counter() - started < 5  # one batch of rows, not the whole graph
    assert not any(t.name == "retold-vector-graph" for t in threading.enumerate())
    assert not index.approximate_ready
    assert index.wait_for_graph(timeout=1) is False  # a closed index starts no other build
    hits = index.search(rows[3], eligible, 5)
    assert hits[0][0] == "r3" and index.approximate_searches == 0
