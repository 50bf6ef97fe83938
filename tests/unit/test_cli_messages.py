"""What a new user reads in their first hour with ``retold``: the judge explained once by
``check`` instead of warned about on every command, a missing store that says how to make
one, a flag typed for a positional argument, an agent without a grant answered in one
line, and ``token new``'s entry accepted by the config it is pasted into."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from retold import load_config
from retold.config.tokens import token_digest, tokens_for


def run_cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "retold.cli", *args], capture_output=True, text=True, timeout=120,
        env={**{k: v for k, v in os.environ.items() if not k.startswith(("RETOLD_", "ANTHROPIC_"))},
             "HF_HUB_OFFLINE": "1", **env},
    )


def _one_line(code: int, *args: str, **env: str) -> str:
    result = run_cli(*args, **env)
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


@pytest.fixture
def config(tmp_path: Path) -> str:
    path = tmp_path / "config.yaml"
    path.write_text("embedding:\n  model: fake\n")
    return str(path)


@pytest.fixture
def store(tmp_path: Path, config: str) -> str:
    """A store made the way a new user makes one: by granting an agent a scope."""
    path = str(tmp_path / "memory.sqlite")
    result = run_cli("grant", "helper", "user:cleo", "--read", "--write", "--store", path, "--config", config)
    assert result.returncode == 0, result.stderr
    return path


def test_check_explains_the_judge_once_and_commands_stay_quiet(store: str, config: str,
                                                                tmp_path: Path) -> None:
    empty_cache = {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_CACHE": str(tmp_path / "hf" / "hub")}
    checked = run_cli("check", "--store", store, "--config", config, **empty_cache)
    assert checked.returncode == 0 and checked.stderr == "", checked.stderr
    note = checked.stdout.strip().splitlines()[-1]
    assert note == ("equivalence judge: exact text, because the NLI model cross-encoder/nli-deberta-v3-small"
                    " is not on this machine: two memories count as the same claim only when their words"
                    " match, and no contradiction is inferred from meaning; to judge meaning, download it"
                    " once (hf download cross-encoder/nli-deberta-v3-small) or set"
                    " ingestion.equivalence.model to a folder holding it (docs/models.md)")
    # A search builds the whole runtime, and says nothing about the judge on the way.
    searched = run_cli("search", "--agent", "helper", "--user", "cleo", "--store", store, "--config",
                       config, "--json", "river", **empty_cache)
    assert searched.returncode == 0 and searched.stderr == "", searched.stderr


def test_an_import_into_a_missing_store_says_how_to_make_it(tmp_path: Path, config: str) -> None:
    export = tmp_path / "cleo.jsonl"
    export.write_text(json.dumps({"line": "header", "retold_export": 1, "schema_version": 1,
                                  "scope": "user:cleo", "counts": {}}) + "\n")
    missing = str(tmp_path / "new.sqlite")
    line = _one_line(1, "import", str(export), "--agent", "helper", "--user", "cleo", "--store", missing,
                     "--config", config)
    assert line == (f"retold import: no store at {missing}; create it, with a grant that lets helper"
                    " write user:cleo, by running"
                    f" `retold grant helper user:cleo --read --write --store {missing}`, then import again")
    private = _one_line(1, "import", str(export), "--agent", "helper", "--user", "cleo", "--into",
                        "agent:helper/cleo", "--store", missing, "--config", config)
    assert private == (f"retold import: no store at {missing}; create an empty one with"
                       f" `retold migrate --store {missing}`, then import again")
    assert not Path(missing).exists()  # a refusal creates nothing
    # What the line says works: the grant makes the store, and the import then lands.
    assert run_cli("grant", "helper", "user:cleo", "--read", "--write", "--store", missing,
                   "--config", config).returncode == 0
    imported = run_cli("import", str(export), "--agent", "helper", "--user", "cleo", "--store", missing,
                       "--config", config)
    assert imported.returncode == 0 and imported.stdout.startswith("imported 0 records"), imported.stderr


def test_flags_typed_for_positional_arguments_are_answered_with_the_usage() -> None:
    assert _one_line(2, "grant", "--agent", "x", "--scope", "user:y") == (
        "retold grant: unrecognized arguments: --agent --scope; AGENT and SCOPE are positional arguments,"
        " not flags: retold grant AGENT SCOPE [--read] [--write]")
    assert _one_line(2, "get", "--id", "dd628369") == (
        "retold get: unrecognized arguments: --id; ID is a positional argument, not a flag: retold get ID")
    assert _one_line(2, "restore", "--reason", "oops") == (
        "retold restore: the following arguments are required: id; usage: retold restore ID --reason REASON")
    assert _one_line(2, "dump", "--scope", "user:y", "--bogus") == (
        "retold dump: unrecognized arguments: --bogus; usage: retold dump --scope SCOPE [--json]")


def test_an_agent_without_a_grant_gets_one_line_not_the_search_log(store: str, config: str) -> None:
    line = _one_line(1, "search", "--agent", "stranger", "--user", "cleo", "--store", store, "--config",
                     config, "river")
    assert line == ("retold search: no memory found: agent 'stranger' holds no grant, so it can read only its"
                    " private scope (a host grants one: retold grant stranger user:cleo --store ...)")
    result = run_cli("search", "--agent", "stranger", "--user", "cleo", "--store", store, "--config", config,
                     "--json", "river")
    assert result.returncode == 0 and "holds no grant" in json.loads(result.stdout)["empty_reason"]
    granted = run_cli("search", "--agent", "helper", "--user", "cleo", "--store", store, "--config", config,
                      "river")
    assert granted.returncode == 0 and "search_log row" in granted.stdout  # an empty store is no refusal


def _entry(result: subprocess.CompletedProcess[str], kind: str, tmp_path: Path) -> tuple[str, Path]:
    assert result.returncode == 0 and result.stderr == "", result.stderr
    first, says, entry = result.stdout.splitlines()
    assert first.startswith("token: ") and says.startswith(f"add this entry under {kind}.tokens")
    pasted = tmp_path / f"{kind}.yaml"
    pasted.write_text(f"{kind}:\n  tokens:\n{entry}\n")
    return first.removeprefix("token: "), pasted


def test_token_new_prints_a_token_and_the_entry_that_lets_it_in(tmp_path: Path) -> None:
    token, pasted = _entry(run_cli("token", "new", "--for", "mcp", "--agent", "ide", "--user", "aditya",
                                   "--project", "atlas"), "mcp", tmp_path)
    [accepted] = tokens_for(load_config(pasted).mcp.tokens, "default")
    assert accepted.sha256 == token_digest(token) and len(token) >= 40
    assert (accepted.agent_id, accepted.user_id, accepted.project_id) == ("ide", "aditya", "atlas")

    token, pasted = _entry(run_cli("token", "new", "--for", "ui", "--operator", "dana", "--tenant", "acme"),
                           "ui", tmp_path)
    [operator] = load_config(pasted).ui.tokens
    assert operator.sha256 == token_digest(token) and (operator.operator, operator.tenant) == ("dana", "acme")
    again, _ = _entry(run_cli("token", "new", "--for", "ui", "--operator", "dana"), "ui", tmp_path)
    assert again != token


def test_token_new_refuses_what_no_config_would_accept() -> None:
    assert _one_line(2, "token", "new", "--for", "mcp", "--agent", "ide") == (
        "retold token: --for mcp needs --agent and --user")
    assert _one_line(2, "token", "new", "--for", "mcp", "--operator", "dana") == (
        "retold token: an MCP token acts as one agent and user (--agent, --user); --operator is for --for ui")
    assert _one_line(2, "token", "new", "--for", "ui", "--agent", "a/b", "--user", "x") == (
        "retold token: --agent: must not contain '/', got 'a/b'")
    assert "--for" in _one_line(2, "token", "new", "--agent", "ide", "--user", "aditya")
