"""Each store condition through the real entry point: one line on stderr naming it and an
exit code, a traceback only with -v, and reads that keep working where they can.

Tests may run as root, where chmod stops no write, so the read-only store is simulated
with ``store.read_only: true`` (SQLite's ``mode=ro``, the same open a file this process
cannot write gets)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from retold import build_runtime, load_config
from retold.cli import main
from retold.cli_failure import EXIT_DAMAGED, EXIT_ERROR, EXIT_LOCKED
from retold.config.env import store_target as store_keys
from retold.ingest.session import InProcessScheduler
from retold.models import Principal, Scope
from retold.testing import make_record
from tests.conditions import FullDiskStore, corrupt_page, stale_index, write_lock_held
from tests.optional import need
from tests.ports import free_port
from tests.sql import execute

SCOPE = "user:cleo"


@pytest.fixture
def store(tmp_path: Path, store_target: str) -> tuple[str, Path]:
    """A store holding one record (a file, or a PostgreSQL schema), and a config with a
    short busy timeout."""
    config = tmp_path / "config.yaml"
    config.write_text(f"embedding:\n  model: fake\nstore:\n  busy_timeout_seconds: 0.2\n"
                      f"  path: {tmp_path / 'mem.sqlite'}\n")
    with build_runtime(load_config(config, overrides={"store": store_keys(store_target)})) as rt:
        rt.store.write_record(make_record(scope=Scope.parse(SCOPE), content="Cleo likes river walks."))
    return store_target, config


def _run(capsys: pytest.CaptureFixture[str], store: tuple[str, Path], *args: str) -> tuple[int, list[str]]:
    path, config = store
    code = main([*args, "--store", path, "--config", str(config)])
    return code, capsys.readouterr().err.strip().splitlines()


def _one_line(lines: list[str], *needles: str) -> None:
    assert len(lines) == 1, lines
    assert all(needle in lines[0] for needle in needles), lines[0]
    assert "not a Retold store" not in lines[0]


def test_a_locked_store_serves_reads_and_a_write_says_locked_with_its_wait(
    store: tuple[str, Path], capsys: pytest.CaptureFixture[str],
) -> None:
    with write_lock_held(store[0]):
        assert _run(capsys, store, "dump", "--scope", SCOPE) == (0, ["1 active records in user:cleo"])
        code, lines = _run(capsys, store, "grant", "agent-a", SCOPE)
    assert code == EXIT_LOCKED
    _one_line(lines, "retold grant: store", "is locked", "waiting 0.2 s")


def test_a_read_only_store_serves_reads_and_refuses_a_write(
    store: tuple[str, Path], capsys: pytest.CaptureFixture[str],
) -> None:
    store[1].write_text(store[1].read_text() + "  read_only: true\n")
    assert _run(capsys, store, "dump", "--scope", SCOPE)[0] == 0
    code, lines = _run(capsys, store, "grant", "agent-a", SCOPE)
    assert code == EXIT_ERROR
    _one_line(lines, "is read-only", "searches and reads work")


@pytest.mark.sqlite_only("a full disk is simulated with SQLite's max_page_count")
def test_a_full_disk_refuses_the_write(
    store: tuple[str, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("retold.store.location.Store", FullDiskStore)
    code, lines = _run(capsys, store, "grant", "agent-a", "project:" + "p" * 30_000)
    assert code == EXIT_ERROR
    _one_line(lines, "the disk is full", "rolled back")


_FILE = pytest.mark.sqlite_only("the bytes of a store file")
SETUPS = [
    pytest.param(lambda p: Path(p).write_text("meeting notes\n" * 100), ("dump", "--scope", SCOPE),
                 "is not a SQLite database", EXIT_ERROR, id="not SQLite", marks=_FILE),
    pytest.param(lambda p: execute(p, "INSERT INTO schema_migrations VALUES (99, 'future', 'x')"),
                 ("dump", "--scope", SCOPE), "newer than this Retold", EXIT_ERROR, id="newer schema"),
    pytest.param(corrupt_page, ("dump", "--scope", SCOPE), "is damaged", EXIT_DAMAGED,
                 id="damaged schema page", marks=_FILE),
    pytest.param(lambda p: corrupt_page(p, "records"), ("dump", "--scope", SCOPE), "is damaged",
                 EXIT_DAMAGED, id="damaged table page", marks=_FILE),
]


@pytest.mark.parametrize(("setup", "args", "needle", "exit_code"), SETUPS)
def test_a_store_that_cannot_be_used_says_why_in_one_line(
    store: tuple[str, Path], capsys: pytest.CaptureFixture[str],
    setup: Callable[[str], object], args: tuple[str, ...], needle: str, exit_code: int,
) -> None:
    setup(store[0])
    code, lines = _run(capsys, store, *args)
    assert code == exit_code
    _one_line(lines, needle)
    if exit_code == EXIT_DAMAGED:
        assert "retold check --store" in lines[0]


@pytest.mark.sqlite_only("a damaged index page of a store file")
def test_a_dump_through_an_index_that_lost_rows_refuses_instead_of_answering_short(
    store: tuple[str, Path], capsys: pytest.CaptureFixture[str],
) -> None:
    path, config = store
    with build_runtime(load_config(config, overrides={"store": store_keys(path)})) as rt:
        for n in range(299):
            rt.store.write_record(make_record(scope=Scope.parse(SCOPE), content=f"Cleo walk number {n}."))
    assert _run(capsys, store, "dump", "--scope", SCOPE)[0] == 0
    capsys.readouterr()
    stale_index(path, "records_scope", "rowid % 3 <> 0")
    code, lines = _run(capsys, store, "dump", "--scope", SCOPE)
    assert code == EXIT_DAMAGED
    _one_line(lines, "is damaged", "scope index lists 200 records of user:cleo", "finds 300",
              "retold check --store")


@pytest.mark.sqlite_only("a damaged index page of a store file")
def test_an_export_through_an_index_that_lost_rows_refuses_and_leaves_no_file(
    store: tuple[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path,
) -> None:
    path, config = store
    with build_runtime(load_config(config, overrides={"store": store_keys(path)})) as rt:
        for n in range(299):
            rt.store.write_record(make_record(scope=Scope.parse(SCOPE), content=f"Cleo walk number {n}."))
    whole = tmp_path / "whole.jsonl"
    assert _run(capsys, store, "export", "--scope", SCOPE, "--out", str(whole))[0] == 0
    assert sum(json.loads(line)["line"] == "record" for line in whole.read_text().splitlines()) == 300
    stale_index(path, "records_scope", "rowid % 3 <> 0")
    short = tmp_path / "short.jsonl"
    code, lines = _run(capsys, store, "export", "--scope", SCOPE, "--out", str(short))
    assert code == EXIT_DAMAGED
    _one_line(lines, "is damaged", f"scope index lists 200 records of {SCOPE}", "retold check --store")
    assert list(tmp_path.glob("short.jsonl*")) == []  # nothing that looks like an export


@pytest.mark.sqlite_only("a damaged page of a store file")
def test_verbose_adds_the_cause_and_traceback_after_the_line(
    store: tuple[str, Path], capsys: pytest.CaptureFixture[str],
) -> None:
    corrupt_page(store[0], "records")
    code, lines = _run(capsys, store, "dump", "--scope", SCOPE, "-v")
    assert code == EXIT_DAMAGED
    assert "is damaged" in lines[0] and "Traceback" not in lines[0]
    details = "\n".join(lines[1:])
    assert "sqlite3.DatabaseError: database disk image is malformed" in details
    assert "retold.errors.StoreCorruptError" in details


def test_a_provider_failure_in_extract_is_one_line_with_or_without_v(
    store: tuple[str, Path],
) -> None:
    need("anthropic")
    path, config = store
    with build_runtime(load_config(config, overrides={"store": store_keys(path)}),
                       scheduler=InProcessScheduler()) as rt:
        principal = Principal("agent-a", "cleo", "s-down", None)
        rt.hooks.on_turn(principal, "user", "Please remember that I like river walks.")
        rt.hooks.on_session_end(principal)
    # A provider that refuses every connection, with a key so the hosted client is built.
    config.write_text(config.read_text() + f"hosted:\n  base_url: http://127.0.0.1:{free_port()}/\n"
                      "  max_retries: 0\n")
    env = {**os.environ, "ANTHROPIC_API_KEY": "test-key", "HF_HUB_OFFLINE": "1"}

    def extract(*flags: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "retold.cli", "extract", "s-down", "--store", path,
                               "--config", str(config), *flags], capture_output=True, text=True,
                              timeout=120, env=env)

    quiet = extract()
    assert quiet.returncode == EXIT_ERROR and quiet.stdout == ""
    # One line naming the stage and the provider; the SDK's own reason follows, and its
    # wording changes between SDK releases, so only its presence is checked.
    [line] = quiet.stderr.strip().splitlines()
    prefix = "retold extract: extraction failed: extract provider: cannot reach the Anthropic API: "
    assert line.startswith(prefix) and len(line) > len(prefix)
    verbose = extract("-v")
    assert verbose.returncode == EXIT_ERROR
    # A provider that is down is an expected failure: its reason is the whole story, and
    # the attempt is recorded on the session for `retold sessions`.
    assert verbose.stderr == quiet.stderr and "Traceback" not in verbose.stderr
