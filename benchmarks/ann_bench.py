"""Approximate dense search benchmark (issue 50, one very large scope).

Recall@10 of the HNSW path against exact cosine, and search p50 of each, on one index of
``--rows`` rows (default 100K) with eligible sets of every row and of about 30%.

The rows are real MiniLM vectors of generated sentences (an agent's memories: people,
tools, incidents, tickets), embedded once by retold's own embedder and kept in
``.bench/`` so a rerun skips the encoding. Queries are other generated sentences of the
same shape, embedded the same way, searched as one query and as the five query columns a
search uses. Both paths go through ``VectorIndex.search``; the exact one is the same
index with the approximate path turned off.

``--rows`` beyond the 100K real rows (``--rows 1000000``, not part of ``make bench``: it
takes several minutes and about 6 GB) repeats the real rows with noise, each copy a
near-duplicate (cosine about 0.97) of its original, as a store full of restated memories.

Run: ``make bench`` or ``.venv/bin/python -m benchmarks.ann_bench [--rows 100000]``.
Writes benchmarks/results/ann.json and ann.md (ann_<rows>.json/.md for another size).
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path
from typing import Any

from benchmarks.report import machine, pin_threads, summarize, write_report

pin_threads()

import numpy as np  # noqa: E402

from retold.config import ApproximateConfig  # noqa: E402
from retold.index.vector import VectorIndex  # noqa: E402
from retold.store import EligibleSet  # noqa: E402

CACHE = Path(".bench")
DIMS, MODEL, VERSION, K = 384, "bench-model", "1", 10
REAL_ROWS = 100_000
COLUMNS = 5  # query columns of one search: the question and its rewrites
PEOPLE = ["Priya", "Aditya", "Mei", "Tomas", "Olu", "Farah", "Jonas", "Lucia", "Kenji", "Amara",
          "Diego", "Sofia", "Ravi", "Ingrid", "Mateo", "Hana", "Kwame", "Elena", "Yusuf", "Nadia"]
THINGS = ["deploy script", "build cache", "auth token", "billing service", "search index",
          "payment webhook", "login page", "nightly backup", "release branch", "staging database",
          "redis queue", "celery worker", "dashboard", "alert rule", "feature flag", "onboarding flow",
          "invoice export", "rate limiter", "schema migration", "docker image", "CI pipeline",
          "mobile app", "pricing page", "audit log", "SSO integration", "data warehouse",
          "error budget", "load balancer", "cron job", "API gateway"]
EVENTS = ["failed after", "was fixed by", "slowed down during", "was rewritten for",
          "broke because of", "was approved for", "needs review before", "was rolled back after",
          "got faster after", "was blamed for"]
CAUSES = ["the Monday outage", "a config typo", "the Postgres upgrade", "a memory leak",
          "the quarterly audit", "a customer escalation", "the holiday freeze", "a flaky test",
          "the region failover", "an expired certificate", "the pricing change", "a DNS issue"]
PREFS = ["prefers", "dislikes", "keeps forgetting", "owns", "asked about", "wants to retire",
         "is on call for", "documented", "is migrating", "benchmarked"]


def sentences(n: int, seed: int) -> list[str]:
    """``n`` generated memories; the same seed gives the same list."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        who, what, other = rng.choice(PEOPLE), rng.choice(THINGS), rng.choice(THINGS)
        if i % 3 == 0:
            out.append(f"{who} {rng.choice(PREFS)} the {what} and the {other}.")
        elif i % 3 == 1:
            out.append(f"The {what} {rng.choice(EVENTS)} {rng.choice(CAUSES)}, "
                       f"ticket {rng.randint(100, 99999)}.")
        else:
            out.append(f"{who} said the {what} {rng.choice(EVENTS)} {rng.choice(CAUSES)} "
                       f"on day {rng.randint(1, 365)}.")
    return out


def vectors(n: int, seed: int) -> np.ndarray:
    """MiniLM vectors of ``sentences(n, seed)``, cached under .bench/."""
    path = CACHE / f"ann-{n}-{seed}.npy"
    if path.exists():
        cached: np.ndarray = np.load(path)
        return cached
    from retold.config import EmbeddingConfig
    from retold.index.embedder import embedder_from_config
    embedder = embedder_from_config(EmbeddingConfig())
    texts = sentences(n, seed)
    matrix = np.concatenate([embedder.embed_documents(texts[i:i + 2000]) for i in range(0, n, 2000)])
    CACHE.mkdir(exist_ok=True)
    np.save(path, matrix.astype(np.float32))
    return matrix


