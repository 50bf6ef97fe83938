"""Scale benchmark: the same store on SQLite and on PostgreSQL, side by side.

For each backend and each ``--sizes`` store (the synthetic store of the search benchmarks,
``benchmarks/search_data.py``, fake embedder), interleaved query by query across the two
backends so machine noise hits both alike:

- write: ``Ingestor.write`` of a new memory (decide, then write row, FTS, vector, event),
  p50/p95 of its ``total`` minus its ``embed`` stage, and of each stage (all in the JSON,
  the larger ones in the table; ``dedup_search`` holds the subject scan and the duplicate
  search);
- search: ``memory_search`` warm, p50/p95 of every stage except the query embedding;
- refresh: another connection (another process would be the same) writes one record with
  its vector; the time this process's RAM index takes to bring itself up to date by delta.

PostgreSQL is vacuumed and analysed after the bulk load, as autovacuum would have done on a
store in use. At the first size, 1, 2, 4 and 8 agent processes then write and search concurrently
on each backend (``benchmarks/scale_concurrency.py``). Targets (issue "PostgreSQL as the
shared store"): PostgreSQL search non-embedding p50 <= 2x SQLite's at 100K; 8 agent
processes >= 3x one process's write throughput on PostgreSQL, with 0 errors and 0 lost
writes. PostgreSQL runs on ``--pg`` (default the machine's server at 127.0.0.1:5432);
the benchmark creates and drops a database of its own.

Run: ``.venv/bin/python -m benchmarks.scale_bench [--sizes 10000] [--queries 100]``.
Writes scale.json and scale.md into ``--results-dir`` (benchmarks/results).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.report import RESULTS, machine, pin_threads, summarize, write_report

pin_threads()

import numpy as np  # noqa: E402

from benchmarks.scale_concurrency import bench_runtime, concurrency  # noqa: E402
from benchmarks.search_data import (  # noqa: E402
    AGENT,
    USER,
    fake_vectors,
    generate,
    make_queries,
    populate,
    principal,
)
from retold.index.embedder import FakeEmbedder  # noqa: E402
from retold.ingest.ingestor import WriteRequest  # noqa: E402
from retold.models import Scope, SearchRequest  # noqa: E402
from retold.runtime import Runtime  # noqa: E402
from retold.store import Embedding, open_store  # noqa: E402
from retold.store.postgres.url import conninfo  # noqa: E402
from retold.tenant import DEFAULT_TENANT  # noqa: E402
from retold.testing import make_record  # noqa: E402

BACKENDS = ("sqlite", "postgres")
# The write's stages, as Ingestor.write times them (embed and total are reported apart).
WRITE_STAGES = ("permission", "evidence", "entities", "dedup_search", "judge", "supersession", "write_lock",
                "persistence", "event_log", "transaction", "index_update")
# The stages the table shows (every one is in the JSON).
TABLE_STAGES = ("dedup_search", "judge", "persistence", "event_log", "transaction")


def _search_ms(rt: Runtime, queries: list[str]) -> float:
    outcome = rt.retriever.search(principal(), SearchRequest(queries=list(queries)))
    timings = outcome.response.timings_ms
    return float(timings["total"] - timings["embed_wait"])


def _write_ms(rt: Runtime, i: int) -> dict[str, float]:
    """One write's stages in ms, with ``write``: its total less the embedding."""
    result = rt.ingestor.write(principal(), WriteRequest(
        type="semantic", content=f"Priya benchmarks option {i} with tool number {i * 7}.",
        attribute=f"scale_choice_{i}"))
    assert result.ok, result.note
    timings = result.timings_ms
    return {"write": float(timings["total"] - timings.get("embed", 0.0)),
            **{stage: float(timings.get(stage, 0.0)) for stage in WRITE_STAGES}}


def refresh_ms(rt: Runtime, target: str, i: int, tenant: str = DEFAULT_TENANT) -> float:
    """Another connection writes a record into ``tenant``; this process's index catches up
    by delta."""
    other = open_store(target, tenant=tenant, migrate_schema=False)
    try:
        vector = np.ones(rt.embedder.dims, dtype=np.float32) / np.sqrt(rt.embedder.dims)
        other.write_record(make_record(content=f"refresh probe {i}", scope=Scope("user", USER),
                                       creator_agent_id=AGENT),
                           embedding=Embedding(rt.embedder.name, rt.embedder.version, vector))
    finally:
        other.close()
    started = time.perf_counter()
    outcome = rt.refresh_index()
    assert outcome == "delta", outcome
    return (time.perf_counter() - started) * 1000


def _analyze(url: str) -> None:
    """Statistics as autovacuum's analyse refreshes them while a table grows: a
    connection's cached plans are made again when they change. Without it (this machine's
    server runs with autovacuum off) plans made while the tables were nearly empty scan
    them on every write, and the load slows as they grow."""
    import psycopg

    with psycopg.connect(conninfo(url), autocommit=True) as conn:
        conn.execute("ANALYZE")


