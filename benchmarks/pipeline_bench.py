"""Queue pipeline benchmark (Celery workers, Redis queue): sessions/s through real Celery
workers, and the queue + pipeline overhead per session.

Sessions of 20 turns whose extraction proposes 5 candidates (every one accepted and
written) are ended in this process with the production ``CeleryScheduler``; real worker
processes (``celery -A workers worker``) extract them with the production wiring: the
hosted extractor and reviewer over the real Anthropic SDK, pointed (``hosted.base_url``)
at a loopback stub in this process that answers every request after a fixed model
latency (0 or 200 ms). Embeddings come from the FakeEmbedder and duplicates are judged by
the exact judge. Every combination of broker (Redis, the embedded SQLite broker), model
latency and worker processes (1: ``-P solo``; 2: ``-P prefork -c 2``) gets a fresh store
and fresh workers, then:

- warm-up: a few untimed sessions, so every worker process has built its runtime and
  imported the SDK;
- overhead (serial): ``--sessions`` sessions ended one at a time, each waited for; the
  overhead of one session is ``extracted_at`` (stamped by the worker inside its apply
  transaction) minus the wall time just before ``on_session_end`` in this process, minus
  the stub's configured latency x 2 hosted calls. It includes broker hops, the task,
  the SDK round trips' own cost, validation, the writes and the summary;
- throughput (burst): ``--sessions`` sessions ended back to back; sessions/s is their
  count over the time from the first ``on_session_end`` to the last ``extracted_at``.

Backlog after an outage: ``--backlog`` sessions (500) are ended while the agent's broker is
down, so every one is left pending with nothing in the queue (how long the outage lasted
does not matter: nothing moves while the broker is down, and what it leaves is the
backlog). Then the broker answers again, one worker starts on Redis, and the bench sends
``retold.recover`` every ``--sweep-s`` seconds (1 s, thirty times as often as beat, which
only makes duplicates likelier) until every session is extracted. Deliveries are the
extraction tasks the worker received; per session they count the duplicates a sweep
caused.

Targets: overhead p50 <= 50 ms per session on Redis; with 200 ms model latency, 2 worker
processes reach >= 1.7x the throughput of one; after the outage, deliveries per session
<= 1.2.

Run: ``.venv/bin/python -m benchmarks.pipeline_bench [--sessions 20] [--backlog 500]``
(Redis must answer at 127.0.0.1:6379; database 9 is flushed). Writes
benchmarks/results/pipeline.json and pipeline.md; ``--only backlog`` runs the backlog case
alone and writes pipeline_backlog.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

from benchmarks.report import machine, pin_threads, summarize, write_report  # noqa: E402

pin_threads()

import redis  # noqa: E402
import yaml  # noqa: E402

from benchmarks.extraction_bench import review_answer, session_script  # noqa: E402
from retold import build_runtime, load_config  # noqa: E402
from retold.broker import CeleryScheduler  # noqa: E402
from retold.broker.celery_app import celery_app  # noqa: E402
from retold.models import Principal, Scope  # noqa: E402
from retold.runtime import Runtime  # noqa: E402
from retold.testing.anthropic_stub import AnthropicStub, Behaviour, tool_use  # noqa: E402

AGENT, USER = "bench-agent", "aditya"
TURNS, CANDIDATES = 20, 5
REDIS_URL = "redis://127.0.0.1:6379/9"
BROKERS = ["redis", "embedded"]
LATENCIES_MS = [0, 200]
WORKERS = [1, 2]
CALLS_PER_SESSION = 2
TARGET_OVERHEAD_P50_MS = 50.0
TARGET_SCALING = 1.7
TARGET_DELIVERIES_PER_SESSION = 1.2
DEAD_BROKER = "redis://127.0.0.1:1/0"
_RECEIVED = re.compile(rb"Task retold\.(?:extract|review)_session\[[^\]]+\] received")
WAIT_S = 60.0
EXTRACTION_TOOL = "record_extraction"
_TAG = re.compile(r"tool-([A-Za-z0-9]+)-\d+-\d+")


class LatencyStub(AnthropicStub):
    """The loopback stub, answering from the request instead of a script: the extraction
    answer of the session whose transcript it carries, or a review accepting every
    candidate, each after ``latency_s`` (concurrent workers interleave their requests,
    so a FIFO script would hand one session's answer to another)."""

    latency_s = 0.0
    answers: dict[str, dict[str, Any]]

    def _next(self, body: dict[str, Any], headers: dict[str, str]) -> Behaviour | None:
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)
        if (body.get("tool_choice") or {}).get("name") == EXTRACTION_TOOL:
            match = _TAG.search(json.dumps(body.get("messages")))
            answer = self.answers.get(match.group(1)) if match else None
            return None if answer is None else tool_use(answer, delay_s=self.latency_s)
        return tool_use(review_answer(CANDIDATES), delay_s=self.latency_s)


