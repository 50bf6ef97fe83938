"""Every operations command through the real entry point (``python -m retold.cli``), with
``embedding.model: fake`` so no model loads: the happy path, one bad argument each (one
line on stderr, a non-zero exit, no traceback), help text, and no torch on model-free
commands."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from retold import build_runtime, load_config
from retold.cli import build_parser
from retold.clock import SystemClock
from retold.config.env import store_key
from retold.models import Principal, Scope
from retold.testing import make_record
from tests.sql import execute, rows

AGENT, USER = "cli-agent", "cleo"
SCOPE = Scope("user", USER)


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "retold.cli", *args], capture_output=True, text=True, timeout=120,
        env={**{k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"},
             "HF_HUB_OFFLINE": "1"},
    )


@pytest.fixture
def store(store_target: str, tmp_path: Path) -> tuple[str, str]:
    """A store (a file, or a PostgreSQL schema) with a grant, one session and three
    records; returns (--store, --config). The config's store path puts the embedded
    broker's file in tmp_path on both backends."""
    config = tmp_path / "config.yaml"
    config.write_text(f"store:\n  path: {tmp_path / 'mem.sqlite'}\nembedding:\n  model: fake\n")
    path = store_target
    now = SystemClock().now()
    rt = build_runtime(load_config(config, overrides={"store": {store_key(path): path}}))
    with rt:
        rt.host.grant(AGENT, SCOPE, read=True, write=True)
        principal = Principal(AGENT, USER, "sess-1", None)
        rt.hooks.on_session_start(principal)
        rt.hooks.on_turn(principal, "user", "I like long walks along the river.")
        for rid, extra in (("rec-live", {}),
                           ("rec-old", {"expires_at": now - timedelta(days=1), "status": "provisional"}),
                           ("rec-due", {"review_at": now - timedelta(hours=1)})):
            record = make_record(id=rid, scope=SCOPE, content=f"Cleo likes river walks ({rid}).",
                                 source_ref="session:sess-1<turn:1>", **extra)
            rt.store.write_record(record)
            rt.store.put_embedding(rid, rt.embedder.name, rt.embedder.version,
                                   rt.embedder.embed_documents([record.content])[0])
    return path, str(config)


def _ok(*args: str) -> subprocess.CompletedProcess[str]:
    result = run_cli(*args)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return result


def _fails(code: int, needle: str, *args: str) -> None:
    result = run_cli(*args)
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def test_every_command_has_help_and_description() -> None:
    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command")
    names = set(commands.choices)  # type: ignore[arg-type]
    assert names >= {"migrate", "demo", "search", "get", "dump", "expire", "retain", "erase", "reembed",
                     "snapshot", "grant", "revoke", "review-due", "extract", "retry"}
    helps = {a.dest: a.help for a in commands._get_subactions()}  # type: ignore[attr-defined]
    for name, sub in commands.choices.items():  # type: ignore[union-attr]
        assert sub.description and helps.get(name), name
        for action in sub._actions:
            assert action.help, (name, action.dest)
    for name in ("dump", "erase", "reembed"):
        assert "usage: retold " + name in _ok(name, "--help").stdout


