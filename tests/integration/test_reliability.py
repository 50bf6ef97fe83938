"""Reliability suite: real processes killed with SIGKILL, then the store checked.

An agent process killed mid-write leaves a store that ``retold check`` passes and that a new
runtime opens: every write is one SQLite transaction, so a kill can only lose the write in
flight, never leave half of it.

The other ways a store can fail to open (a corrupt file, a lock held by another process, a
read-only file, a full disk) are covered where they are raised and reported, not repeated
here: tests/unit/store/test_store_open.py for the store and tests/unit/test_cli_failures.py
for the one-line CLI errors. A worker killed between pipeline stages is covered by
tests/integration/test_worker_crash.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from retold import load_config
from tests.celery_support import ROOT, agent_runtime, wait_for

WRITES_BEFORE_KILL = 40
DEADLINE_S = 60

# The agent: a runtime over the store, one session, explicit writes in a loop, one line of
# output per committed write so the test knows when to kill it.
AGENT_SCRIPT = textwrap.dedent("""
    import sys
    from retold import load_config
    from retold.ingest.ingestor import WriteRequest
    from tests.celery_support import agent_runtime, talk

    rt = agent_runtime(load_config(sys.argv[1]))
    p = talk(rt, "s-agent")
    i = 0
    while True:
        rt.ingestor.write(p, WriteRequest(type="semantic", content=f"Aditya fact number {i}.",
                                          attribute=f"fact_{i}"))
        i += 1
        print(i, flush=True)
""")


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(
        f"store:\n  path: {tmp_path / 'memory.sqlite'}\n"
        "embedding:\n  model: fake\n"
        "ingestion:\n  equivalence:\n    model: exact\n"
    )
    return path


def written(log: Path) -> int:
    lines = log.read_text().split() if log.exists() else []
    return int(lines[-1]) if lines else 0


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_an_agent_killed_mid_write_leaves_a_store_that_checks_clean_and_reopens(
    tmp_path: Path, config_path: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RETOLD_")}
    env.update(PYTHONPATH=str(ROOT))
    log = tmp_path / "agent.log"
    with log.open("wb") as out:
        agent = subprocess.Popen([sys.executable, "-c", AGENT_SCRIPT, str(config_path)], cwd=ROOT,
                                 env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: agent.poll() is not None or written(log) >= WRITES_BEFORE_KILL,
                 "the agent's writes", [log], DEADLINE_S)
        assert agent.poll() is None, log.read_text()
        os.kill(agent.pid, signal.SIGKILL)
        agent.wait(timeout=10)
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait(timeout=10)
    assert agent.returncode == -signal.SIGKILL
    committed = written(log)

    check = subprocess.run([sys.executable, "-m", "retold.cli", "check", "--config", str(config_path)],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr

    rt = agent_runtime(load_config(config_path))
    try:
        facts = [r for r in rt.store.find_records() if r.content.startswith("Aditya fact number")]
        # Every write the agent reported is there; at most the one in flight is extra.
        assert committed <= len(facts) <= committed + 1
        assert len({r.content for r in facts}) == len(facts)
    finally:
        rt.close()