class Worker:
    """``celery -A workers worker`` in its own process group, stopped (then killed) by ``stop``."""

    def __init__(self, tmp: Path, config_path: Path, broker: str | None, processes: int) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RETOLD_")}
        env.update(RETOLD_CONFIG=str(config_path), PYTHONPATH=str(ROOT), ANTHROPIC_API_KEY="bench-key")
        if broker:
            env["RETOLD_BROKER_URL"] = broker
        pool = ["-P", "solo"] if processes == 1 else ["-P", "prefork", "-c", str(processes)]
        self.log = tmp / "worker.log"
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "workers", "worker", *pool,
                 "-Q", "extraction,maintenance", "--loglevel=INFO", "-n", f"bench-{os.getpid()}@%h",
                 "--without-gossip", "--without-mingle"],
                cwd=tmp, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self) -> None:
        wait_until(lambda: self.log.exists() and b"ready." in self.log.read_bytes(), "the worker", self,
                   poll_s=0.05)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                pass
        try:  # prefork children left behind by a main process that did not stop in time
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=10)


def wait_until(predicate: Callable[[], bool], what: str, worker: Worker, timeout: float = WAIT_S,
               poll_s: float = 0.005) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if worker.proc.poll() is not None:
            break
        time.sleep(poll_s)
    raise RuntimeError(f"timed out waiting for {what}:\n{worker.log.read_text(errors='replace')[-3000:]}")


class Sessions:
    """Builds sessions in the bench process's runtime and reads back their ``extracted_at``."""

    def __init__(self, rt: Runtime, stub: LatencyStub, prefix: str) -> None:
        self.rt, self.stub, self.prefix, self.count = rt, stub, prefix, 0

    def talk(self) -> Principal:
        tag = f"{self.prefix}s{self.count}"
        self.count += 1
        transcript, answer = session_script(tag, TURNS, CANDIDATES)
        self.stub.answers[tag] = answer
        principal = Principal(AGENT, USER, f"bench-{tag}", None)
        self.rt.hooks.on_session_start(principal)
        for role, text in transcript:
            principal = self.rt.hooks.on_turn(principal, role, text)
        return principal

    def extracted_at(self, session_id: str) -> float | None:
        session = self.rt.store.get_session(session_id)
        return None if session is None or session.extracted_at is None else session.extracted_at.timestamp()