def test_dump_runs_without_importing_torch(store: tuple[str, str]) -> None:
    path, config = store
    code = (
        "import sys\nfrom retold.cli import main\n"
        f"rc = main(['dump', '--scope', 'user:{USER}', '--store', {path!r}, '--config', {config!r}])\n"
        "assert rc == 0, rc\n"
        "assert 'torch' not in sys.modules and 'sentence_transformers' not in sys.modules\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "rec-live" in result.stdout


def test_the_cli_finds_its_config_and_store_as_workers_and_agents_do(
    store: tuple[str, str], tmp_path: Path
) -> None:
    path, config = store

    def dump(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
        argv = ["dump", "--scope", f"user:{USER}", *args]
        code = f"import sys\nfrom retold.cli import main\nsys.exit(main({argv!r}))"
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                              env={**{k: v for k, v in os.environ.items() if not k.startswith("RETOLD_")},
                                   **env})

    found = dump(RETOLD_CONFIG=config, RETOLD_STORE=path)
    assert found.returncode == 0 and "rec-live" in found.stdout, found.stderr
    elsewhere = str(tmp_path / "elsewhere.sqlite")
    refused = dump("--store", elsewhere, RETOLD_CONFIG=config, RETOLD_STORE=path)  # the flag wins
    assert refused.returncode == 1 and refused.stderr.strip() == (
        f"retold dump: no store at {elsewhere}; `retold migrate --store {elsewhere}` creates one")


def test_search_prints_results_and_the_log_row(store: tuple[str, str]) -> None:
    path, config = store
    common = ("--store", path, "--config", config)
    out = _ok("search", "--agent", AGENT, "--user", USER, "--k", "3", *common, "river", "walks").stdout
    assert "rec-live" in out or "river walks" in out
    assert "search_log row" in out and '"agent_id": "cli-agent"' in out
    data = json.loads(_ok("search", "--agent", AGENT, "--user", USER, "--json", *common, "river").stdout)
    assert data["log"]["id"] == data["search_id"] and data["log"]["request"]["queries"] == ["river"]
    _fails(2, "--k", "search", "--agent", AGENT, "--user", USER, "--k", "0", *common, "river")
    _fails(1, "must not contain '/'", "search", "--agent", AGENT, "--user", "a/b", *common, "river")


def test_get_and_dump(store: tuple[str, str], tmp_path: Path) -> None:
    path, config = store
    common = ("--store", path, "--config", config)
    detail = json.loads(_ok("get", "rec-live", *common).stdout)
    assert detail["record"]["id"] == "rec-live" and detail["record"]["scope"] == f"user:{USER}"
    assert [r["id"] for r in detail["lineage"]] == ["rec-live"]
    _fails(1, "no record missing", "get", "missing", *common)
    lines = _ok("dump", "--scope", f"user:{USER}", "--json", *common).stdout.splitlines()
    assert {json.loads(line)["id"] for line in lines} == {"rec-live", "rec-old", "rec-due"}
    _fails(2, "kind:id", "dump", "--scope", "nonsense", *common)
    _fails(1, "no store at", "dump", "--scope", "user:x", "--store", str(tmp_path / "nope.sqlite"))


def test_maintenance_sweeps(store: tuple[str, str]) -> None:
    path, config = store
    common = ("--store", path, "--config", config)
    assert "expired 1 records" in _ok("expire", "--as", "ops", *common).stdout
    assert "expired 0 records" in _ok("expire", *common).stdout
    assert "blanked the transcripts of 0 sessions" in _ok("retain", *common).stdout
    assert "flagged 1 records" in _ok("review-due", *common).stdout
    assert "flagged 0 records" in _ok("review-due", *common).stdout
    for command in ("expire", "retain", "review-due"):
        _fails(1, "not a SQLite database", command, "--store", config)


def test_erase_requires_yes_and_a_known_target(store: tuple[str, str]) -> None:
    path, config = store
    common = ("--store", path, "--config", config)
    _fails(2, "--yes", "erase", "--record", "rec-live", "--reason", "asked", *common)
    _fails(2, "not allowed with", "erase", "--record", "a", "--user", "b", "--reason", "r", *common)
    _fails(1, "no record ghost", "erase", "--record", "ghost", "--reason", "r", "--yes", *common)
    _fails(1, "no session ghost", "erase", "--session", "ghost", "--reason", "r", "--yes", *common)
    _fails(1, "no user ghost", "erase", "--user", "ghost", "--reason", "r", "--yes", *common)
    assert "erased record rec-live" in _ok("erase", "--record", "rec-live", "--reason", "asked",
                                           "--yes", *common).stdout
    assert "erased session sess-1" in _ok("erase", "--session", "sess-1", "--reason", "asked",
                                          "--yes", *common).stdout
    out = _ok("erase", "--user", USER, "--reason", "asked", "--yes", *common).stdout
    assert "erased user cleo" in out and "records 3" in out


def test_reembed_shows_progress_and_refuses_bad_input(store: tuple[str, str]) -> None:
    path, config = store
    common = ("--store", path, "--config", config)
    result = _ok("reembed", "--model", "fake", "--version", "2", *common)
    assert "re-embedded 3 records with fake version 2" in result.stdout
    assert "reembed [" in result.stderr and "3/3" in result.stderr
    _fails(2, "--dims", "reembed", "--model", "fake", "--version", "3", "--dims", "zero", *common)
    _fails(2, "required", "reembed", "--model", "fake", *common)


def test_a_config_of_another_embedding_family_is_refused_until_reembed(
    store: tuple[str, str], tmp_path: Path
) -> None:
    path, config = store
    other = tmp_path / "bumped.yaml"
    other.write_text("embedding:\n  model: fake\n  version: '2'\n")
    search = ("search", "--agent", AGENT, "--user", USER, "--store", path, "river")
    _fails(1, f"retold search: store {path} holds fake version 1 (384-d) vectors but the config asks"
              " for fake version 2 (384-d); run `retold reembed --model fake --version 2`",
           *search, "--config", str(other))
    # migrate still opens it and names the family; reembed does what the refusal says.
    assert "embedding family: fake version 1 (384-d)" in _ok("migrate", "--store", path, "--config",
                                                            str(other)).stdout
    _ok("reembed", "--model", "fake", "--version", "2", "--store", path, "--config", str(other))
    assert "rec-live" in _ok(*search, "--json", "--config", str(other)).stdout
    _fails(1, "holds fake version 2 (384-d) vectors but the config asks for fake version 1 (384-d)",
           *search, "--config", config)


def test_commands_that_embed_nothing_run_under_another_embedding_family(
    store: tuple[str, str], tmp_path: Path
) -> None:
    path, _ = store
    other = tmp_path / "bumped.yaml"
    other.write_text("embedding:\n  model: fake\n  version: '2'\n")
    common = ("--store", path, "--config", str(other))
    # The review queue and an erasure read and delete; neither may wait for a re-embed.
    _ok("reviews", "list", *common)
    result = _ok("erase", "--user", USER, "--reason", "right to be forgotten", "--yes", *common)
    assert "erased" in result.stdout


@pytest.mark.sqlite_only("snapshots are SQLite files; a PostgreSQL store refuses them (pg_dump)")
def test_snapshot_save_and_load(store: tuple[str, str], tmp_path: Path) -> None:
    path, config = store
    common = ("--store", path, "--config", config)
    snap = str(tmp_path / "snap.sqlite")
    assert "saved 3 records" in _ok("snapshot", "save", snap, *common).stdout
    _fails(1, "already exists", "snapshot", "save", snap, *common)
    _fails(2, "--yes", "snapshot", "load", snap, "--store", str(tmp_path / "copy.sqlite"))
    assert "loaded 3 records" in _ok("snapshot", "load", snap, "--yes", "--store",
                                     str(tmp_path / "copy.sqlite"), "--config", config).stdout
    _fails(1, "not a SQLite database", "snapshot", "load", config, "--yes", *common)
    _fails(2, "invalid choice", "snapshot", "copy", snap, *common)


def test_grant_and_revoke(store: tuple[str, str]) -> None:
    path, config = store
    common = ("--store", path, "--config", config)
    assert "read=yes write=yes" in _ok("grant", "other", "project:p1", "--read", "--write", *common).stdout
    assert "read=yes write=no" in _ok("grant", "other", "org:acme", *common).stdout
    assert "revoked other on project:p1" in _ok("revoke", "other", "project:p1", *common).stdout
    assert "nothing changed" in _ok("revoke", "other", "project:p1", *common).stdout
    _fails(1, "private agent scope", "grant", "other", "agent:x/y", *common)
    _fails(2, "scope kind", "revoke", "other", "team:x", *common)


def _end_session(path: str) -> None:
    execute(path, "UPDATE sessions SET ended_at = '2026-09-03T13:00:00.000000Z' WHERE id = 'sess-1'")


def test_extract_without_a_hosted_model_says_it_is_not_configured(store: tuple[str, str]) -> None:
    path, config = store
    common = ("--store", path, "--config", config)
    _fails(1, "session sess-1 has not ended", "extract", "sess-1", *common)
    _end_session(path)
    _fails(3, "sess-1 stays pending: extract not_configured: no extractor is configured:"
              " ANTHROPIC_API_KEY is not set", "extract", "sess-1", *common)
    _fails(1, "no session ghost", "extract", "ghost", *common)


def test_retry_hands_a_blocked_session_back_to_the_queue(store: tuple[str, str]) -> None:
    path, config = store
    common = ("--store", path, "--config", config)
    _fails(1, "sess-1 is not an ended session waiting for extraction", "retry", "sess-1", *common)
    _end_session(path)
    _fails(3, "not_configured", "extract", "sess-1", *common)  # blocked under this setup
    assert "sess-1: attempts reset, queued for a worker" in _ok("retry", "sess-1", *common).stdout
    [row] = rows(path, "SELECT extraction_blocked_by, extraction_attempts, extraction_enqueued_at"
                       " FROM sessions WHERE id = 'sess-1'")
    assert row[0] is None and row[1] == 0 and row[2] is not None
    queued = Path(config).with_name("queue.sqlite")  # beside the configured store path
    with sqlite3.connect(queued) as conn:
        assert conn.execute("SELECT count(*) FROM kombu_message").fetchone() == (1,)
    conn.close()
    _fails(1, "ghost is not an ended session", "retry", "ghost", *common)


def test_migrate_exits_2_until_unmapped_rows_are_retired_or_acknowledged(store: tuple[str, str]) -> None:
    path, config = store
    common = ("--store", path, "--config", config)
    assert "none pending" in _ok("migrate", *common).stdout
    execute(path, "INSERT INTO migration_issues VALUES (2, 'rec-live', 'two about links')")
    _fails(1, "run `retold migrate`", "dump", "--scope", f"user:{USER}", *common)
    listed = run_cli("migrate", *common)
    assert listed.returncode == 2 and "rec-live" in listed.stdout and "[unresolved]" in listed.stdout
    assert "Traceback" not in listed.stderr and len(listed.stderr.strip().splitlines()) == 1
    assert "rec-live" in _ok("migrate", "--allow-unmapped", *common).stdout
    assert "[expired]" in _ok("migrate", "--expire-unmapped", "--as", "ops", *common).stdout
    assert _ok("migrate", *common).stdout.count("rec-") == 0
    _fails(2, "unrecognized arguments", "migrate", "--expire-all", *common)
