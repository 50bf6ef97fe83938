"""Search latency while other processes write to the same store.

One SQLite file, six processes: four agents that search (and write a memory every
``WRITE_EVERY`` operations) and two workers that apply extraction-like transactions:
``WRITES_PER_APPLY`` ``rt.ingestor.write`` calls inside one ``rt.store.atomic()``, each
followed by a ``JUDGE_S`` pause that stands in for the NLI judge, which runs under the write
lock. Fake embedder and exact judge, so the figures measure the store, not a model.

Two phases on the same store, each ``--seconds`` long: ``retrieval.search_log.writes``
``inline`` (the search writes its log row itself, waiting for the write lock, as every
search did before the background writer) and then ``background``. Reports each phase's
search wall time p50/p95/p99/max, the p99 of the search's own ``log`` step, and what the
agents' search-log writers did with their rows.

Run: ``.venv/bin/python -m benchmarks.contention_bench [--seconds 20] [--records 300]``.
Writes benchmarks/results/contention.json and contention.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing as mp
import os
import random
import tempfile
import time
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.report import machine, percentile, pin_threads, summarize, write_report  # noqa: E402

pin_threads()

from retold import build_runtime, load_config  # noqa: E402
from retold.index.embedder import FakeEmbedder  # noqa: E402
from retold.ingest.equivalence import ExactJudge  # noqa: E402
from retold.ingest.ingestor import WriteRequest  # noqa: E402
from retold.models import Principal, Scope, SearchRequest  # noqa: E402
from retold.runtime import Runtime  # noqa: E402

AGENTS, WORKERS = 4, 2
USERS = ["priya", "aditya", "mei", "tomas"]  # agent i works for USERS[i]
WORKER_AGENT = "extraction-worker"
WRITE_EVERY = 10  # every tenth agent operation is a memory_write
WRITES_PER_APPLY = 5  # candidates applied in one worker transaction
JUDGE_S = 0.01  # per candidate, under the write lock
WORKER_PAUSE_S = 0.05  # most a worker waits between applies (uniform)
THINK_S = 0.02  # most an agent waits between operations (uniform)
MODES = ("inline", "background")

TOOLS = ["vim", "emacs", "pytest", "ruff", "docker", "postgres", "redis", "celery", "grafana",
         "terraform", "bazel", "poetry"]
TASKS = ["code review", "deploys", "hotfixes", "load tests", "migrations", "on-call notes",
         "release notes", "incident reviews", "benchmarks", "data backfills"]


def _runtime(path: str, mode: str) -> Runtime:
    config = load_config(overrides={"store": {"path": path}, "embedding": {"model": "fake"},
                                    "retrieval": {"search_log": {"writes": mode}}})
    return build_runtime(config, embedder=FakeEmbedder(), judge=ExactJudge(), environ={})


def _memory(rng: random.Random, user: str, tag: str) -> WriteRequest:
    tool, task = rng.choice(TOOLS), rng.choice(TASKS)
    return WriteRequest(type="semantic", content=f"{user.capitalize()} uses {tool} for {task} ({tag}).",
                        attribute=f"tool_{tag}")


def seed(path: str, records: int) -> None:
    """Users, grants and ``records`` memories spread over the four users."""
    rt = _runtime(path, "inline")
    rng = random.Random(0)
    for i, user in enumerate(USERS):
        rt.host.provision_user(user, aliases=[user.capitalize()])
        rt.host.grant(f"agent-{i}", Scope("user", user), read=True, write=True)
        rt.host.grant(WORKER_AGENT, Scope("user", user), read=True, write=True)
    for n in range(records):
        user = USERS[n % len(USERS)]
        result = rt.ingestor.write(Principal(WORKER_AGENT, user, None, None),
                                   _memory(rng, user, f"seed{n}"), origin="tool")
        assert result.ok, result.note
    rt.close()


def agent(path: str, mode: str, index: int, seconds: float, ready: Any, start: Event, out: Any) -> None:
    """Search (and sometimes write) as agent ``index`` until the phase ends."""
    rt = _runtime(path, mode)
    user = USERS[index]
    principal = Principal(f"agent-{index}", user, f"bench-{mode}-{index}", None)
    rt.hooks.on_session_start(principal)
    rng = random.Random(100 + index)
    rt.retriever.search(principal, SearchRequest(queries=["warm up"]))  # loads the index
    ready.put(index)
    start.wait()
    latency: list[float] = []
    log_step: list[float] = []
    writes = 0
    deadline = time.monotonic() + seconds
    n = 0
    while time.monotonic() < deadline:
        n += 1
        if n % WRITE_EVERY == 0:
            rt.ingestor.write(principal, _memory(rng, user, f"{mode}{index}_{n}"), origin="tool")
            writes += 1
        else:
            query = f"{rng.choice(TOOLS)} for {rng.choice(TASKS)}"
            started = time.perf_counter()
            outcome = rt.retriever.search(principal, SearchRequest(queries=[query]))
            latency.append((time.perf_counter() - started) * 1000)
            log_step.append(outcome.response.timings_ms.get("log", 0.0))
        time.sleep(rng.uniform(0, THINK_S))
    rt.close()  # background mode: writes the rows still queued
    out.put({"role": "agent", "latency": latency, "log_step": log_step, "writes": writes,
             "log_rows": dataclasses.asdict(rt.search_log.stats())})


def worker(path: str, mode: str, index: int, seconds: float, ready: Any, start: Event, out: Any) -> None:
    """Apply extraction-like transactions until the phase ends."""
    rt = _runtime(path, mode)
    rng = random.Random(200 + index)
    rt.refresh_index()
    ready.put(100 + index)
    start.wait()
    applies = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with rt.store.atomic():
            for j in range(WRITES_PER_APPLY):
                user = rng.choice(USERS)
                rt.ingestor.write(Principal(WORKER_AGENT, user, None, None),
                                  _memory(rng, user, f"w{mode}{index}_{applies}_{j}"), origin="tool")
                time.sleep(JUDGE_S)
        applies += 1
        time.sleep(rng.uniform(0, WORKER_PAUSE_S))
    rt.close()
    out.put({"role": "worker", "applies": applies})


def run_phase(path: str, mode: str, seconds: float) -> dict[str, Any]:
    """Six processes on one store for ``seconds``; the agents' search figures."""
    ctx = mp.get_context("spawn")
    ready, out, start = ctx.Queue(), ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=agent, args=(path, mode, i, seconds, ready, start, out))
             for i in range(AGENTS)]
    procs += [ctx.Process(target=worker, args=(path, mode, i, seconds, ready, start, out))
              for i in range(WORKERS)]
    for proc in procs:
        proc.start()
    for _ in procs:
        ready.get(timeout=120)
    start.set()
    results = [out.get(timeout=seconds + 120) for _ in procs]
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0, f"{proc.name} exited {proc.exitcode}"
    agents = [r for r in results if r["role"] == "agent"]
    latency = [ms for r in agents for ms in r["latency"]]
    log_step = [ms for r in agents for ms in r["log_step"]]
    rows = {key: sum(r["log_rows"][key] for r in agents)
            for key in ("submitted", "written", "dropped", "failed", "erased")}
    return {
        "mode": mode, "seconds": seconds,
        "search_ms": summarize(latency) | {"p99": percentile(latency, 0.99),
                                           "max": round(max(latency), 3)},
        "log_step_ms": {"p50": percentile(log_step, 0.5), "p99": percentile(log_step, 0.99),
                        "max": round(max(log_step), 3)},
        "agent_writes": sum(r["writes"] for r in agents),
        "worker_applies": sum(r["applies"] for r in results if r["role"] == "worker"),
        "log_rows": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each phase")
    parser.add_argument("--records", type=int, default=300, help="memories written before the run")
    args = parser.parse_args()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "contention.sqlite")
        seed(path, args.records)
        phases = [run_phase(path, mode, args.seconds) for mode in MODES]
    data: dict[str, object] = {
        "machine": machine(), "agents": AGENTS, "workers": WORKERS, "seed_records": args.records,
        "write_every": WRITE_EVERY, "writes_per_apply": WRITES_PER_APPLY, "judge_s": JUDGE_S,
        "phases": phases, "total_s": round(time.perf_counter() - started, 1),
    }
    table = [["search_log writes", "searches", "p50 ms", "p95 ms", "p99 ms", "max ms",
              "log step p50 / p99 ms", "rows written / dropped / failed", "worker applies"]]
    for phase in phases:
        s, rows = phase["search_ms"], phase["log_rows"]
        table.append([phase["mode"], str(s["n"]), f"{s['p50']:.1f}", f"{s['p95']:.1f}",
                      f"{s['p99']:.1f}", f"{s['max']:.1f}",
                      f"{phase['log_step_ms']['p50']:.2f} / {phase['log_step_ms']['p99']:.2f}",
                      f"{rows['written']} / {rows['dropped']} / {rows['failed']}",
                      str(phase["worker_applies"])])
    notes = (f"{AGENTS} agent processes (search, a write every {WRITE_EVERY}th operation) and "
             f"{WORKERS} worker processes ({WRITES_PER_APPLY} ingestor writes per transaction, "
             f"{JUDGE_S * 1000:.0f} ms judge stand-in each) on one store, fake embedder, "
             f"{args.seconds:.0f} s per phase. Search wall time per call; the log step is the "
             "search's own time from the last stage to its return (building the row, then "
             "writing it inline or handing it to the writer).")
    write_report("contention", data, table, notes)
    print("\n".join(" | ".join(row) for row in table))


if __name__ == "__main__":
    main()
