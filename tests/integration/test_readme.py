"""The README's example and the integration page's examples run as written from an empty
folder (no config file, no API key), with the real embedding model."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

from retold import build_runtime, load_config
from retold.testing.anthropic_stub import AnthropicStub, text_only, tool_use
from tests.optional import need

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.model
def test_readme_python_example_runs_and_finds_the_memory(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    match = re.search(r"## Use it from Python\n\n```python\n(.*?)```", readme, re.S)
    assert match is not None, "README lost its Python example"
    result = _run_example(tmp_path, match.group(1))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("created ")
    assert "['Aditya prefers concise answers.'] None" in result.stdout
    assert "semantic · confirmed · user_statement" in result.stdout
    assert "\n[]\n" in result.stdout  # as of January 2026 nothing held: it was written later


def _readme_block(heading: str) -> str:
    """The first Python block under ``heading`` in docs/integrations.md, where the README's
    integration examples live."""
    page = (ROOT / "docs" / "integrations.md").read_text()
    match = re.search(rf"## {re.escape(heading)}\n.*?```python\n(.*?)```", page, re.S)
    assert match is not None, f"docs/integrations.md lost its {heading!r} example"
    return match.group(1)


def _run_example(tmp_path: Path, code: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in ``tmp_path``, which holds nothing else, with no provider key in the
    environment unless ``env`` sets one."""
    (tmp_path / "example.py").write_text(code)
    base = {k: v for k, v in os.environ.items()
            if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "RETOLD_CONFIG", "RETOLD_STORE",
                         "RETOLD_BROKER_URL")}
    return subprocess.run(
        [sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
        stdin=subprocess.DEVNULL, env={**base, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", **env},
    )


def _stored_turns(tmp_path: Path, session_id: str) -> list[tuple[str, str]]:
    """The turns the example recorded in its store, and that its session was ended."""
    rt = build_runtime(load_config(overrides={"store": {"path": str(tmp_path / "mem.sqlite")},
                                              "embedding": {"model": "fake"}}), environ={})
    try:
        session = rt.store.get_session(session_id)
        assert session is not None and session.ended_at is not None
        return [(t.role, t.content) for t in rt.store.turns(session_id)]
    finally:
        rt.close()


@pytest.mark.model
def test_readme_session_example_runs_and_finds_the_memory(tmp_path: Path) -> None:
    result = _run_example(tmp_path, _readme_block("A host with no framework"))
    assert result.returncode == 0, result.stderr
    assert "Dana prefers email over phone calls." in result.stdout
    assert "semantic · confirmed · user_statement" in result.stdout


@pytest.mark.model
def test_readme_anthropic_tool_loop_runs_against_the_messages_api(
    tmp_path: Path, anthropic_stub: AnthropicStub
) -> None:
    anthropic_stub.script(
        tool_use({"type": "semantic", "content": "Dana prefers email over phone calls.",
                  "attribute": "contact_channel", "source_kind": "user_statement",
                  "evidence": "I prefer email over phone calls"}, name="memory_write"),
        text_only("Noted: email from now on."),
    )
    result = _run_example(tmp_path, _readme_block("Anthropic Messages API and OpenAI function tools"),
                          ANTHROPIC_API_KEY="test-key", ANTHROPIC_BASE_URL=anthropic_stub.base_url)
    assert result.returncode == 0, result.stderr
    assert "Dana prefers email over phone calls." in result.stdout
    assert "semantic · confirmed · user_statement" in result.stdout
    first, second = anthropic_stub.requests
    assert [t["name"] for t in first["tools"]] == [
        "memory_search", "memory_get", "memory_write", "memory_revise", "memory_forget"]
    tool_result = second["messages"][-1]["content"][0]
    assert tool_result["type"] == "tool_result" and '"outcome":"created"' in tool_result["content"]


@pytest.mark.model
def test_readme_deep_agents_example_runs_without_a_key(tmp_path: Path) -> None:
    need("deepagents")
    code = _readme_block("LangChain Deep Agents")
    assert '"anthropic:claude-sonnet-4-6"' in code
    result = _run_example(tmp_path, code, RETOLD_SCRIPTED_MODEL="1")
    assert result.returncode == 0, result.stderr
    assert "a scripted stand-in replaces anthropic:claude-sonnet-4-6" in result.stderr
    assert _stored_turns(tmp_path, "chat-42") == [
        ("user", "Keep every answer short."),
        ("assistant", "[scripted stand-in for anthropic:claude-sonnet-4-6; no model was called] "
                      "A real model would answer this message: Keep every answer short.")]


@pytest.mark.model
def test_readme_crewai_example_runs_without_a_key_or_a_trace_prompt(tmp_path: Path) -> None:
    need("crewai")
    code = _readme_block("CrewAI")
    # CrewAI keeps its per-folder state under the data home; the test's stays in tmp_path.
    env = {"XDG_DATA_HOME": str(tmp_path / "data"), "CREWAI_DISABLE_TELEMETRY": "true",
           "OTEL_SDK_DISABLED": "true"}
    folder = tmp_path / "crew"
    folder.mkdir()
    disabled = subprocess.run([str(Path(sys.executable).parent / "crewai"), "traces", "disable"],
                              cwd=folder, capture_output=True, text=True, timeout=120,
                              env={**os.environ, **env})
    assert disabled.returncode == 0, disabled.stderr
    result = _run_example(folder, code, RETOLD_SCRIPTED_MODEL="1", **env)
    assert result.returncode == 0, result.stderr
    assert "execution traces" not in result.stdout + result.stderr
    turns = _stored_turns(folder, "sess_42")
    assert turns[0] == ("user", "The billing contact for Acme North is now Marcus Chen.")
    assert turns[-1] == ("assistant", "[scripted stand-in for anthropic/claude-sonnet-4-6; no model was "
                                      "called] A real model would answer this message: The billing "
                                      "contact for Acme North is now Marcus Chen.")


@pytest.mark.model
def test_readme_anthropic_tool_loop_runs_against_the_stand_in_without_a_key(tmp_path: Path) -> None:
    stand_in = subprocess.Popen([sys.executable, "-m", "retold.testing.anthropic_stub"],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert stand_in.stdout is not None
        exports = dict(stand_in.stdout.readline().removeprefix("export ").strip().split("=", 1)
                       for _ in range(2))
        result = _run_example(tmp_path, _readme_block("Anthropic Messages API and OpenAI function tools"),
                              **exports)
    finally:
        stand_in.terminate()
        stand_in.wait(timeout=10)
    assert set(exports) == {"ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY"}
    assert result.returncode == 0, result.stderr
    (session_id,) = _session_ids(tmp_path)
    assert _stored_turns(tmp_path, session_id)[-1] == (
        "assistant", "[scripted stand-in for claude-sonnet-4-5; no model was called] A real model would "
                     "answer this message: From now on, I prefer email over phone calls.")


def _session_ids(tmp_path: Path) -> list[str]:
    with closing(sqlite3.connect(tmp_path / "mem.sqlite")) as conn:
        return [sid for (sid,) in conn.execute("SELECT id FROM sessions")]
