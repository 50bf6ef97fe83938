"""Scale benchmark, concurrency step: 1, 2, 4 and 8 agent processes on one store.

Each process builds its own runtime on the store (as an agent on another host would, with
nothing shared but the store), then alternates a ``memory_write`` of a new memory and a
``memory_search`` until its time is up. Reported per step: aggregate writes/s and
operations/s, the scaling of writes/s against one process, errors, and lost writes (ids a
write acknowledged that the store does not hold afterwards; read by the parent's own
long-lived connection, which is how a stale reader would show).
"""

from __future__ import annotations

import multiprocessing
import time
from typing import Any

from benchmarks.search_data import principal
from retold import build_runtime, load_config
from retold.index.embedder import FakeEmbedder
from retold.ingest.equivalence import ExactJudge
from retold.runtime import Runtime

PROCESSES = (1, 2, 4, 8)


def bench_runtime(target: str) -> Runtime:
    """The benchmark's runtime on a SQLite path or a PostgreSQL URL."""
    key = "url" if target.startswith("postgresql") else "path"
    config = load_config(overrides={"store": {key: target}, "embedding": {"model": "fake"},
                                    "retrieval": {"search_log": {"writes": "background"}}})
    return build_runtime(config, embedder=FakeEmbedder(), judge=ExactJudge())


def _write_args(tag: str, i: int) -> dict[str, Any]:
    return {"type": "semantic", "attribute": f"scale_{tag}_{i}", "source_kind": "user_statement",
            "content": f"Scale note {tag}-{i}: the {tag} runbook step {i} uses port {4000 + i}.",
            "evidence": f"runbook step {i} uses port {4000 + i}"}


def _agent(target: str, tag: str, seconds: float, queries: list[list[str]], out: Any) -> None:
    rt = bench_runtime(target)
    who = principal(f"scale-{tag}")
    acked: list[str] = []
    errors = ops = i = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            written = rt.tools.call("memory_write", who, _write_args(tag, i))
            if "error" in written:
                errors += 1
            else:
                acked.append(str(written["record_id"]))
            found = rt.tools.call("memory_search", who, {"queries": queries[i % len(queries)]})
            errors += "error" in found
            ops += 2
        except Exception:  # counted: the target is none
            errors += 1
        i += 1
    rt.close()
    out.put({"acked": acked, "errors": errors, "ops": ops})


def concurrency(target: str, reader: Runtime, seconds: float,
                queries: list[list[str]]) -> list[dict[str, Any]]:
    """One row per process count; ``reader`` checks every acknowledged write afterwards."""
    ctx = multiprocessing.get_context("spawn")
    rows: list[dict[str, Any]] = []
    for n in PROCESSES:
        out = ctx.Queue()
        procs = [ctx.Process(target=_agent, args=(target, f"p{n}x{k}", seconds, queries, out))
                 for k in range(n)]
        for proc in procs:
            proc.start()
        results = [out.get(timeout=seconds + 300) for _ in procs]
        for proc in procs:
            proc.join(timeout=60)
        acked = [rid for r in results for rid in r["acked"]]
        stored = {rec.id for rec in reader.store.records(acked)} if acked else set()
        rows.append({"processes": n, "writes": len(acked), "writes_per_s": round(len(acked) / seconds, 2),
                     "ops_per_s": round(sum(r["ops"] for r in results) / seconds, 2),
                     "errors": sum(r["errors"] for r in results), "lost_writes": len(set(acked) - stored)})
        print(f"  {n} processes: {rows[-1]}", flush=True)
    base = rows[0]["writes_per_s"] or 1.0
    for row in rows:
        row["scaling"] = round(row["writes_per_s"] / base, 2)
    return rows
