"""Search latency while agents write and workers extract sessions on the same store.

One SQLite file, six processes:

- four agents, each working for its own user in sessions of ``SESSION_OPS`` operations.
  An operation stores a user turn, then searches with ``memory_search`` (every
  ``WRITE_EVERY``-th operation calls ``memory_write`` instead), then stores the
  assistant's turn. Ending a session hands its id to the extraction queue, as the Celery
  scheduler does, through a ``multiprocessing`` queue instead of a broker;
- two extraction workers that take session ids off that queue and run the extraction
  task's body, ``rt.session_end.run(session_id)``: claim, extract, review, then one apply
  transaction that writes every accepted candidate and the session summary. The models
  are stand-ins: ``TranscriptExtractor`` proposes one memory per user turn (quoting it)
  and ``TableReviewer`` from ``retold.testing`` accepts each one.

Every process judges duplicates with ``StandInJudge``: the exact judge plus a
``JUDGE_S`` pause per call, the cost of the NLI cross-encoder, which runs under the write
lock. Embeddings come from the FakeEmbedder (``--model fake``, the default, so the figures
measure the store) or from the packaged MiniLM on one thread (``--model minilm``).

Phases on the same store, each ``--seconds`` long: ``retrieval.search_log.writes``
``inline`` (each search writes its log row itself, waiting for the write lock) and
``background`` (the default). Reports each phase's search wall time p50/p95/p99/max, tool
errors and exceptions, the search's own ``log`` step, the agents' search-log writers and
what the workers extracted.

Run: ``.venv/bin/python -m benchmarks.contention_bench [--seconds 20] [--records 300]``.
Writes benchmarks/results/contention.json and contention.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing as mp
import os
import queue
import random
import statistics
import tempfile
import time
from collections import Counter
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.report import RESULTS, machine, percentile, pin_threads, summarize, write_report  # noqa: E402

pin_threads()

from retold import build_runtime, load_config  # noqa: E402
from retold.errors import RetoldError  # noqa: E402
from retold.index.embedder import FakeEmbedder  # noqa: E402
from retold.ingest.equivalence import ExactJudge, Verdict  # noqa: E402
from retold.ingest.ingestor import WriteRequest  # noqa: E402
from retold.models import (  # noqa: E402
    CandidateRecord,
    ExtractionContext,
    ExtractionOutput,
    Principal,
    Scope,
    SessionSummary,
    Turn,
)
from retold.runtime import Runtime  # noqa: E402
from retold.testing import TableReviewer  # noqa: E402

AGENTS, WORKERS = 4, 2
USERS = ["priya", "aditya", "mei", "tomas"]  # agent i works for USERS[i]
SEED_AGENT = "seed-agent"
SESSION_OPS = 8  # operations per agent session; its end queues the session for extraction
WRITE_EVERY = 10  # every tenth agent operation is a memory_write
JUDGE_S = 0.01  # per judge call, under the write lock when it decides a write
THINK_S = 0.02  # most an agent waits between operations (uniform)
MODES = ("inline", "background")
MODELS = ("fake", "minilm")

TOOLS = ["vim", "emacs", "pytest", "ruff", "docker", "postgres", "redis", "celery", "grafana",
         "terraform", "bazel", "poetry"]
TASKS = ["code review", "deploys", "hotfixes", "load tests", "migrations", "on-call notes",
         "release notes", "incident reviews", "benchmarks", "data backfills"]


class StandInJudge(ExactJudge):
    """The exact judge, paying a cross-encoder's time on every call."""

    name = "exact+pause"

    def judge_many(self, pairs: list[tuple[str, str]]) -> list[Verdict]:
        time.sleep(JUDGE_S)
        return super().judge_many(pairs)

    def entails(self, premise: str, hypothesis: str) -> float | None:
        time.sleep(JUDGE_S)
        return super().entails(premise, hypothesis)


