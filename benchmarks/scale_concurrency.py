"""Scale benchmark, concurrency step: 1, 2, 4 and 8 agent processes on one store.

Each process builds its own runtime on the store (as an agent on another host would, with
nothing shared but the store), warms up with one search, and waits until every process
is ready; then all alternate a ``memory_write`` of a new memory and a ``memory_search``
for the same number of seconds. Reported per step: aggregate writes/s and operations/s,
the scaling of writes/s against one process, errors, lost writes (ids a write
acknowledged that the store does not hold afterwards; read by the parent's own
long-lived connection, which is how a stale reader would show), and where the time of a
write-and-search cycle goes: the agents' own CPU, the CPU of their PostgreSQL server
processes (read from /proc when the server runs on this machine), and the wait for the
store's write lock (the writes' ``write_lock`` stage).
"""

from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path
from typing import Any

from benchmarks.search_data import principal
from retold import build_runtime, load_config
from retold.index.embedder import FakeEmbedder
from retold.ingest.equivalence import ExactJudge
from retold.runtime import Runtime

PROCESSES = (1, 2, 4, 8)
_TICKS = os.sysconf("SC_CLK_TCK")


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


def _agent(target: str, tag: str, seconds: float, queries: list[list[str]], out: Any, ready: Any,
           go: Any, done: Any) -> None:
    rt = bench_runtime(target)
    who = principal(f"scale-{tag}")
    rt.tools.call("memory_search", who, {"queries": queries[0]})  # warm: index loaded, log writer up
    ready.put(tag)
    go.wait()
    acked: list[str] = []
    errors = ops = i = 0
    lock_ms = 0.0
    cpu = time.process_time()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            written = rt.tools.call("memory_write", who, _write_args(tag, i))
            if "error" in written:
                errors += 1
            else:
                acked.append(str(written["record_id"]))
                lock_ms += float(written["timings_ms"].get("write_lock", 0.0))
            found = rt.tools.call("memory_search", who, {"queries": queries[i % len(queries)]})
            errors += "error" in found
            ops += 2
        except Exception:  # counted: the target is none
            errors += 1
        i += 1
    out.put({"acked": acked, "errors": errors, "ops": ops, "cpu_s": time.process_time() - cpu,
             "lock_ms": lock_ms})
    done.wait()  # stay connected until the parent has read the server's CPU
    rt.close()


def _server_cpu_s(target: str) -> float | None:
    """CPU seconds used so far by the PostgreSQL backends connected to the benchmark's
    database; None for SQLite or a server on another machine."""
    if not target.startswith("postgresql"):
        return None
    import psycopg

    from retold.store.postgres.url import conninfo

    name = target.rsplit("/", 1)[1].split("?", 1)[0]
    with psycopg.connect(conninfo(target), autocommit=True) as conn:
        pids = [row[0] for row in conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()", (name,))]
    total = 0
    for pid in pids:
        stat = Path(f"/proc/{pid}/stat")
        if not stat.exists():
            return None
        fields = stat.read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / _TICKS


def concurrency(target: str, reader: Runtime, seconds: float,
                queries: list[list[str]]) -> list[dict[str, Any]]:
    """One row per process count; ``reader`` checks every acknowledged write afterwards."""
    ctx = multiprocessing.get_context("spawn")
    rows: list[dict[str, Any]] = []
    for n in PROCESSES:
        out, ready, go, done = ctx.Queue(), ctx.Queue(), ctx.Event(), ctx.Event()
        procs = [ctx.Process(target=_agent,
                             args=(target, f"p{n}x{k}", seconds, queries, out, ready, go, done))
                 for k in range(n)]
        for proc in procs:
            proc.start()
        for _ in procs:
            ready.get(timeout=300)
        server_before = _server_cpu_s(target)
        go.set()
        results = [out.get(timeout=seconds + 300) for _ in procs]
        server_after = _server_cpu_s(target)
        done.set()
        for proc in procs:
            proc.join(timeout=60)
        acked = [rid for r in results for rid in r["acked"]]
        stored = {rec.id for rec in reader.store.records(acked)} if acked else set()
        writes = max(len(acked), 1)
        rows.append({
            "processes": n, "writes": len(acked), "writes_per_s": round(len(acked) / seconds, 2),
            "ops_per_s": round(sum(r["ops"] for r in results) / seconds, 2),
            "errors": sum(r["errors"] for r in results), "lost_writes": len(set(acked) - stored),
            # per write-and-search cycle: the agent's CPU, its server processes' CPU, and the
            # write's wait for the store's write lock
            "client_cpu_ms": round(sum(r["cpu_s"] for r in results) * 1000 / writes, 2),
            "server_cpu_ms": (round((server_after - server_before) * 1000 / writes, 2)
                              if server_before is not None and server_after is not None else None),
            # SQLite's writers queue on BEGIN IMMEDIATE before the decision, which no stage
            # separates from the entity lookup; PostgreSQL's wait is the write_lock stage.
            "write_lock_ms": (round(sum(r["lock_ms"] for r in results) / writes, 2)
                              if target.startswith("postgresql") else None),
        })
        print(f"  {n} processes: {rows[-1]}", flush=True)
    base = rows[0]["writes_per_s"] or 1.0
    for row in rows:
        row["scaling"] = round(row["writes_per_s"] / base, 2)
    return rows
