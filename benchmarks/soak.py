"""Soak: the write pipeline under worker kills, a frozen Redis and a Redis restart, for a
long run outside CI.

Four agents (each its own runtime and RAM index, in threads of this process) hold a
session every ``--gap-s`` against one SQLite store: turns, a ``memory_write`` quoting the user, a
``memory_search``, now and then a ``memory_revise`` confirming a record another agent
wrote, and the session's end, published to a Redis this run starts itself. Two solo
workers extract the sessions with the production wiring (the hosted extractor and
reviewer over the real Anthropic SDK, pointed at a loopback stub answering after
``--latency-ms``); a real beat runs the shipped schedule. A supervisor thread restarts
any worker or beat that exits, as systemd or compose would.

Faults, spread over ``--minutes``: ``--kills`` SIGKILLs of a random worker, evenly spaced;
Redis stopped with SIGSTOP for ``--freeze-s`` at 30% of the run; Redis killed and started
empty (the shipped Redis keeps nothing across a restart) at 60%. Then the agents stop,
the faults stop, and the run waits up to ``--drain-s`` for every ended session.

Reported: sessions ended; lost (ended, never extracted by the end of the drain);
duplicated (more than one ``extraction.run`` event); late (extracted more than one
recover interval plus ``SLACK_S`` after it ended, not counting time Redis was frozen or
down after its end) and stranded (late by more than one further recover interval), the
latter also counted from the last worker kill that hit the session (the kill before its
last takeover), since each kill of a holder costs a lease and a sweep again; for each
late session, what it met while it waited;
per agent, the records its index is missing or holds beyond the store after a final
refresh; search p50/p99 across agents.

Targets: 0 lost, 0 duplicated, 0 stranded, every index equal to the store.

Run: ``.venv/bin/python -m benchmarks.soak [--minutes 30] [--kills 200]`` (needs
``redis-server`` on PATH). Writes benchmarks/results/soak.json and soak.md.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

from benchmarks.report import machine, percentile, pin_threads, write_report  # noqa: E402

pin_threads()

import redis  # noqa: E402
import yaml  # noqa: E402

from beat_schedule import SCHEDULE  # noqa: E402
from benchmarks.extraction_bench import session_script  # noqa: E402
from benchmarks.pipeline_bench import CANDIDATES as PIPELINE_CANDIDATES  # noqa: E402
from benchmarks.pipeline_bench import LatencyStub  # noqa: E402
from retold import build_runtime, load_config  # noqa: E402
from retold.clock import from_iso  # noqa: E402
from retold.models import Principal, Scope  # noqa: E402
from retold.runtime import Runtime  # noqa: E402
from tests.ports import free_port  # noqa: E402

AGENTS = 4
WORKERS = 2
USER = "aditya"
TURNS = 10
# The stub reviews every session as proposing this many candidates (pipeline_bench.LatencyStub).
CANDIDATES = PIPELINE_CANDIDATES
RECOVER_S = float(SCHEDULE["recover"]["seconds"])
# Beyond one recover interval: a worker's restart, its runtime's start and the model calls.
SLACK_S = 30.0


class OwnRedis:
    """A redis-server on a free port, as the shipped one runs (nothing kept on restart)."""

    def __init__(self, folder: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise SystemExit("the soak needs redis-server on PATH")
        self.binary, self.folder, self.port = binary, folder, free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc = self._start()

    def _start(self) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen([self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
                                 "--save", "", "--appendonly", "no", "--dir", str(self.folder)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis(port=self.port, socket_timeout=2)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                if client.ping():
                    client.close()
                    return proc
            except redis.ConnectionError:
                time.sleep(0.05)
        raise SystemExit("the soak's redis-server did not start")

    def freeze(self, seconds: float) -> None:
        self.proc.send_signal(signal.SIGSTOP)
        time.sleep(seconds)
        self.proc.send_signal(signal.SIGCONT)

    def restart(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)
        self.proc = self._start()

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGCONT)
        self.proc.terminate()
        self.proc.wait(timeout=10)


class Supervised:
    """One Celery process (a worker or beat) that is started again whenever it exits."""

    def __init__(self, name: str, args: list[str], folder: Path, env: dict[str, str]) -> None:
        self.name, self.args, self.folder, self.env = name, args, folder, env
        self.log = folder / f"{name}.log"
        self.starts = 0
        self.proc = self._start()

    def _start(self) -> subprocess.Popen[bytes]:
        self.starts += 1
        with self.log.open("ab") as log:
            return subprocess.Popen([sys.executable, "-m", "celery", "-A", "workers", *self.args],
                                    cwd=self.folder, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)

    def keep_alive(self) -> None:
        if self.proc.poll() is not None:
            self.proc = self._start()

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
        self.kill()


@dataclass
class Agent:
    """One agent's runtime and what it did."""

    name: str
    rt: Runtime
    ended: dict[str, float] = field(default_factory=dict)  # session id -> wall time of its end
    written: list[str] = field(default_factory=list)
    search_ms: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _agent_loop(agent: Agent, stub: LatencyStub, stop: threading.Event, others: list[Agent],
                gap_s: float) -> None:
    n = 0
    rng = random.Random(agent.name)
    while not stop.is_set():
        tag = f"{agent.name.replace('-', '')}x{n}"
        n += 1
        transcript, answer = session_script(tag, TURNS, CANDIDATES)
        stub.answers[tag] = answer
        p = Principal(agent.name, USER, f"soak-{tag}", None)
        agent.rt.hooks.on_session_start(p)
        for role, text in transcript:
            p = agent.rt.hooks.on_turn(p, role, text)
        quote = transcript[0][1]
        written = agent.rt.tools.call("memory_write", p, {
            "type": "semantic", "content": f"{agent.name} noted: {quote}", "attribute": f"note_{tag}",
            "source_kind": "user_statement", "evidence": quote})
        if "record_id" in written:
            agent.written.append(written["record_id"])
        elif "error" in written:
            agent.errors.append(str(written["error"]["code"]))
        query = f"which tool does {USER} use for {rng.choice(['build', 'deploy'])}"
        started = time.perf_counter()
        found = agent.rt.tools.call("memory_search", p, {"queries": [query]})
        agent.search_ms.append((time.perf_counter() - started) * 1000)
        if "error" in found:
            agent.errors.append(str(found["error"]["code"]))
        theirs = [r for other in others if other is not agent for r in other.written[-20:]]
        if theirs and rng.random() < 0.3:
            confirmed = agent.rt.tools.call("memory_revise", p, {
                "id": rng.choice(theirs), "action": "confirm", "reason": "seen again in this session"})
            if "error" in confirmed and confirmed["error"]["code"] not in ("not_found", "invalid_state"):
                agent.errors.append(str(confirmed["error"]["code"]))
        agent.rt.hooks.on_session_end(p)
        agent.ended[p.session_id or ""] = time.time()
        stop.wait(gap_s)