class TranscriptExtractor:
    """Proposes one memory per user turn, quoting that turn, and a three-sentence summary."""

    name = "transcript"
    prompt_version = "transcript-1"
    replayed = False

    def extract(self, transcript: list[Turn], context: ExtractionContext) -> ExtractionOutput:
        user = context.principal.user_id.capitalize()
        candidates = [
            CandidateRecord(type="semantic", content=f"{user} said: {turn.content}",
                            attribute=f"said_{turn.session_id}_{turn.turn}",
                            source_kind="user_statement", evidence=turn.content,
                            evidence_turn=turn.turn, entity_mentions=[], confidence=0.8)
            for turn in transcript if turn.role == "user"
        ]
        summary = SessionSummary(
            f"{user} talked through their tools with the agent. The agent searched memory "
            f"before each answer. {len(candidates)} statements were made.", [], [])
        return ExtractionOutput(candidates, summary)


class QueueScheduler:
    """Hands an ended session's id to the workers, as a broker would."""

    def __init__(self, ids: Any) -> None:
        self.ids = ids

    def schedule(self, session_id: str) -> None:
        self.ids.put(session_id)


def _runtime(path: str, mode: str, model: str, **parts: Any) -> Runtime:
    embedding = {"model": "fake"} if model == "fake" else {"torch_threads": 1}
    config = load_config(overrides={"store": {"path": path}, "embedding": embedding,
                                    "retrieval": {"search_log": {"writes": mode}}})
    parts.setdefault("judge", StandInJudge())
    embedder = FakeEmbedder() if model == "fake" else None
    return build_runtime(config, embedder=embedder, environ={}, **parts)


def _statement(rng: random.Random, user: str, tag: str) -> str:
    return (f"I use {rng.choice(TOOLS)} for {rng.choice(TASKS)} now, "
            f"since the {tag} change made it easier.")


def _memory(rng: random.Random, user: str, tag: str) -> WriteRequest:
    tool, task = rng.choice(TOOLS), rng.choice(TASKS)
    return WriteRequest(type="semantic", content=f"{user.capitalize()} uses {tool} for {task} ({tag}).",
                        attribute=f"tool_{tag}")


def seed(path: str, records: int, model: str) -> None:
    """Users, grants and ``records`` memories spread over the four users."""
    rt = _runtime(path, "inline", model, judge=ExactJudge())
    rng = random.Random(0)
    for i, user in enumerate(USERS):
        rt.host.provision_user(user, aliases=[user.capitalize()])
        rt.host.grant(f"agent-{i}", Scope("user", user), read=True, write=True)
        rt.host.grant(SEED_AGENT, Scope("user", user), read=True, write=True)
    for n in range(records):
        user = USERS[n % len(USERS)]
        result = rt.ingestor.write(Principal(SEED_AGENT, user, None, None),
                                   _memory(rng, user, f"seed{n}"), origin="tool")
        assert result.ok, result.note
    rt.close()