def run_config(tmp: Path, stub: LatencyStub, broker: str, latency_ms: int, processes: int,
               sessions: int) -> dict[str, Any]:
    name = f"{broker}-{latency_ms}ms-{processes}w"
    work = tmp / name
    work.mkdir()
    config_path = _config_file(work, stub)
    broker_url = REDIS_URL if broker == "redis" else None
    if broker_url:
        client = redis.Redis.from_url(broker_url)
        client.flushdb()
        client.close()
    overrides = {"queue": {"broker_url": broker_url}} if broker_url else None
    config = load_config(config_path, overrides=overrides)
    stub.latency_s = latency_ms / 1000
    requests_before = len(stub.requests)
    # queue.scheduler's default publishes to the broker the worker reads; no key, so this
    # process never extracts
    rt = build_runtime(config, environ={})
    rt.host.grant(AGENT, Scope("user", USER), read=True, write=True)
    rt.host.provision_user(USER, aliases=["Aditya"])
    made = Sessions(rt, stub, name.replace("-", "").replace("ms", "m"))
    worker = Worker(work, config_path, broker_url, processes)
    try:
        worker.wait_ready()
        # Warm-up: every worker process builds its runtime and imports the SDK.
        warm = [made.talk() for _ in range(2 * processes)]
        for p in warm:
            rt.hooks.on_session_end(p)
        for p in warm:
            sid = p.session_id or ""
            wait_until(lambda sid=sid: made.extracted_at(sid) is not None, "the warm-up", worker)

        overhead, end_to_end = [], []
        for _ in range(sessions):
            p = made.talk()
            sid = p.session_id or ""
            started = time.time()
            rt.hooks.on_session_end(p)
            wait_until(lambda sid=sid: made.extracted_at(sid) is not None, "a serial session", worker)
            done = made.extracted_at(sid) or 0.0
            end_to_end.append((done - started) * 1000)
            overhead.append((done - started) * 1000 - CALLS_PER_SESSION * latency_ms)

        burst = [made.talk() for _ in range(sessions)]
        started = time.time()
        for p in burst:
            rt.hooks.on_session_end(p)
        ids = [p.session_id or "" for p in burst]
        wait_until(lambda: all(made.extracted_at(sid) is not None for sid in ids), "the burst", worker,
                   poll_s=0.02)
        last = max(made.extracted_at(sid) or 0.0 for sid in ids)
        throughput = sessions / (last - started)

        total = made.count
        runs = rt.store.events(kind="extraction.run")
        written = sum(r.source_kind != "session_summary" for r in rt.store.find_records())
        calls = len(stub.requests) - requests_before
        assert len(runs) == total, (len(runs), total)
        assert written == total * CANDIDATES, (written, total)
        assert calls == total * CALLS_PER_SESSION, (calls, total)
    finally:
        worker.stop()
        rt.close()
    return {
        "broker": broker, "model_latency_ms": latency_ms, "worker_processes": processes,
        "pool": "solo" if processes == 1 else f"prefork -c {processes}", "sessions": sessions,
        "overhead_ms": summarize(overhead), "end_to_end_ms": summarize(end_to_end),
        "burst_sessions_per_s": round(throughput, 2), "hosted_calls": calls, "records_written": written,
    }


def _config_file(work: Path, stub: LatencyStub) -> Path:
    """A fresh store in ``work``, the fake embedder, the exact judge, the hosted models at the stub."""
    config_path = work / "config.yaml"
    config_path.write_text(yaml.safe_dump({
        "store": {"path": str(work / "memory.sqlite")}, "embedding": {"model": "fake"},
        "ingestion": {"equivalence": {"model": "exact"}},
        "hosted": {"base_url": stub.base_url, "max_retries": 0}}))
    return config_path


