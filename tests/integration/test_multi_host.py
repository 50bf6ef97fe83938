"""The multi-host shape on one machine: agents and a worker that share nothing but the
PostgreSQL store's URL and the Redis broker's URL.

Three temporary directories stand for three hosts. Each process starts in its own
directory with its own HOME and XDG folders, and learns where the store and the broker are
only from ``RETOLD_STORE`` and ``RETOLD_BROKER_URL``; the host-local config file it is given
holds nothing shared (the fake embedder, this run's queue names). Agent A (host 1) records
a session and ends it, which publishes the extraction to Redis; a Celery worker (host 2)
extracts it into PostgreSQL, replaying a recorded extraction (``RETOLD_REPLAY_EXTRACTION``)
so no hosted model is needed; agent B (host 3), a fresh process for the same user, finds
the extracted memory with ``memory_search``. No host directory may hold a store file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis

from retold.ingest.extractor import output_to_json
from retold.models import CandidateRecord, ExtractionOutput, SessionSummary
from retold.store import open_store
from tests import postgres
from tests.celery_support import AGENT, USER_SAYS, killed_at_exit, wait_for

pytestmark = [pytest.mark.redis, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
# Database 9 is also flushed by benchmarks/pipeline_bench.py, so this test flushes nothing:
# queue names of its own keep its messages apart, and it deletes only its own keys.
REDIS_URL = "redis://127.0.0.1:6379/9"
PREFIX = f"multihost-{os.getpid()}"
SESSION = "s-multihost"
CONTENT = "Aditya prefers short technical answers."
QUERY = "short technical answers"
DEADLINE_S = 60
SQLITE_HEADER = b"SQLite format 3\x00"

AGENT_A = f"""
import json
from retold import Scope, build_runtime
from retold.models import Principal
rt = build_runtime()  # the config as every process finds it: the file, then RETOLD_*
rt.host.grant({AGENT!r}, Scope("user", "aditya"), read=True, write=True)
rt.host.provision_user("aditya", aliases=["Aditya"])
p = Principal({AGENT!r}, "aditya", {SESSION!r}, None)
rt.hooks.on_session_start(p)
p = rt.hooks.on_turn(p, "user", {USER_SAYS!r})
p = rt.hooks.on_turn(p, "assistant", "Understood: short and technical from now on.")
rt.hooks.on_session_end(p)  # publishes the extraction to the broker
print(json.dumps({{"store": rt.store.path, "session": p.session_id,
                  "scheduler": type(rt.scheduler).__name__}}))
rt.close()
"""

AGENT_B = f"""
import json
from retold import build_runtime
from retold.models import Principal
rt = build_runtime()
p = Principal({AGENT!r}, "aditya", "s-host3", None)
res = rt.tools.call("memory_search", p, {{"queries": [{QUERY!r}]}})
print(json.dumps({{"store": rt.store.path, "error": res.get("error"),
                  "found": [[r["id"], r["content"]] for r in res.get("results", [])]}}))