def corpus(rows: int) -> np.ndarray:
    """``rows`` vectors: the real ones, then noisy copies of them when more are asked for."""
    real = vectors(min(rows, REAL_ROWS), 0)
    parts, rng, made = [real], np.random.default_rng(3), real.shape[0]
    while made < rows:
        take = min(real.shape[0], rows - made)
        noise = rng.standard_normal((take, DIMS)).astype(np.float32) * (0.25 / np.sqrt(DIMS))
        copy = real[:take] + noise
        parts.append(copy / np.linalg.norm(copy, axis=1, keepdims=True))
        made += take
    return np.concatenate(parts) if len(parts) > 1 else real


def filled(matrix: np.ndarray, config: ApproximateConfig) -> VectorIndex:
    """An index holding every row, each with its seq, as a load would leave it."""
    index = VectorIndex(MODEL, VERSION, DIMS, approximate=config)
    for i, row in enumerate(matrix):
        index.upsert(f"m{i}", row, seq=i)
    return index


def timed(index: VectorIndex, queries: list[np.ndarray], eligible: EligibleSet
          ) -> tuple[list[list[str]], list[float]]:
    hits, samples = [], []
    for query in queries:
        start = time.perf_counter()
        found = index.search(query, eligible, K)
        samples.append((time.perf_counter() - start) * 1000)
        hits.append([rid for rid, _ in found])
    return hits, samples


def compare(exact: VectorIndex, approx: VectorIndex, queries: list[np.ndarray],
            eligible: EligibleSet) -> dict[str, Any]:
    """Recall@10 of the approximate path against exact, and both latencies."""
    exact.search(queries[0], eligible, K)  # warm the eligible positions on both
    before = approx.approximate_searches
    approx.search(queries[0], eligible, K)
    truth, exact_ms = timed(exact, queries, eligible)
    found, approx_ms = timed(approx, queries, eligible)
    served = approx.approximate_searches - before - 1
    recall = float(np.mean([len(set(a) & set(t)) / len(t) for a, t in zip(found, truth, strict=True)]))
    return {"eligible": len(eligible), "searches": len(queries), "served_by_graph": served,
            "recall_at_10": round(recall, 4), "exact_ms": summarize(exact_ms),
            "approximate_ms": summarize(approx_ms)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200, help="searches per case (>= 100)")
    parser.add_argument("--ef-search", type=int, default=ApproximateConfig().ef_search)
    args = parser.parse_args()
    matrix = corpus(args.rows)
    asked = vectors(args.queries * COLUMNS, 1)  # other sentences of the same shapes
    single = [asked[i] for i in range(args.queries)]
    five = [asked[i * COLUMNS:(i + 1) * COLUMNS] for i in range(args.queries)]
    config = ApproximateConfig(ef_search=args.ef_search)
    exact = filled(matrix, ApproximateConfig(enabled=False))
    approx = filled(matrix, config)
    start = time.perf_counter()
    if not approx.wait_for_graph():
        raise SystemExit("no graph was built: is faiss-cpu (the scale extra) installed?")
    build_s = time.perf_counter() - start
    ids = [f"m{i}" for i in range(args.rows)]
    some = np.flatnonzero(np.random.default_rng(2).random(args.rows) < 0.3)  # one large scope
    sets = {"all": EligibleSet(ids, np.arange(args.rows)),
            "30%": EligibleSet([ids[i] for i in some], some)}
    cases = {}
    for name, eligible in sets.items():
        for columns, queries in (("1", single), (str(COLUMNS), five)):
            cases[f"{name} x{columns}"] = compare(exact, approx, queries, eligible)
            print(name, columns, cases[f"{name} x{columns}"], flush=True)
    config_shown = {"m": config.m, "ef_construction": config.ef_construction,
                    "ef_search": config.ef_search, "min_rows": config.min_rows}
    report = "ann" if args.rows == REAL_ROWS else f"ann_{args.rows}"
    kind = "MiniLM (generated sentences)" + (", noisy copies beyond 100K" if args.rows > REAL_ROWS else "")
    write_report(report, {"machine": machine(), "rows": args.rows, "vectors": kind,
                         "config": config_shown, "graph_build_s": round(build_s, 2), "cases": cases},
                 [["eligible", "query columns", "recall@10", "exact p50 ms", "approximate p50 ms",
                   "approximate p95 ms"]]
                 + [[label.split()[0] + f" ({case['eligible']:,})", label.split()[1][1:],
                     f"{case['recall_at_10']:.3f}", f"{case['exact_ms']['p50']:.2f}",
                     f"{case['approximate_ms']['p50']:.2f}", f"{case['approximate_ms']['p95']:.2f}"]
                    for label, case in cases.items()],
                 notes=(f"{args.rows:,} rows: {kind}, "
                        f"{args.queries} searches per case, k={K}; graph M={config.m}, "
                        f"efConstruction={config.ef_construction}, efSearch={config.ef_search}, "
                        f"built in {build_s:.1f} s on one thread. Recall is of the exact top 10."))


if __name__ == "__main__":
    main()
