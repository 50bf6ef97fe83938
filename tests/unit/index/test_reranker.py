"""The rerank pass with FakeReranker: ordering, timeout, failure and the score floor."""

from __future__ import annotations

import threading
import time
from dataclasses import asdict

import pytest

from retold.config import RerankerConfig
from retold.errors import ConfigError, RetoldError
from retold.index.reranker import (
    BgeReranker,
    FakeReranker,
    NoReranker,
    RerankError,
    apply_reranker_floor,
    rerank_with_timeout,
    reranker_from_config,
)
from retold.models import Candidate

QUERIES = ["explanation style", "how should answers read"]
DOCS = {
    "r1": "Aditya likes tea.",
    "r2": "Aditya prefers concise technical explanations.",
    "r3": "Answers should be short.",
    "r4": "The office is in Pune.",
}


def _shortlist() -> list[Candidate]:
    """Four candidates in fused order r1..r4."""
    return [
        Candidate(record_id=rid, fused_score=1.0 / rank, fused_rank=rank, score=1.0 / rank)
        for rank, rid in enumerate(DOCS, start=1)
    ]


def _rerank_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "retold-rerank"]


def _fake(delay_s: float = 0.0, fail: Exception | None = None) -> FakeReranker:
    # r2 wins on the first query, r3 on the second; r1 and r4 fall to the default.
    scores = {
        (QUERIES[0], DOCS["r2"]): 0.9,
        (QUERIES[1], DOCS["r2"]): 0.4,
        (QUERIES[0], DOCS["r3"]): 0.1,
        (QUERIES[1], DOCS["r3"]): 0.7,
        (QUERIES[1], DOCS["r4"]): 0.002,
    }
    return FakeReranker(scores, default=0.001, delay_s=delay_s, fail=fail)


def test_orders_by_best_score_across_queries_and_logs_ranks() -> None:
    fake = _fake()
    originals = _shortlist()
    out = rerank_with_timeout(fake, originals, DOCS, QUERIES, timeout_ms=5000, on_failure="fallback")
    assert out.status == "applied" and out.error is None
    assert [c.record_id for c in out.candidates] == ["r2", "r3", "r4", "r1"]
    assert [c.rank_after_rerank for c in out.candidates] == [1, 2, 3, 4]
    assert [c.rerank_score for c in out.candidates] == [0.9, 0.7, 0.002, 0.001]
    # (record_id, rank_before, rank_after, score, winning_query), in rank_after order
    assert out.logged == [
        ("r2", 2, 1, 0.9, QUERIES[0]),
        ("r3", 3, 2, 0.7, QUERIES[1]),
        ("r4", 4, 3, 0.002, QUERIES[1]),
        ("r1", 1, 4, 0.001, QUERIES[0]),  # a tie across queries goes to the first query
    ]
    # The outcome holds copies; the caller's candidates are not written to.
    assert all(c.rerank_score is None and c.rank_after_rerank is None for c in originals)
    assert not any(o is c for o in originals for c in out.candidates)
    by_id = {c.record_id: c for c in out.candidates}
    for orig in originals:  # everything but the rerank fields is carried over
        copy = asdict(by_id[orig.record_id])
        copy.update(rerank_score=None, rank_after_rerank=None)
        assert copy == asdict(orig)


def test_every_query_record_pair_goes_in_one_batch() -> None:
    fake = _fake()
    rerank_with_timeout(fake, _shortlist(), DOCS, QUERIES, timeout_ms=5000, on_failure="fallback")
    assert fake.batches == [len(QUERIES) * len(DOCS)]
    assert sorted(fake.calls) == sorted((q, d) for q in QUERIES for d in DOCS.values())


def test_equal_scores_keep_the_fused_order() -> None:
    fake = FakeReranker(default=0.5)
    out = rerank_with_timeout(fake, _shortlist(), DOCS, ["q"], timeout_ms=5000, on_failure="fallback")
    assert [c.record_id for c in out.candidates] == ["r1", "r2", "r3", "r4"]


def test_an_empty_shortlist_is_applied_without_a_call() -> None:
    fake = _fake()
    out = rerank_with_timeout(fake, [], DOCS, QUERIES, timeout_ms=5000, on_failure="fail")
    assert (out.status, out.candidates, out.logged) == ("applied", [], [])
    assert fake.batches == []


def test_no_queries_is_a_caller_error() -> None:
    with pytest.raises(ValueError, match="query"):
        rerank_with_timeout(_fake(), _shortlist(), DOCS, [], timeout_ms=5000, on_failure="fallback")


def test_timeout_with_fallback_serves_the_originals_untouched() -> None:
    originals = _shortlist()
    fake = _fake(delay_s=3.0)
    started = time.monotonic()
    out = rerank_with_timeout(fake, originals, DOCS, QUERIES, timeout_ms=100, on_failure="fallback")
    elapsed = time.monotonic() - started
    assert elapsed < 2.0  # abandoned at the timeout, not after the 3 s the fake takes
    assert out.status == "timeout"
    assert out.candidates is originals
    assert [c.record_id for c in out.candidates] == ["r1", "r2", "r3", "r4"]
    assert out.logged is None
    assert out.error is not None and "100 ms" in out.error and "fake" in out.error