def agent(path: str, mode: str, model: str, index: int, seconds: float, ids: Any, ready: Any,
          start: Event, out: Any) -> None:
    """Turns, searches and writes in sessions as agent ``index`` until the phase ends."""
    rt = _runtime(path, mode, model, scheduler=QueueScheduler(ids))
    user = USERS[index]
    rng = random.Random(100 + index)
    warm = rt.tools.call("memory_search", Principal(f"agent-{index}", user, None, None),
                         {"queries": ["warm up"]})  # loads the index
    assert "error" not in warm, warm
    ready.put(index)
    start.wait()
    latency: list[float] = []
    log_step: list[float] = []
    errors: Counter[str] = Counter()
    writes = sessions = 0
    deadline = time.monotonic() + seconds
    n = 0
    while time.monotonic() < deadline:
        principal = Principal(f"agent-{index}", user, f"{mode}-{index}-{sessions}", None)
        rt.hooks.on_session_start(principal)
        for _ in range(SESSION_OPS):
            n += 1
            try:
                principal = rt.hooks.on_turn(principal, "user", _statement(rng, user, f"{mode}{n}"))
                if n % WRITE_EVERY == 0:
                    request = _memory(rng, user, f"{mode}{index}_{n}")
                    result = rt.tools.call("memory_write", principal, {
                        "type": request.type, "content": request.content,
                        "attribute": request.attribute, "source_kind": "agent_inference"})
                    writes += 1
                else:
                    query = f"{rng.choice(TOOLS)} for {rng.choice(TASKS)}"
                    started = time.perf_counter()
                    result = rt.tools.call("memory_search", principal, {"queries": [query]})
                    latency.append((time.perf_counter() - started) * 1000)
                    log_step.append(float(result.get("timings_ms", {}).get("log", 0.0)))
                if "error" in result:
                    errors[f"tool:{result['error']['code']}"] += 1
                principal = rt.hooks.on_turn(principal, "assistant", "Noted; I checked memory first.")
            except RetoldError as exc:
                errors[f"raised:{type(exc).__name__}"] += 1
            time.sleep(rng.uniform(0, THINK_S))
            if time.monotonic() >= deadline:
                break
        rt.hooks.on_session_end(principal)
        sessions += 1
    rt.close()  # background mode: writes the rows still queued
    out.put({"role": "agent", "latency": latency, "log_step": log_step, "writes": writes,
             "sessions": sessions, "errors": dict(errors),
             "log_rows": dataclasses.asdict(rt.search_log.stats())})


def worker(path: str, mode: str, model: str, index: int, seconds: float, ids: Any, ready: Any,
           start: Event, out: Any) -> None:
    """Extract the sessions the agents end until the phase ends."""
    rt = _runtime(path, mode, model, extractor=TranscriptExtractor(), reviewer=TableReviewer())
    rt.refresh_index()
    ready.put(100 + index)
    start.wait()
    outcomes: Counter[str] = Counter()
    written = 0
    run_ms: list[float] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            session_id = ids.get(timeout=0.1)
        except queue.Empty:
            continue
        started = time.perf_counter()
        result = rt.session_end.run(session_id)
        run_ms.append((time.perf_counter() - started) * 1000)
        outcomes[result.outcome] += 1
        written += int(result.counts.get("written", 0))
    rt.close()
    out.put({"role": "worker", "outcomes": dict(outcomes), "written": written, "run_ms": run_ms})


def run_phase(path: str, mode: str, seconds: float, model: str) -> dict[str, Any]:
    """Four agents and two extraction workers on one store for ``seconds``."""
    ctx = mp.get_context("spawn")
    ids, ready, out, start = ctx.Queue(), ctx.Queue(), ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=agent, args=(path, mode, model, i, seconds, ids, ready, start, out))
             for i in range(AGENTS)]
    procs += [ctx.Process(target=worker, args=(path, mode, model, i, seconds, ids, ready, start, out))
              for i in range(WORKERS)]
    for proc in procs:
        proc.start()
    for _ in procs:
        ready.get(timeout=300)
    start.set()
    results = [out.get(timeout=seconds + 300) for _ in procs]
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0, f"{proc.name} exited {proc.exitcode}"
    agents = [r for r in results if r["role"] == "agent"]
    workers = [r for r in results if r["role"] == "worker"]
    latency = [ms for r in agents for ms in r["latency"]]
    log_step = [ms for r in agents for ms in r["log_step"]]
    rows = {key: sum(r["log_rows"][key] for r in agents)
            for key in ("submitted", "written", "dropped", "failed", "erased")}
    errors: Counter[str] = Counter()
    outcomes: Counter[str] = Counter()
    for r in agents:
        errors.update(r["errors"])
    for r in workers:
        outcomes.update(r["outcomes"])
    run_ms = [ms for r in workers for ms in r["run_ms"]]
    return {
        "mode": mode, "seconds": seconds, "model": model,
        "search_ms": summarize(latency) | {"p99": percentile(latency, 0.99),
                                           "max": round(max(latency), 3)},
        "log_step_ms": {"p50": percentile(log_step, 0.5), "p99": percentile(log_step, 0.99),
                        "max": round(max(log_step), 3)},
        "errors": dict(errors), "agent_writes": sum(r["writes"] for r in agents),
        "sessions_ended": sum(r["sessions"] for r in agents),
        "extraction": {"outcomes": dict(outcomes), "records_written": sum(r["written"] for r in workers),
                       "run_ms_p50": round(statistics.median(run_ms), 3) if run_ms else None},
        "log_rows": rows,
    }


