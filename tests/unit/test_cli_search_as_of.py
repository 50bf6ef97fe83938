"""``retold search --as-of``: what was valid then, through the real entry point, on both
backends; a bad time is one line on stderr and exit code 2."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from retold import build_runtime, load_config
from retold.config.env import store_key
from retold.models import Scope
from retold.testing import make_record

AGENT, USER = "cli-agent", "cleo"
SCOPE = Scope("user", USER)
CONTACT = "Billing contact for Acme North is"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "retold.cli", *args], capture_output=True, text=True, timeout=120,
        env={**{k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}, "HF_HUB_OFFLINE": "1"},
    )


def test_search_as_of_finds_the_value_that_held_then(store_target: str, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f"store:\n  path: {tmp_path / 'mem.sqlite'}\nembedding:\n  model: fake\n")
    march = datetime(2026, 3, 1, tzinfo=UTC)
    rt = build_runtime(load_config(config, overrides={"store": {store_key(store_target): store_target}}))
    with rt:
        rt.host.grant(AGENT, SCOPE, read=True, write=True)
        for record in (
            make_record(id="rec-dana", scope=SCOPE, content=f"{CONTACT} Dana Reyes.",
                        status="superseded", event_at=datetime(2026, 1, 10, tzinfo=UTC), valid_until=march),
            make_record(id="rec-marcus", scope=SCOPE, content=f"{CONTACT} Marcus Chen.",
                        supersedes_id="rec-dana", valid_from=march, event_at=march),
        ):
            rt.store.write_record(record)
            rt.store.put_embedding(record.id, rt.embedder.name, rt.embedder.version,
                                   rt.embedder.embed_documents([record.content])[0])
    common = ("--agent", AGENT, "--user", USER, "--store", store_target, "--config", str(config))
    then = _cli("search", *common, "--as-of", "2026-02-15", "billing", "contact", "Acme", "North")
    assert then.returncode == 0 and "Traceback" not in then.stderr, then.stderr
    assert "Dana Reyes" in then.stdout and "Marcus Chen" not in then.stdout
    assert "valid 2026-01-10 to 2026-03-01 (valid at 2026-02-15)" in then.stdout
    now = _cli("search", *common, "billing", "contact", "Acme", "North")
    assert now.returncode == 0 and "Marcus Chen" in now.stdout and "Dana Reyes" not in now.stdout
    bad = _cli("search", *common, "--as-of", "last February", "billing")
    lines = bad.stderr.strip().splitlines()
    assert bad.returncode == 2 and len(lines) == 1 and "--as-of" in lines[0], bad.stderr
    assert "Traceback" not in bad.stderr
