"""``retold demo``: the two-session Acme North story, end to end (the README's main job).

Session 1: the account manager says the billing contact for Acme North is Dana Reyes and
the agent writes that down with ``memory_write``, as it does the manager's standing
preference for British English, which the activation policy makes ambient. Session 2
starts with that preference in its profile block; then Dana left in March and Marcus
Chen took over billing. Each session runs through ``rt.hooks``; ending it enqueues its
extraction. A real Celery worker (a subprocess on the embedded broker) consumes the
extraction task when the ``workers`` package provides one; otherwise extraction runs in
this process and the output says so. Without ``ANTHROPIC_API_KEY`` the extractor replays
the recordings shipped in ``retold/demo_data`` (the output says "replayed"). One worker
serves the whole story. Then the demo searches: the current contact with its explanation,
Dana's superseded record via ``include_history``, who held the role in February (an
``as_of`` search: Dana, with the window supersession gave her record), the session
summaries and the event trail.

The story is dated: the manager's notes of 10 January name Dana (the write carries that
as its event time), and the second session's recording dates Marcus from 1 March, the
month the manager says Dana left. So Dana's window runs from 10 January to 1 March 2026.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from retold.config.env import load_config
from retold.ingest.extractor import ReplayExtractor
from retold.ingest.reviewer import TableReviewer
from retold.ingest.session import InProcessScheduler
from retold.models import Principal, Scope
from retold.quiet import silence_progress_output
from retold.runtime import Runtime, build_runtime

__all__ = ["AGENT", "FEBRUARY", "PAST_QUESTION", "QUESTION", "SESSIONS", "USER", "DemoResult", "run_demo"]

AGENT, USER = "ops-copilot", "am-jordan"
QUESTION = "Who is the billing contact for Acme North?"
PAST_QUESTION = "Who was the billing contact for Acme North in February?"
FEBRUARY = "2026-02-15T00:00:00Z"  # the as_of the February question is asked at
API_KEY_ENV = "ANTHROPIC_API_KEY"
WAIT_SECONDS = 30.0

# (session id, recording, turns). The evidence quotes in the recordings are verbatim
# from these user turns, and their evidence_turn numbers match.
SESSIONS: tuple[tuple[str, str, tuple[tuple[str, str], ...]], ...] = (
    ("acme-north-1", "acme_session1.json", (
        ("user", "Renewal prep for Acme North, from my notes of 10 January 2026."
                 " The billing contact for Acme North is Dana Reyes."),
        ("assistant", "Noted: the Acme North renewal goes to Dana Reyes, their billing contact."),
        ("user", "One more thing: always write my customer emails in British English."),
        ("assistant", "Understood, British English for every customer email."),
    )),
    ("acme-north-2", "acme_session2.json", (
        ("user", "An update on Acme North: Dana Reyes left Acme North in March."),
        ("assistant", "Thanks for the update. Who handles billing at Acme North now?"),
        ("user", "Marcus Chen took over billing for Acme North."),
        ("assistant", "Got it: Marcus Chen is now the billing contact for Acme North."),
    )),
)

# Session 1's explicit writes, by user turn: the agent records what the user just said.
# The second is a standing preference about the user, so it becomes part of every later
# session's profile.
EXPLICIT_WRITE: dict[str, Any] = {
    "type": "semantic", "content": "Billing contact for Acme North is Dana Reyes.",
    "attribute": "billing_contact", "source_kind": "user_statement",
    "evidence": "The billing contact for Acme North is Dana Reyes.",
    "event_at": "2026-01-10T00:00:00Z",  # when the notes it comes from were taken
    "entities": [{"kind": "org", "name": "Acme North", "role": "about"},
                 {"kind": "person", "name": "Dana Reyes", "role": "mentions"}],
}
PREFERENCE_WRITE: dict[str, Any] = {
    "type": "semantic", "content": "Jordan wants customer emails written in British English.",
    "attribute": "email_language", "source_kind": "user_statement",
    "evidence": "always write my customer emails in British English",
}
WRITES: dict[int, dict[str, Any]] = {1: EXPLICIT_WRITE, 3: PREFERENCE_WRITE}  # session 1 turn -> write


@dataclass
class DemoResult:
    store_path: Path
    extraction: str  # "worker" or "in-process"
    extractor: str  # "replayed" or "hosted"
    outcomes: dict[str, str] = field(default_factory=dict)  # session id -> extraction outcome
    current: str | None = None  # content of the top current result for QUESTION
    superseded: list[str] = field(default_factory=list)  # superseded contents via include_history
    february: str | None = None  # content of the top result for PAST_QUESTION as of FEBRUARY
    summaries: list[str] = field(default_factory=list)
    profile: str = ""  # the profile block session 2 started with
    event_kinds: list[str] = field(default_factory=list)
    worker_exit_codes: list[int] = field(default_factory=list)


def run_demo(store_dir: Path, say: Callable[[str], None] = print, *, use_worker: bool = True,
             store_name: str = "memory.sqlite", environ: dict[str, str] | None = None) -> DemoResult:
    """Run the story on a fresh store in ``store_dir`` and print what it shows. When a
    store already exists there, a new numbered subdirectory is used instead: the demo
    never touches an existing store."""
    silence_progress_output()  # the worker subprocess inherits the quiet variables too
    env = dict(os.environ if environ is None else environ)
    store_dir = base = Path(store_dir).resolve()
    run = 1
    while (store_dir / store_name).exists():
        run += 1
        store_dir = base / f"run-{run}"
    store_dir.mkdir(parents=True, exist_ok=True)
    store_path = store_dir / store_name
    config_path = store_dir / "retold-demo.yaml"
    config_path.write_text(yaml.safe_dump({"store": {"path": str(store_path)}}), "utf-8")
    config = load_config(config_path)
    hosted = bool(env.get(API_KEY_ENV))
    recordings = _copy_recordings(store_dir)
    worker = use_worker and _worker_supported()
    # With a worker, the config's own scheduler publishes to the worker's broker; without
    # one the story extracts each session itself, so ending one only records it.
    scheduler = None if worker else InProcessScheduler()
    result = DemoResult(store_path, "worker" if worker else "in-process",
                        "hosted" if hosted else "replayed")
    say(f"retold demo: fresh store in {store_dir}")
    if worker:
        say("extraction: a Celery worker subprocess on the embedded broker "
            f"({store_path.with_name('queue.sqlite')})")
    else:
        say(f"extraction ran in-process (worker {'unavailable' if use_worker else 'disabled'})")
    say(f"extractor: {'hosted model (' + API_KEY_ENV + ' is set)' if hosted else 'replayed recording'}")
    with build_runtime(config, scheduler=scheduler, environ=env) as rt:
        rt.host.grant(AGENT, Scope("user", USER), read=True, write=True)
        rt.host.provision_user(USER, aliases=["Jordan"])
        # One worker for the whole story: started now, so it is ready by the first
        # session's end, and stopped once the last session is extracted.
        started = _DemoWorker.start(rt, config_path, None if hosted else recordings, env, say) \
            if worker else None
        try:
            for index, (session_id, _name, turns) in enumerate(SESSIONS):
                say(f"\n== session {index + 1} ({session_id})")
                principal = _run_session(rt, Principal(AGENT, USER, session_id), turns, index, say, result)
                recording = None if hosted else recordings / f"{session_id}.json"
                if started is not None:
                    outcome = started.wait_for(session_id)
                else:
                    outcome = _extract_in_process(rt, principal, recording)
                result.outcomes[session_id] = outcome
                say(f"extraction of {session_id}: {outcome}"
                    + (" (replayed)" if recording is not None else ""))
        finally:
            if started is not None:
                result.worker_exit_codes.append(started.stop())
        _report(rt, Principal(AGENT, USER, "acme-north-review"), result, say)
    return result


def _run_session(rt: Runtime, principal: Principal, turns: Sequence[tuple[str, str]], index: int,
                 say: Callable[[str], None], result: DemoResult) -> Principal:
    rt.hooks.on_session_start(principal)
    if index > 0:
        # What every prompt of this session carries from the first turn on, unasked.
        profile = rt.profiles.for_session(principal)
        result.profile = profile.text
        say(f"  profile block ({profile.tokens} tokens, stored with the session):")
        for line in profile.text.splitlines() or ["(empty)"]:
            say(f"    {line}")
    for number, (role, text) in enumerate(turns, start=1):
        principal = rt.hooks.on_turn(principal, role, text)
        say(f"  {role}: {text}")
        write = WRITES.get(number) if index == 0 else None
        if write is not None:
            out = rt.tools.call("memory_write", principal, write)
            say(f"  [memory_write] {write['content']!r} -> {out.get('outcome', out.get('error'))}"
                f" ({out.get('status', '-')}; activation {out.get('activation', '-')}:"
                f" {out.get('activation_reason', '-')})")
    rt.hooks.on_session_end(principal)
    say(f"  session ended; extraction of {principal.session_id} enqueued")
    return principal


# -- extraction ---------------------------------------------------------------------------


def _copy_recordings(store_dir: Path) -> Path:
    """The shipped recordings as plain files in a folder next to the store, one per session
    and named by its id, which is how a replaying worker finds a session's recording."""
    folder = store_dir / "recordings"
    folder.mkdir(exist_ok=True)
    for session_id, name, _turns in SESSIONS:
        with resources.as_file(resources.files("retold.demo_data") / name) as source:
            shutil.copyfile(source, folder / f"{session_id}.json")
    return folder


