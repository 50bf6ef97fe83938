"""Search-benchmark modes "stages" and "real": the search path's own cost.

Mode "stages": the FakeEmbedder's vectors, with each forward pass (a query or name the
query cache does not hold) sleeping a fixed 25 ms in place of the model. Every stage's
p50/p95 for warm searches and for cold ones (the first search of a freshly opened
runtime, ``warm = 0`` in search_log), checking the warm flag is 0 on that first call and 1
afterwards.

Mode "real": all-MiniLM-L6-v2 on one thread, on the backend the default config selects,
end-to-end p50/p95 over distinct queries against a bare baseline measured in the same run:
``embed_queries`` of the same query texts on the same backend plus one numpy dot product
over every stored vector. Also the p50 of a repeated query, whose embedding is an LRU
cache hit.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.report import summarize
from benchmarks.search_data import bench_config, fake_vectors, populate, principal, reads
from retold import build_runtime
from retold.index.embedder import Embedder, FakeEmbedder
from retold.ingest.equivalence import ExactJudge
from retold.models import SearchRequest
from retold.retrieve.generators import fts_match_expression
from retold.retrieve.terms import query_terms
from retold.runtime import Runtime

EMBED_SLEEP_S = 0.025  # a fixed stand-in for the model's forward pass
COLD_RUNS = 5  # fresh runtimes per size, one cold search each
CACHE_HIT_RUNS = 50
STAGES = ["rewrite", "scopes", "filter", "index_refresh", "lexical", "entity", "embed", "embed_wait",
          "dense", "fuse", "embed_names", "beyond_names", "freshness", "gate", "dedup",
          "rerank", "budget", "explain", "log", "total"]


class SleepyFakeEmbedder(FakeEmbedder):
    """The fake embedder with the model's cost replaced by a fixed sleep per forward pass:
    what the query cache answers costs nothing, as with the real model."""

    def _encode(self, texts: list[str]) -> np.ndarray:
        time.sleep(EMBED_SLEEP_S)
        return super()._encode(texts)


def _search(rt: Runtime, queries: list[str]) -> tuple[dict[str, float], float, int]:
    """One search: (timings_ms, wall ms, warm flag from its search_log row)."""
    started = time.perf_counter()
    outcome = rt.retriever.search(principal(), SearchRequest(queries=list(queries)))
    wall = (time.perf_counter() - started) * 1000
    rt.flush_search_log()  # the row is written off the search path, after the timing
    row = rt.store.search_log_row(outcome.response.search_id)
    assert row is not None
    return dict(outcome.response.timings_ms), wall, int(row["warm"])


def _non_embedding(timings: dict[str, float]) -> float:
    return timings["total"] - timings["embed_wait"] - timings.get("embed_names", 0.0)


def _stage_summary(samples: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    return {stage: summarize([s.get(stage, 0.0) for s in samples]) for stage in STAGES}


def match_fraction(rt: Runtime, searches: list[list[str]], rows: int) -> dict[str, float]:
    """The share of the store one search's OR-ed terms match in FTS (before eligibility)."""
    shares = []
    for queries in searches:
        match = fts_match_expression([t for q in queries for t in query_terms(q)])
        shares.append(100.0 * rt.store.count_fts_matches(match) / rows if match else 0.0)
    ordered = sorted(shares)
    return {"p50_pct": round(ordered[len(ordered) // 2], 3),
            "p95_pct": round(ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))], 3),
            "max_pct": round(ordered[-1], 3)}