def _index_gap(rt: Runtime) -> dict[str, int]:
    """Records the agent's index lacks, or holds beyond, the store's live vectors."""
    rt.index.refresh(rt.store, rt.config.embedding.incremental_reload_max)
    live = rt.index.live
    held = {rid for i, rid in enumerate(rt.index.ids) if live[i]}
    snap = rt.store.load_vectors(rt.index.model, rt.index.version, rt.index.dims)
    stored = set(snap.ids)
    return {"missing": len(stored - held), "extra": len(held - stored)}


def _spread(values: list[float]) -> dict[str, float] | None:
    """Median, p99 and maximum, or None for no values."""
    if not values:
        return None
    return {"p50": percentile(values, 0.5), "p99": percentile(values, 0.99), "max": round(max(values), 3),
            "n": len(values)}


def _down_after(ended: float, windows: list[tuple[float, float]], until: float) -> float:
    """Seconds between ``ended`` and ``until`` during which Redis was frozen or restarting."""
    return sum(max(0.0, min(b, until) - max(a, ended)) for a, b in windows)


def run(minutes: float, kills: int, freeze_s: float, drain_s: float, latency_ms: int,
        gap_s: float) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="retold-soak-"))
    own = OwnRedis(tmp)
    stub = LatencyStub()
    stub.answers = {}
    stub.latency_s = latency_ms / 1000
    stub.start()
    config_path = tmp / "config.yaml"
    config_path.write_text(yaml.safe_dump({
        "store": {"path": str(tmp / "memory.sqlite")}, "embedding": {"model": "fake"},
        "ingestion": {"equivalence": {"model": "exact"}},
        "hosted": {"base_url": stub.base_url, "max_retries": 0},
        "queue": {"broker_url": own.url}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RETOLD_")}
    env.update(RETOLD_CONFIG=str(config_path), PYTHONPATH=str(ROOT), ANTHROPIC_API_KEY="soak-key")
    config = load_config(config_path)
    agents = [Agent(f"soak-agent-{i}", build_runtime(config, environ={})) for i in range(AGENTS)]
    for agent in agents:
        agent.rt.host.grant(agent.name, Scope("user", USER), read=True, write=True)
    agents[0].rt.host.provision_user(USER, aliases=["Aditya"])
    processes = [Supervised(f"worker-{i}", ["worker", "-P", "solo", "-Q", "extraction,maintenance",
                                              "--loglevel=INFO", "-n", f"soak{i}-{os.getpid()}@%h"],
                            tmp, env) for i in range(WORKERS)]
    processes.append(Supervised("beat", ["beat", "--loglevel=INFO", "-s", str(tmp / "beat-schedule")],
                                tmp, env))
    stop, done = threading.Event(), threading.Event()

    def supervise() -> None:
        while not done.is_set():
            for proc in processes:
                proc.keep_alive()
            done.wait(0.5)

    keeper = threading.Thread(target=supervise, daemon=True)
    keeper.start()
    threads = [threading.Thread(target=_agent_loop, args=(a, stub, stop, agents, gap_s), daemon=True)
               for a in agents]
    duration = minutes * 60
    started = time.time()
    for t in threads:
        t.start()
    windows: list[tuple[float, float]] = []
    faults = sorted([(duration * k / (kills + 1), "kill") for k in range(1, kills + 1)]
                    + [(duration * 0.3, "freeze"), (duration * 0.6, "restart")])
    rng = random.Random(7)
    killed_at: list[float] = []
    for at, fault in faults:
        time.sleep(max(0.0, started + at - time.time()))
        if fault == "kill":
            rng.choice(processes[:WORKERS]).kill()
            killed_at.append(time.time())
        elif fault == "freeze":
            begin = time.time()
            own.freeze(freeze_s)
            windows.append((begin, time.time()))
        else:
            begin = time.time()
            own.restart()
            windows.append((begin, time.time()))
    time.sleep(max(0.0, started + duration - time.time()))
    stop.set()
    for t in threads:
        t.join(timeout=60)
    ended = {sid: at for a in agents for sid, at in a.ended.items()}
    store = agents[0].rt.store
    deadline = time.time() + drain_s
    while time.time() < deadline:
        if all((s := store.get_session(sid)) is not None and s.extracted_at is not None for sid in ended):
            break
        time.sleep(1)
    done.set()
    for proc in processes:
        proc.stop()
    runs: dict[str, int] = {}
    for event in store.events(kind="extraction.run"):
        sid = str(event["payload"].get("session_id"))
        runs[sid] = runs.get(sid, 0) + 1
    lease_s = config.ingestion.extraction_lease_seconds
    reclaims: dict[str, list[float]] = {}
    for event in store.events(kind="extraction.reclaimed"):
        at = from_iso(event["at"]).timestamp()
        reclaims.setdefault(str(event["payload"].get("session_id")), []).append(at)
    orphaned = {str(sid) for event in store.events(kind="queue.orphans_requeued")
                for sid in event["payload"].get("sessions", [])}
    lags: list[float] = []
    lost = late = stranded = stranded_after_fault = 0
    delayed: list[dict[str, Any]] = []
    for sid, at in ended.items():
        session = store.get_session(sid)
        if session is None or session.extracted_at is None:
            lost += 1
            continue
        done_at = session.extracted_at.timestamp()
        lag = done_at - at - _down_after(at, windows, done_at)
        lags.append(lag)
        late += lag > RECOVER_S + SLACK_S
        stranded += lag > 2 * RECOVER_S + SLACK_S
        # A worker killed while it held the session costs a lease and a sweep; a second
        # kill of the next holder costs them again. Measured from the last kill at least a
        # lease before the session's last takeover (the earliest that kill can have been,
        # so the wait is never understated), the wait says whether recovery itself was slow.
        taken = reclaims.get(sid, [])
        hits = [k for k in killed_at if at <= k <= max(taken) - lease_s] if taken else []
        since = max([at, *hits])
        after_fault = done_at - since - _down_after(since, windows, done_at)
        stranded_after_fault += after_fault > 2 * RECOVER_S + SLACK_S
        if lag > RECOVER_S + SLACK_S:
            delayed.append({
                "ended_at_s": round(at - started, 1), "lag_s": round(lag, 1),
                "after_last_fault_s": round(after_fault, 1), "takeovers": len(taken),
                "kills_while_waiting": sum(at <= k <= done_at for k in killed_at),
                "orphan_requeued": sid in orphaned,
                "redis_down_while_waiting": any(a < done_at and b > at for a, b in windows)})
    report = {
        "machine": machine(), "minutes": minutes, "kills": kills, "freeze_s": freeze_s,
        "latency_ms": latency_ms, "recover_s": RECOVER_S, "slack_s": SLACK_S,
        "sessions_ended": len(ended), "lost": lost,
        "duplicated": sum(1 for sid in ended if runs.get(sid, 0) > 1),
        "late": int(late), "stranded": int(stranded), "stranded_after_last_fault": int(stranded_after_fault),
        "delayed_sessions": delayed,
        "lag_s": _spread(lags),
        "worker_starts": [p.starts for p in processes[:WORKERS]], "beat_starts": processes[-1].starts,
        "index_gap": {a.name: _index_gap(a.rt) for a in agents},
        "search_ms": _spread([ms for a in agents for ms in a.search_ms]),
        "tool_errors": sorted({e for a in agents for e in a.errors}),
    }
    for agent in agents:
        agent.rt.close()
    stub.stop()
    own.stop()
    if lost:  # keep the logs of a run that lost sessions
        print(f"sessions were lost; the store and the logs are kept in {tmp}", file=sys.stderr)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return report


def _table(r: dict[str, Any]) -> list[list[str]]:
    search = r["search_ms"] or {"p50": 0.0, "p99": 0.0}
    gaps = ", ".join(f"{name}: {g['missing']} missing / {g['extra']} extra"
                     for name, g in r["index_gap"].items())
    lag = r["lag_s"] or {}
    return [["figure", "value"],
            ["sessions ended", str(r["sessions_ended"])],
            ["lost / duplicated", f"{r['lost']} / {r['duplicated']}"],
            [f"late (> {r['recover_s'] + r['slack_s']:.0f} s) / stranded (> one more recover interval)",
             f"{r['late']} / {r['stranded']}"],
            ["stranded, counted from the last worker kill that hit the session",
             str(r["stranded_after_last_fault"])],
            ["late sessions: taken over after a kill / orphan re-sent / Redis down meanwhile",
             f"{sum(d['takeovers'] > 0 for d in r['delayed_sessions'])} / "
             f"{sum(d['orphan_requeued'] for d in r['delayed_sessions'])} / "
             f"{sum(d['redis_down_while_waiting'] for d in r['delayed_sessions'])}"],
            ["extraction lag p50 / p99 / max s", f"{lag.get('p50', 0):.1f} / {lag.get('p99', 0):.1f} / "
                                                 f"{lag.get('max', 0):.1f}"],
            ["worker starts / beat starts", f"{r['worker_starts']} / {r['beat_starts']}"],
            ["index against the store", gaps],
            ["search p50 / p99 ms", f"{search['p50']:.1f} / {search['p99']:.1f}"],
            ["tool error codes seen", ", ".join(r["tool_errors"]) or "none"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--kills", type=int, default=200)
    parser.add_argument("--freeze-s", type=float, default=30.0)
    parser.add_argument("--drain-s", type=float, default=300.0)
    parser.add_argument("--latency-ms", type=int, default=200)
    parser.add_argument("--gap-s", type=float, default=2.0, help="each agent's pause between sessions")
    args = parser.parse_args()
    report = run(args.minutes, args.kills, args.freeze_s, args.drain_s, args.latency_ms, args.gap_s)
    table = _table(report)
    for row in table:
        print(" | ".join(row))
    write_report("soak", report, table, notes=(
        f"{args.minutes:g} minutes, {AGENTS} agents, {WORKERS} solo workers and beat; {args.kills} worker "
        f"SIGKILLs, Redis frozen {args.freeze_s:g} s at 30% and restarted empty at 60%; model latency "
        f"{args.latency_ms} ms. Run: python -m benchmarks.soak --minutes {args.minutes:g} "
        f"--kills {args.kills}"))


if __name__ == "__main__":
    main()