def _worker_supported() -> bool:
    """True when the ``workers`` package has the app factory and the replay switch this
    demo drives (it is built separately and may not be there yet)."""
    try:
        spec = importlib.util.find_spec("workers.process_runtime")
        if spec is None or spec.origin is None:
            return False
        if "RETOLD_REPLAY_EXTRACTION" not in Path(spec.origin).read_text("utf-8"):
            return False
        from workers.app import create_app  # noqa: F401
    except Exception:  # an unfinished workers package means: run in-process
        return False
    return importlib.util.find_spec("celery") is not None


def _extract_in_process(rt: Runtime, principal: Principal, recording: Path | None) -> str:
    assert principal.session_id is not None
    if recording is None:  # hosted: the runtime's extractor and reviewer
        return rt.session_end.run(principal.session_id).outcome
    replay = rt.session_end.using(extractor=ReplayExtractor(recording), reviewer=TableReviewer())
    return replay.run(principal.session_id).outcome


@dataclass
class _DemoWorker:
    """``celery -A workers worker`` on the embedded broker for the whole story."""

    rt: Runtime
    proc: subprocess.Popen[bytes]
    say: Callable[[str], None]

    @classmethod
    def start(cls, rt: Runtime, config_path: Path, recordings: Path | None, env: dict[str, str],
              say: Callable[[str], None]) -> _DemoWorker:
        child_env = {**env, "RETOLD_CONFIG": str(config_path)}
        child_env.pop("RETOLD_STORE", None)
        child_env.pop("RETOLD_BROKER_URL", None)
        if recordings is not None:
            child_env["RETOLD_REPLAY_EXTRACTION"] = str(recordings)
        else:
            child_env.pop("RETOLD_REPLAY_EXTRACTION", None)
        log_path = config_path.with_name("worker.log")
        queues = rt.config.queue
        cmd = [sys.executable, "-m", "celery", "-A", "workers", "worker", "-P", "solo",
               "-Q", f"{queues.extraction_queue},{queues.maintenance_queue}", "--loglevel=INFO",
               "--without-gossip", "--without-mingle",
               "-n", f"retold-demo-{os.getpid()}@%h"]
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(cmd, env=child_env, stdout=log, stderr=subprocess.STDOUT,
                                    cwd=str(Path(__file__).resolve().parent.parent))
        say(f"worker pid {proc.pid} started (log {log_path.name})")
        return cls(rt, proc, say)

    def wait_for(self, session_id: str) -> str:
        """Wait (bounded) until the worker has extracted the session or failed it."""
        deadline = time.monotonic() + WAIT_SECONDS
        while time.monotonic() < deadline:
            row = self.rt.store.get_session(session_id)
            if row is not None and row.extracted_at is not None:
                return "extracted"
            failed = self.rt.store.events(kind="extraction.failed")
            if any(e["payload"].get("session_id") == session_id for e in failed):
                return "failed"
            if self.proc.poll() is not None:
                return "worker exited early"
            time.sleep(0.1)
        return "timeout"

    def stop(self) -> int:
        """Warm shutdown (SIGTERM), then SIGKILL after a grace period; the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        code = int(self.proc.returncode)
        self.say(f"\nworker pid {self.proc.pid} exited with code {code}")
        return code


# -- what the demo shows --------------------------------------------------------------------


def _report(rt: Runtime, principal: Principal, result: DemoResult, say: Callable[[str], None]) -> None:
    rt.refresh_index()
    say(f"\n== search: {QUESTION}")
    now = rt.tools.call("memory_search", principal, {"queries": [QUESTION], "k": 3})
    current = [r for r in now.get("results", []) if r["type"] == "semantic"]
    if current:
        result.current = current[0]["content"]
        say(f"current billing contact: {result.current} "
            f"(status {current[0]['status']}, id {current[0]['short_id']})")
    else:
        say(f"no current billing contact found ({now.get('empty_reason') or now.get('error')})")
    say("explanation (what the model sees):")
    for line in str(now.get("rendered", "")).splitlines():
        say(f"  {line}")
    say("\n== with include_history")
    past = rt.tools.call("memory_search", principal,
                         {"queries": [QUESTION], "k": 5, "include_history": True})
    for hit in past.get("results", []):
        say(f"  [{hit['status']}] {hit['content']}")
        if hit["status"] == "superseded":
            result.superseded.append(hit["content"])
    say(f"\n== as of February: {PAST_QUESTION}")
    then = rt.tools.call("memory_search", principal, {"queries": [PAST_QUESTION], "k": 3, "as_of": FEBRUARY})
    held = [r for r in then.get("results", []) if r["type"] == "semantic"]
    if held:
        result.february = held[0]["content"]
        say(f"billing contact on {FEBRUARY[:10]}: {result.february} (status {held[0]['status']})")
    else:
        say(f"no billing contact found for February ({then.get('empty_reason') or then.get('error')})")
    say("explanation (what the model sees):")
    for line in str(then.get("rendered", "")).splitlines():
        say(f"  {line}")
    say("\n== session summaries")
    for record in rt.store.find_records(source_kind="session_summary"):
        result.summaries.append(record.content)
        say(f"  {record.source_ref} [{record.status}]: {record.content}")
    say("\n== event trail")
    for event in rt.store.events():
        result.event_kinds.append(event["kind"])
        payload = event["payload"]
        extra = " replayed" if payload.get("replayed") else ""
        target = event["record_id"] or payload.get("session_id") or ""
        say(f"  {event['at']}  {event['kind']:<24} {event['actor']:<12} {target}{extra}")