def test_an_abandoned_worker_never_writes_into_the_callers_candidates() -> None:
    originals = _shortlist()
    fake = _fake(delay_s=0.4)
    out = rerank_with_timeout(fake, originals, DOCS, QUERIES, timeout_ms=20, on_failure="fallback")
    assert out.status == "timeout"
    for thread in _rerank_threads():  # let the late worker finish its scoring and ranking
        thread.join(timeout=10)
    assert not _rerank_threads()
    assert fake.batches == [len(QUERIES) * len(DOCS)]  # it did score, after the timeout
    assert all(c.rerank_score is None and c.rank_after_rerank is None for c in originals)
    assert [c.record_id for c in out.candidates] == ["r1", "r2", "r3", "r4"]


def test_failure_with_fallback_reports_the_error() -> None:
    originals = _shortlist()
    fake = _fake(fail=RuntimeError("CUDA out of memory\nsecond line"))
    out = rerank_with_timeout(fake, originals, DOCS, QUERIES, timeout_ms=5000, on_failure="fallback")
    assert out.status == "failed"
    assert out.candidates is originals and out.logged is None
    assert out.error == "reranker fake failed: RuntimeError: CUDA out of memory"
    assert all(c.rerank_score is None for c in originals)


def test_a_missing_document_is_a_failure() -> None:
    docs = {k: v for k, v in DOCS.items() if k != "r3"}
    out = rerank_with_timeout(_fake(), _shortlist(), docs, QUERIES, timeout_ms=5000, on_failure="fallback")
    assert out.status == "failed" and out.error is not None and "KeyError" in out.error


def test_a_nan_score_is_a_failure() -> None:
    fake = FakeReranker(default=float("nan"))
    out = rerank_with_timeout(fake, _shortlist(), DOCS, QUERIES, timeout_ms=5000, on_failure="fallback")
    assert out.status == "failed" and out.error is not None and "non-finite" in out.error


def test_on_failure_fail_raises_rerank_error() -> None:
    boom = RuntimeError("boom")
    with pytest.raises(RerankError, match="RuntimeError: boom") as info:
        rerank_with_timeout(_fake(fail=boom), _shortlist(), DOCS, QUERIES, timeout_ms=5000, on_failure="fail")
    assert info.value.__cause__ is boom
    assert isinstance(info.value, RetoldError)


def test_on_failure_fail_raises_on_timeout() -> None:
    originals = _shortlist()
    with pytest.raises(RerankError, match="did not finish within 50 ms"):
        rerank_with_timeout(_fake(delay_s=2.0), originals, DOCS, QUERIES, timeout_ms=50, on_failure="fail")
    assert all(c.rerank_score is None for c in originals)


def test_floor_splits_kept_and_dropped_with_a_reason() -> None:
    out = rerank_with_timeout(_fake(), _shortlist(), DOCS, QUERIES, timeout_ms=5000, on_failure="fallback")
    kept, dropped = apply_reranker_floor(out.candidates, 0.01)
    assert [c.record_id for c in kept] == ["r2", "r3"]
    assert dropped == [("r4", "rerank 0.002 < floor 0.01", 0.002), ("r1", "rerank 0.001 < floor 0.01", 0.001)]
    at_floor = Candidate(record_id="r9", rerank_score=0.01)
    assert apply_reranker_floor([at_floor], 0.01) == ([at_floor], [])  # the floor itself passes


def test_floor_reason_never_rounds_a_dropped_score_up_to_the_floor() -> None:
    below = Candidate(record_id="r9", rerank_score=0.0099999)
    kept, dropped = apply_reranker_floor([below], 0.01)
    assert kept == []
    assert dropped == [("r9", "rerank 0.0099999 < floor 0.01", 0.0099999)]


def test_floor_refuses_an_unscored_candidate() -> None:
    with pytest.raises(ValueError, match="r1"):
        apply_reranker_floor([Candidate(record_id="r1")], 0.5)


def test_reranker_from_config() -> None:
    assert isinstance(reranker_from_config(RerankerConfig()), NoReranker)
    built = reranker_from_config(RerankerConfig(enabled=True, floor=0.1, model="some/model", batch_size=8))
    assert isinstance(built, BgeReranker)
    assert (built.name, built.batch_size, built.device) == ("some/model", 8, "cpu")
    assert not built.is_loaded  # loading waits for warm() or the first search


def test_no_reranker_scores_zeros_and_fake_score_delegates() -> None:
    none = NoReranker()
    assert none.name == "none"
    assert none.score("q", ["a", "b"]) == [0.0, 0.0]
    assert none.score_pairs([("q", "a")]) == [0.0]
    fake = FakeReranker({("q", "a"): 0.3}, default=0.1)
    assert fake.score("q", ["a", "b"]) == [0.3, 0.1]
    assert fake.calls == [("q", "a"), ("q", "b")] and fake.batches == [2]


def test_bge_reranker_refuses_a_zero_batch_size() -> None:
    with pytest.raises(ConfigError, match="batch_size"):
        BgeReranker("some/model", batch_size=0)


def test_bge_reranker_scores_nothing_without_loading() -> None:
    reranker = BgeReranker("/no/such/model")
    assert reranker.score_pairs([]) == [] and reranker.score("q", []) == []
    assert not reranker.is_loaded
