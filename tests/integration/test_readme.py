"""The README's "Use it from Python" example runs as written, with the real model."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
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
    (tmp_path / "example.py").write_text(match.group(1))
    shutil.copy(ROOT / "config.yaml", tmp_path / "config.yaml")
    result = subprocess.run(
        [sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("created ")
    assert "['Aditya prefers concise answers.'] None" in result.stdout
    assert "semantic · confirmed · user_statement" in result.stdout


def _readme_block(heading: str) -> str:
    """The first Python block under ``heading`` in docs/integrations.md, where the README's
    integration examples live."""
    page = (ROOT / "docs" / "integrations.md").read_text()
    match = re.search(rf"## {re.escape(heading)}\n.*?```python\n(.*?)```", page, re.S)
    assert match is not None, f"docs/integrations.md lost its {heading!r} example"
    return match.group(1)


def _run_example(tmp_path: Path, code: str, **env: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "example.py").write_text(code)
    shutil.copy(ROOT / "config.yaml", tmp_path / "config.yaml")
    return subprocess.run(
        [sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", **env},
    )


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
@pytest.mark.filterwarnings("ignore:.*noload.*")  # kombu's SQLAlchemy transport (the session end publishes)
def test_readme_deep_agents_example_runs_with_a_scripted_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    need("deepagents")
    from tests.adapter_contract import Exchange
    from tests.integration.test_adapter_deepagents import ScriptedModel

    code = _readme_block("LangChain Deep Agents")
    assert '"anthropic:claude-sonnet-4-6"' in code
    model = ScriptedModel(script=[Exchange(user="Keep every answer short.", calls=(), reply="Will do.")])
    shutil.copy(ROOT / "config.yaml", tmp_path / "config.yaml")
    monkeypatch.chdir(tmp_path)
    exec(compile(code.replace('"anthropic:claude-sonnet-4-6"', "MODEL"), "README.md", "exec"),
         {"MODEL": model})
    rt = build_runtime(load_config("config.yaml", overrides={"store": {"path": "mem.sqlite"},
                                                             "embedding": {"model": "fake"}}))
    try:
        session = rt.store.get_session("chat-42")
        assert session is not None and session.ended_at is not None
        assert [(t.role, t.content) for t in rt.store.turns("chat-42")] == [
            ("user", "Keep every answer short."), ("assistant", "Will do.")]
    finally:
        rt.close()