def run_contention(seconds: float, records: int, modes: list[str], model: str) -> dict[str, Any]:
    """Seed one store, then run each phase on it; everything the report needs."""
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "contention.sqlite")
        seed(path, records, model)
        phases = [run_phase(path, mode, seconds, model) for mode in modes]
    return {"agents": AGENTS, "workers": WORKERS, "seed_records": records, "model": model,
            "session_ops": SESSION_OPS, "write_every": WRITE_EVERY, "judge_s": JUDGE_S,
            "phases": phases, "total_s": round(time.perf_counter() - started, 1)}


def table(data: dict[str, Any]) -> list[list[str]]:
    """One row per phase: search percentiles, errors, log rows and extraction."""
    rows = [["search_log writes", "searches", "p50 ms", "p95 ms", "p99 ms", "max ms", "errors",
             "log step p50 / p99 ms", "rows written / dropped / failed",
             "sessions ended / extracted", "records extracted"]]
    for phase in data["phases"]:
        s, log, extraction = phase["search_ms"], phase["log_rows"], phase["extraction"]
        errors = ", ".join(f"{k} {v}" for k, v in sorted(phase["errors"].items())) or "0"
        rows.append([phase["mode"], str(s["n"]), f"{s['p50']:.1f}", f"{s['p95']:.1f}",
                     f"{s['p99']:.1f}", f"{s['max']:.1f}", errors,
                     f"{phase['log_step_ms']['p50']:.2f} / {phase['log_step_ms']['p99']:.2f}",
                     f"{log['written']} / {log['dropped']} / {log['failed']}",
                     f"{phase['sessions_ended']} / {extraction['outcomes'].get('extracted', 0)}",
                     str(extraction["records_written"])])
    return rows


def notes(data: dict[str, Any], seconds: float) -> str:
    """What the run did, in one paragraph."""
    model = "fake embedder" if data["model"] == "fake" else "MiniLM on one thread per process"
    return (f"{AGENTS} agent processes (sessions of {SESSION_OPS} operations: a user turn, a "
            f"memory_search or every {WRITE_EVERY}th a memory_write, an assistant turn) and "
            f"{WORKERS} extraction workers (`rt.session_end.run` on each ended session: one "
            f"memory per user turn, all accepted, applied in one transaction with the summary) "
            f"on one store, {model}, a {JUDGE_S * 1000:.0f} ms judge stand-in per call, "
            f"{seconds:.0f} s per phase. Search wall time per call; the log step is the "
            "search's own time from the last stage to its return (building the row, then "
            "writing it inline; in background mode a tool search hands the row to the writer "
            "after its result is built, outside this step).")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each phase")
    parser.add_argument("--records", type=int, default=300, help="memories written before the run")
    parser.add_argument("--modes", default=",".join(MODES),
                        help="search_log write modes to run, one phase each (inline,background)")
    parser.add_argument("--model", choices=MODELS, default="fake",
                        help="fake embedder (measures the store) or the packaged MiniLM")
    parser.add_argument("--results-dir", type=Path, default=RESULTS,
                        help="where contention.json and contention.md go")
    args = parser.parse_args()
    modes = args.modes.split(",")
    assert set(modes) <= set(MODES), f"--modes takes {', '.join(MODES)}"
    data = run_contention(args.seconds, args.records, modes, args.model)
    rows = table(data)
    write_report("contention", {"machine": machine(), **data}, rows, notes(data, args.seconds),
                 directory=args.results_dir)
    print("\n".join(" | ".join(row) for row in rows))


if __name__ == "__main__":
    main()