def run_backlog(tmp: Path, stub: LatencyStub, sessions: int, sweep_s: float) -> dict[str, Any]:
    """The backlog case (module docstring): deliveries per session after an outage."""
    work = tmp / "backlog"
    work.mkdir()
    config_path = _config_file(work, stub)
    client = redis.Redis.from_url(REDIS_URL)
    client.flushdb()
    client.close()
    config = load_config(config_path, overrides={"queue": {"broker_url": REDIS_URL}})
    stub.latency_s = 0.0
    down = CeleryScheduler(load_config(config_path, overrides={"queue": {"broker_url": DEAD_BROKER}}))
    rt = build_runtime(config, environ={}, scheduler=down)  # the agent's broker is down
    rt.host.grant(AGENT, Scope("user", USER), read=True, write=True)
    rt.host.provision_user(USER, aliases=["Aditya"])
    made = Sessions(rt, stub, "backlog")
    publisher = celery_app(config, "publisher")
    worker: Worker | None = None
    try:
        ids = []
        for _ in range(sessions):
            p = made.talk()
            rt.hooks.on_session_end(p)
            ids.append(p.session_id or "")
        assert len(rt.session_end.pending()) == sessions
        worker = Worker(work, config_path, REDIS_URL, 1)
        worker.wait_ready()
        started, sweeps = time.monotonic(), 0
        while not all(made.extracted_at(sid) is not None for sid in ids):
            if worker.proc.poll() is not None or time.monotonic() - started > 20 * WAIT_S:
                raise RuntimeError(f"the backlog did not drain:\n{worker.log.read_text()[-3000:]}")
            publisher.send_task("retold.recover", retry=False)  # what beat does
            sweeps += 1
            time.sleep(sweep_s)
        drained_s = time.monotonic() - started
        time.sleep(2 * sweep_s)  # deliveries still in the queue are received and counted too
        deliveries = len(_RECEIVED.findall(worker.log.read_bytes()))
        runs = len(rt.store.events(kind="extraction.run"))
        assert runs == sessions, (runs, sessions)
    finally:
        if worker is not None:
            worker.stop()
        publisher.close()
        down.close()
        rt.close()
    per_session = deliveries / sessions
    return {"sessions": sessions, "sweep_every_s": sweep_s, "recover_sweeps": sweeps,
            "batch_size": config.queue.recover_batch_size, "deliveries": deliveries,
            "deliveries_per_session": round(per_session, 3), "extraction_runs": runs,
            "drained_s": round(drained_s, 1), "target_max": TARGET_DELIVERIES_PER_SESSION,
            "ok": per_session <= TARGET_DELIVERIES_PER_SESSION}


def _backlog_row(row: dict[str, Any]) -> list[str]:
    return [str(row["sessions"]), str(row["recover_sweeps"]), str(row["deliveries"]),
            f"{row['deliveries_per_session']:.3f}", f"{row['drained_s']:.1f}",
            "met" if row["ok"] else "MISSED"]


BACKLOG_HEADER = ["sessions", "recover sweeps", "deliveries", "per session", "drained (s)",
                  f"<= {TARGET_DELIVERIES_PER_SESSION}"]