def _vacuum(url: str) -> None:
    """The tables as autovacuum keeps them on a store in use: right after a bulk load it
    has not run yet (and this machine's server runs with it off). Without planner
    statistics the index-version and lexical queries are planned as scans, and without
    the visibility map every index-only scan of the eligible set visits the heap."""
    import psycopg

    with psycopg.connect(conninfo(url), autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")


def run_size(n: int, targets: dict[str, str], queries: int, seconds: float) -> dict[str, Any]:
    records = generate(n)
    embedder = FakeEmbedder()
    vectors = fake_vectors([str(r["content"]) for r in records], embedder)
    runtimes: dict[str, Runtime] = {}
    build: dict[str, float] = {}
    for backend, target in targets.items():
        started = time.perf_counter()
        rt = bench_runtime(target)
        populate(rt, records, vectors,
                 after_batch=(lambda url=target: _analyze(url)) if backend == "postgres" else None)
        if backend == "postgres":
            _vacuum(target)
        rt.refresh_index()
        runtimes[backend] = rt
        build[backend] = round(time.perf_counter() - started, 1)
        print(f"{backend}: {n:,} records in {build[backend]} s", flush=True)
    rt0 = next(iter(runtimes.values()))
    rt0.hooks.on_session_start(principal())
    for rt in runtimes.values():
        rt.hooks.on_session_start(principal())
    searches = make_queries(records, queries)
    samples: dict[str, dict[str, list[float]]] = {b: {"search": [], "write": [], "refresh": []}
                                                  for b in targets}
    stages: dict[str, dict[str, list[float]]] = {b: {s: [] for s in WRITE_STAGES} for b in targets}
    for i, q in enumerate(searches):  # interleaved: both backends see the same noise
        for backend, rt in runtimes.items():
            samples[backend]["search"].append(_search_ms(rt, q))
            written = _write_ms(rt, i)
            samples[backend]["write"].append(written.pop("write"))
            for stage, ms in written.items():
                stages[backend][stage].append(ms)
            if i % 5 == 0:
                samples[backend]["refresh"].append(refresh_ms(rt, targets[backend], i))
    steps = {backend: concurrency(targets[backend], rt, seconds, searches)
             for backend, rt in runtimes.items()} if seconds > 0 else {}
    for rt in runtimes.values():
        rt.close()
    return {"records": n, "build_s": build,
            **{backend: {**{kind: summarize(v) for kind, v in kinds.items()},
                         "write_stages": {s: summarize(v) for s, v in stages[backend].items()},
                         **({"concurrency": steps[backend]} if backend in steps else {})}
               for backend, kinds in samples.items()}}


def _steps(rows: list[dict[str, Any]] | None) -> tuple[str, str, str]:
    if not rows:
        return "-", "-", "-"
    rates = " / ".join(f"{r['writes_per_s']:.1f}" for r in rows)

    def cpu(row: dict[str, Any]) -> str:
        server = "" if row.get("server_cpu_ms") is None else f" + {row['server_cpu_ms']:.0f}"
        lock = "-" if row.get("write_lock_ms") is None else f"{row['write_lock_ms']:.0f}"
        return f"{row['client_cpu_ms']:.0f}{server} / {lock}"

    return (f"{rates} ({rows[-1]['scaling']:.2f}x)",
            f"{sum(r['errors'] for r in rows)} / {sum(r['lost_writes'] for r in rows)}",
            f"{cpu(rows[0])}; {cpu(rows[-1])}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000", help="store sizes, comma separated")
    parser.add_argument("--queries", type=int, default=100, help="searches (and writes) per size")
    parser.add_argument("--pg", default=os.environ.get("RETOLD_BENCH_PG",
                                                       "postgresql://postgres@127.0.0.1:5432/postgres"),
                        help="a PostgreSQL server URL the benchmark may create a database on")
    parser.add_argument("--seconds", type=float, default=10.0,
                        help="per concurrency step (1, 2, 4, 8 agent processes) at the first size; 0 skips")
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    args = parser.parse_args()
    import psycopg

    name = f"retold_scale_{os.getpid()}"
    base = args.pg.rsplit("/", 1)[0]
    results = []
    with psycopg.connect(args.pg, autocommit=True) as admin:
        for n in [int(s) for s in args.sizes.split(",")]:
            admin.execute(f"DROP DATABASE IF EXISTS {name}")
            admin.execute(f"CREATE DATABASE {name}")
            try:
                with tempfile.TemporaryDirectory() as tmp:
                    targets = {"sqlite": str(Path(tmp) / "scale.sqlite"), "postgres": f"{base}/{name}"}
                    first = n == int(args.sizes.split(",")[0])
                    results.append(run_size(n, targets, args.queries, args.seconds if first else 0.0))
            finally:
                admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    table = [["records", "backend", "write p50/p95 ms",
              f"write stages p50/p95 ms: {', '.join(TABLE_STAGES)}", "search non-embed p50/p95 ms",
              "refresh p50/p95 ms",
              "writes/s with 1/2/4/8 processes (scaling at 8)", "errors / lost writes",
              "ms per cycle, 1; 8 processes: CPU agent + server / lock wait"]]
    for size in results:
        for backend in BACKENDS:
            row = size[backend]
            stage = row["write_stages"]
            table.append([f"{size['records']:,}", backend,
                          f"{row['write']['p50']:.2f} / {row['write']['p95']:.2f}",
                          "; ".join(f"{stage[s]['p50']:.2f} / {stage[s]['p95']:.2f}" for s in TABLE_STAGES),
                          f"{row['search']['p50']:.2f} / {row['search']['p95']:.2f}",
                          f"{row['refresh']['p50']:.2f} / {row['refresh']['p95']:.2f}",
                          *_steps(row.get("concurrency"))])
    write_report("scale", {"machine": machine(), "sizes": results}, table,
                 notes="Fake embedder; embedding excluded from write and search; both backends "
                       "on one machine (2 cores shared with other work), interleaved query by "
                       "query; PostgreSQL vacuumed and analysed after the bulk load. A cycle of "
                       "the concurrency step is one memory_write and one memory_search; its CPU "
                       "is the agents' and (PostgreSQL) their server processes', per write.",
                 directory=args.results_dir)


if __name__ == "__main__":
    main()