rt.close()
"""


@dataclass(frozen=True)
class Host:
    """One "machine": a working directory with a home of its own and a local config."""

    name: str
    root: Path

    @property
    def config(self) -> Path:
        return self.root / "config.yaml"

    def env(self, shared: dict[str, str], **extra: str) -> dict[str, str]:
        """This host's environment: nothing of the test's RETOLD_* or provider keys, its
        own HOME and XDG folders, the two shared URLs and its own config file."""
        dropped = ("RETOLD_", "ANTHROPIC_", "OPENAI_", "XDG_")
        env = {k: v for k, v in os.environ.items() if not k.startswith(dropped)}
        home = self.root / "home"
        env.update(HOME=str(home), XDG_CACHE_HOME=str(home / ".cache"),
                   XDG_CONFIG_HOME=str(home / ".config"), XDG_DATA_HOME=str(home / ".local/share"),
                   PYTHONPATH=str(ROOT), RETOLD_CONFIG=str(self.config), **shared, **extra)
        return env

    def log(self, what: str) -> Path:
        return self.root / f"{what}.log"


@pytest.fixture
def hosts(tmp_path: Path) -> list[Host]:
    made = []
    for n in (1, 2, 3):
        host = Host(f"host {n}", tmp_path / f"host{n}")
        (host.root / "home").mkdir(parents=True)
        # host-local settings only: the shared store and broker come from the environment
        host.config.write_text("embedding:\n  model: fake\nqueue:\n"
                               f"  extraction_queue: {PREFIX}-extraction\n"
                               f"  maintenance_queue: {PREFIX}-maintenance\n")
        made.append(host)
    return made


@pytest.fixture
def shared(pg_database: str) -> Iterator[dict[str, str]]:
    """The only two things the hosts share: a fresh PostgreSQL schema (in SQLAlchemy's
    spelling, as compose passes it) and the Redis broker."""
    url = postgres.fresh_schema(pg_database).replace("postgresql://", "postgresql+psycopg://", 1)
    client = redis.Redis.from_url(REDIS_URL)
    try:
        yield {"RETOLD_STORE": url, "RETOLD_BROKER_URL": REDIS_URL}
    finally:
        for key in client.scan_iter(match=f"*{PREFIX}*"):
            client.delete(key)
        client.close()


def _recording(host: Host) -> Path:
    candidate = CandidateRecord(type="semantic", content=CONTENT, attribute="answer_style",
                                source_kind="user_statement",
                                evidence="keep every answer short and technical", evidence_turn=1,
                                entity_mentions=[])
    output = ExtractionOutput([candidate], SessionSummary("Aditya asked for short answers.", [], []))
    path = host.root / "recording.json"
    path.write_text(json.dumps(output_to_json(output)))
    return path


def _run_agent(host: Host, script: str, env: dict[str, str], logs: list[Path]) -> Any:
    done = subprocess.run([sys.executable, "-c", script], cwd=host.root, env=env, capture_output=True,
                          text=True, timeout=DEADLINE_S)
    host.log("agent").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        tails = "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
                          for p in logs if p.exists())
        pytest.fail(f"the agent on {host.name} failed:\n{done.stderr[-3000:]}\n{tails}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _store_files(root: Path) -> list[str]:
    """Every file under ``root`` that is, or is named like, a SQLite store or its WAL."""
    found = []
    for path in root.rglob("*"):
        if not path.is_file():
            continue
        with path.open("rb") as handle:
            header = handle.read(len(SQLITE_HEADER))
        if header == SQLITE_HEADER or ".sqlite" in path.name or path.suffix == ".db":
            found.append(str(path.relative_to(root)))
    return found


@pytest.mark.timeout(150)
def test_agents_and_a_worker_on_three_hosts_share_only_the_two_urls(
    hosts: list[Host], shared: dict[str, str]
) -> None:
    host1, host2, host3 = hosts
    worker_log = host2.log("worker")
    logs = [worker_log, host1.log("agent")]
    with killed_at_exit() as started:
        with worker_log.open("wb") as out:
            started.append(subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "workers", "worker", "-P", "solo",
                 "-Q", f"{PREFIX}-extraction,{PREFIX}-maintenance", "--loglevel=INFO",
                 "-n", f"{PREFIX}@%h", "--without-gossip", "--without-mingle"],
                cwd=host2.root, env=host2.env(shared, RETOLD_REPLAY_EXTRACTION=str(_recording(host2))),
                stdout=out, stderr=subprocess.STDOUT))
        # host 1 runs while the worker starts: the message waits on the broker meanwhile
        wrote = _run_agent(host1, AGENT_A, host1.env(shared), logs)
        assert wrote["session"] == SESSION and wrote["scheduler"] == "CeleryScheduler"
        assert wrote["store"].startswith("postgresql") and "host1" not in wrote["store"]

        # this test process only watches the shared database; it is none of the hosts
        observer = open_store(shared["RETOLD_STORE"])
        try:
            def extracted() -> bool:
                session = observer.get_session(SESSION)
                return session is not None and session.extracted_at is not None

            wait_for(extracted, "the worker on host 2 to extract the session", logs, DEADLINE_S, poll_s=0.2)
            written = [r.id for r in observer.find_records(content=CONTENT)]
            runs = observer.events(kind="extraction.run")
        finally:
            observer.close()
        assert len(written) == 1
        assert len(runs) == 1 and runs[0]["payload"]["replayed"] is True

        found = _run_agent(host3, AGENT_B, host3.env(shared), logs)
    assert found["error"] is None and found["store"] == wrote["store"]
    assert [written[0], CONTENT] in found["found"]  # a fresh process on host 3 reads it
    for host in hosts:
        assert _store_files(host.root) == [], host.name