def main_backlog(sessions: int, sweep_s: float) -> None:
    """``--only backlog``: the backlog case alone, in its own report."""
    stub = LatencyStub()
    stub.answers = {}
    stub.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            row = run_backlog(Path(tmp), stub, sessions, sweep_s)
    finally:
        stub.stop()
    print(" | ".join(_backlog_row(row)))
    write_report("pipeline_backlog", {"machine": machine(), "backlog": row},
                 [BACKLOG_HEADER, _backlog_row(row)], notes=(
                     f"{sessions} sessions ended while the agent's broker was down, then one solo worker on "
                     f"Redis and a recover sweep every {sweep_s:g} s until all were extracted; deliveries = "
                     "extraction tasks the worker received."))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--backlog", type=int, default=500, help="sessions left pending by the outage")
    parser.add_argument("--sweep-s", type=float, default=1.0, help="seconds between recover sweeps")
    parser.add_argument("--only", choices=["all", "backlog"], default="all")
    args = parser.parse_args()
    if args.only == "backlog":
        main_backlog(args.backlog, args.sweep_s)
        return
    results: dict[str, Any] = {
        "machine": machine(), "embedder": "fake", "judge": "exact", "turns": TURNS, "candidates": CANDIDATES,
        "hosted": "real anthropic SDK in the workers -> loopback stub in the bench process",
        "targets": {"overhead_p50_ms_max_redis": TARGET_OVERHEAD_P50_MS,
                    "two_worker_scaling_min_at_200ms": TARGET_SCALING,
                    "backlog_deliveries_per_session_max": TARGET_DELIVERIES_PER_SESSION},
        "configs": {},
    }
    table = [["broker", "model latency (ms)", "worker processes", "sessions/s (burst)", "scaling vs 1",
              "overhead p50 / p95 (ms)", "end to end p50 (ms)"]]
    stub = LatencyStub()
    stub.answers = {}
    stub.start()
    with tempfile.TemporaryDirectory() as tmp:
        try:
            for broker in BROKERS:
                for latency in LATENCIES_MS:
                    single: float | None = None
                    for processes in WORKERS:
                        row = run_config(Path(tmp), stub, broker, latency, processes, args.sessions)
                        rate = row["burst_sessions_per_s"]
                        single = rate if processes == 1 else single
                        row["scaling_vs_one_worker"] = round(rate / single, 2) if single else None
                        results["configs"][f"{broker}-{latency}ms-{processes}w"] = row
                        table.append([
                            broker, str(latency), row["pool"], f"{rate:.2f}",
                            f"{row['scaling_vs_one_worker']:.2f}x" if processes > 1 else "-",
                            f"{row['overhead_ms']['p50']:.1f} / {row['overhead_ms']['p95']:.1f}",
                            f"{row['end_to_end_ms']['p50']:.1f}",
                        ])
                        print(" | ".join(table[-1]), flush=True)
            results["backlog"] = run_backlog(Path(tmp), stub, args.backlog, args.sweep_s)
        finally:
            stub.stop()
    configs = results["configs"].values()
    redis_p50 = max(r["overhead_ms"]["p50"] for r in configs if r["broker"] == "redis")
    scaling = {r["broker"]: r["scaling_vs_one_worker"] for r in configs
               if r["model_latency_ms"] == 200 and r["worker_processes"] == 2}
    results["verdict"] = {
        "worst_redis_overhead_p50_ms": redis_p50, "overhead_ok": redis_p50 <= TARGET_OVERHEAD_P50_MS,
        "scaling_at_200ms": scaling, "scaling_ok_redis": scaling["redis"] >= TARGET_SCALING,
        "scaling_ok_embedded": scaling["embedded"] >= TARGET_SCALING,
        "backlog_deliveries_per_session": results["backlog"]["deliveries_per_session"],
        "backlog_ok": results["backlog"]["ok"],
    }
    verdict = (
        f"Targets: overhead p50 <= {TARGET_OVERHEAD_P50_MS:.0f} ms per session on Redis (worst "
        f"{redis_p50:.1f} ms: {'met' if redis_p50 <= TARGET_OVERHEAD_P50_MS else 'MISSED'}); with 200 ms "
        f"model latency 2 workers >= {TARGET_SCALING}x one worker (Redis {scaling['redis']:.2f}x: "
        f"{'met' if scaling['redis'] >= TARGET_SCALING else 'MISSED'}; embedded {scaling['embedded']:.2f}x: "
        f"{'met' if scaling['embedded'] >= TARGET_SCALING else 'MISSED'}); after an outage left "
        f"{args.backlog} sessions pending, deliveries per session <= {TARGET_DELIVERIES_PER_SESSION} "
        f"({results['backlog']['deliveries_per_session']:.3f}: "
        f"{'met' if results['backlog']['ok'] else 'MISSED'}).")
    print(verdict)
    write_report("pipeline", results, table, notes=(
        f"{verdict} {args.sessions} serial sessions (overhead) and {args.sessions} burst sessions "
        f"(throughput) per row after warm-up, {TURNS} turns / {CANDIDATES} candidates each, fresh store "
        f"and workers per row; overhead = extracted_at - on_session_end start - 2 x model latency; "
        f"fake embedder, exact judge, real SDK to a loopback stub."))


if __name__ == "__main__":
    main()