def run_stages(tmp: Path, n: int, records: list[dict[str, Any]],
               searches: list[list[str]]) -> dict[str, Any]:
    """Mode A: fixed 25 ms embedding, every stage, cold and warm."""
    path = tmp / f"stages_{n}.sqlite"
    started = time.perf_counter()
    embedder = SleepyFakeEmbedder()
    rt = build_runtime(bench_config(path), embedder=embedder, judge=ExactJudge())
    vectors = fake_vectors([str(r["content"]) for r in records], embedder)
    populate(rt, records, vectors)
    eligible = len(rt.store.eligible_ids(reads()))
    shares = match_fraction(rt, searches, n)
    rt.close()
    build_s = time.perf_counter() - started

    cold: list[dict[str, float]] = []
    cold_flags: list[int] = []
    for c in range(COLD_RUNS):
        rt = build_runtime(bench_config(path), embedder=SleepyFakeEmbedder(), judge=ExactJudge())
        timings, _, warm = _search(rt, searches[c])
        cold.append(timings)
        cold_flags.append(warm)
        if c < COLD_RUNS - 1:
            rt.close()
    warm_samples: list[dict[str, float]] = []
    warm_flags: list[int] = []
    counts: dict[str, list[int]] = {"dense": [], "lexical": [], "entity": [], "returned": []}
    for queries in searches:
        timings, _, warm = _search(rt, queries)
        warm_samples.append(timings)
        warm_flags.append(warm)
    for row in rt.store.search_log_rows()[-len(searches):]:
        for key in counts:
            counts[key].append(len(json.loads(row[key])))
    rt.close()
    assert all(f == 0 for f in cold_flags), f"cold searches logged warm={cold_flags}"
    assert all(f == 1 for f in warm_flags), "a search after the first logged warm=0"
    # Non-embedding: everything the search did besides waiting for the encoder (which runs
    # beside the store reads; embed_wait is what was left of it after them), and besides
    # encoding the question's names (embed_names: a forward pass the first time a name comes).
    non_embed = [_non_embedding(s) for s in warm_samples]
    non_embed_no_log = [_non_embedding(s) - s.get("log", 0.0) for s in warm_samples]
    return {
        "records": n, "eligible": eligible, "eligible_pct": round(100.0 * eligible / n, 2),
        "searches": len(searches), "two_query_searches": sum(len(q) == 2 for q in searches),
        "build_s": round(build_s, 1), "fts_match_share_of_store": shares,
        "warm_flags": {"cold_first_calls": cold_flags, "warm_calls_all_1": all(f == 1 for f in warm_flags)},
        "generator_counts_mean": {k: round(sum(v) / len(v), 1) for k, v in counts.items()},
        "warm_ms": _stage_summary(warm_samples),
        "cold_ms": _stage_summary(cold),
        "warm_non_embedding_ms": summarize(non_embed),
        "warm_non_embedding_excl_log_ms": summarize(non_embed_no_log),
        "cold_non_embedding_ms": summarize([_non_embedding(s) for s in cold]),
    }


def run_real(tmp: Path, n: int, records: list[dict[str, Any]], vectors: np.ndarray,
             searches: list[list[str]], baseline: Embedder) -> dict[str, Any]:
    """Mode B: the real model on one thread, against embed + one dot product."""
    path = tmp / f"real_{n}.sqlite"
    rt = build_runtime(bench_config(path, torch_threads=1), judge=ExactJudge())
    assert rt.embedder.name == baseline.name, (rt.embedder.name, baseline.name)
    populate(rt, records, vectors)
    rt.close()
    rt = build_runtime(bench_config(path, torch_threads=1), judge=ExactJudge())
    cold_timings, cold_wall, cold_flag = _search(rt, ["bench warm-up: what does Priya prefer?"])
    matrix = np.ascontiguousarray(vectors[:n], dtype=np.float32)
    e2e, e2e_total, bare, embeds = [], [], [], []
    for i, queries in enumerate(searches):
        def bare_call(queries: list[str] = queries) -> None:
            started = time.perf_counter()
            qvecs = baseline.embed_queries(list(queries))
            scores = matrix @ qvecs.T
            bare.append((time.perf_counter() - started) * 1000)
            assert scores.shape == (n, len(queries))

        if i % 2:  # alternate the order so neither side always follows the other
            bare_call()
        timings, wall, warm = _search(rt, queries)
        assert warm == 1
        e2e.append(wall)
        e2e_total.append(timings["total"])
        embeds.append(timings["embed"])
        if not i % 2:
            bare_call()
    repeated = searches[0]
    hits, hit_embed = [], []
    for _ in range(CACHE_HIT_RUNS):
        timings, wall, _ = _search(rt, repeated)
        hits.append(wall)
        hit_embed.append(timings["embed"])
    rt.close()
    e2e_s, bare_s = summarize(e2e), summarize(bare)
    return {
        "records": n, "cold_first_search_ms": round(cold_wall, 1), "cold_warm_flag": cold_flag,
        "cold_embed_ms": cold_timings["embed"],
        "end_to_end_ms": e2e_s, "timings_total_ms": summarize(e2e_total),
        "embed_stage_ms": summarize(embeds), "bare_embed_plus_dot_ms": bare_s,
        "ratio_p50": round(e2e_s["p50"] / bare_s["p50"], 3),
        "end_to_end_minus_bare_p50_ms": round(e2e_s["p50"] - bare_s["p50"], 3),
        "cache_hit_ms": summarize(hits), "cache_hit_embed_stage_ms": summarize(hit_embed),
    }
