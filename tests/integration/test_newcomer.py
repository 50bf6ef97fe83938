"""A newcomer's first hour, scripted: the README's example in an empty folder, then the
command line on the store it wrote, with the short ids the outputs show (get, forget,
restore), and an export imported into a new store. A healthy run prints nothing on stderr,
exits 0 at every step, and the numbers agree from one step to the next."""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from retold import build_runtime, load_config
from retold.models import Principal
from tests.integration.test_readme import ROOT, _run_example

pytestmark = [pytest.mark.model, pytest.mark.slow]

AGENT, USER = "research-agent", "aditya"
MEMORY = "Aditya prefers concise answers."


def _retold(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    dropped = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "RETOLD_CONFIG", "RETOLD_STORE", "RETOLD_BROKER_URL")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    return subprocess.run([sys.executable, "-m", "retold.cli", *args], cwd=folder, capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL,
                          env={**env, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"})


def _ok(folder: Path, *args: str) -> str:
    result = _retold(folder, *args)
    assert result.returncode == 0, (args, result.stdout, result.stderr)
    assert result.stderr == "", (args, result.stderr)  # a healthy run says nothing on stderr
    return result.stdout


def _search(folder: Path, store: str) -> list[dict[str, object]]:
    found = json.loads(_ok(folder, "search", "--store", store, "--agent", AGENT, "--user", USER, "--json",
                           "which answer style does Aditya prefer?"))
    results: list[dict[str, object]] = found["results"]
    return results


def test_a_newcomer_goes_from_the_readme_to_a_second_store_without_a_surprise(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    match = re.search(r"## Use it from Python\n\n```python\n(.*?)```", readme, re.S)
    assert match is not None, "README lost its Python example"
    example = _run_example(tmp_path, match.group(1))
    assert example.returncode == 0, example.stderr
    assert example.stderr == "", example.stderr
    record_id = example.stdout.split()[1]  # "created <id>"

    # The short id every output shows is the one a person types back.
    hits = _search(tmp_path, "mem.sqlite")
    assert [h["content"] for h in hits] == [MEMORY]
    short = str(hits[0]["short_id"])
    assert len(short) == 8 and record_id.endswith(short)
    assert MEMORY in _ok(tmp_path, "get", "--store", "mem.sqlite", short)

    # forget, then restore, by the short id; search follows both.
    forgot = _ok(tmp_path, "forget", "--store", "mem.sqlite", "--reason", "trying it out", short)
    assert record_id in forgot and f"retold restore {short}" in forgot
    assert _search(tmp_path, "mem.sqlite") == []
    _ok(tmp_path, "restore", "--store", "mem.sqlite", "--reason", "changed my mind", short)
    assert [h["content"] for h in _search(tmp_path, "mem.sqlite")] == [MEMORY]

    # Export the user's scope and bring it into a new store, as the import's advice says.
    exported = tmp_path / "aditya.jsonl"
    _ok(tmp_path, "export", "--store", "mem.sqlite", "--scope", f"user:{USER}", "--out", str(exported))
    lines = [json.loads(line) for line in exported.read_text().splitlines() if line.strip()]
    assert sum(1 for line in lines if line.get("content") == MEMORY) == 1
    refused = _retold(tmp_path, "import", "--store", "new.sqlite", "--agent", AGENT, "--user", USER,
                      "--confirm", str(exported))
    assert refused.returncode != 0 and len(refused.stderr.strip().splitlines()) == 1
    assert "retold grant" in refused.stderr  # names the command that creates the store
    _ok(tmp_path, "grant", "--store", "new.sqlite", "--read", "--write", AGENT, f"user:{USER}")
    imported = _ok(tmp_path, "import", "--store", "new.sqlite", "--agent", AGENT, "--user", USER,
                   "--confirm", str(exported))
    assert imported.startswith("imported 1 records")
    moved = _search(tmp_path, "new.sqlite")
    assert [h["content"] for h in moved] == [MEMORY]
    assert moved[0]["score"] == pytest.approx(hits[0]["score"], abs=0.05)

    # The inspector's search page shows the block the model reads, with its numbers.
    _inspector_agrees(tmp_path / "mem.sqlite")


def _inspector_agrees(store: Path) -> None:
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from retold.config.tokens import token_digest
    from retold.ui.app import create_app

    token = "newcomer-inspector-token-0001"
    config = load_config(overrides={"store": {"path": str(store)}, "ui": {"tokens": [
        {"sha256": token_digest(token), "agent_id": AGENT, "user_id": USER}]}})
    question = "which answer style does Aditya prefer?"
    with build_runtime(config, environ={}) as rt:
        tool = rt.tools.call("memory_search", Principal(AGENT, USER, None, None), {"queries": [question]})
        page = TestClient(create_app(rt), headers={"authorization": f"Bearer {token}"}).get(
            "/search", params={"q": question})
    assert page.status_code == 200, page.text
    block = re.search(r"<h2>What the model reads</h2>\s*<pre>(.*?)</pre>", page.text, re.S)
    assert block is not None and html.unescape(block.group(1)) == tool["rendered"]
    scores = re.findall(r'<tr class="candidate" data-id="([^"]+)">', page.text)
    assert scores[: len(tool["results"])] == [r["id"] for r in tool["results"]]
