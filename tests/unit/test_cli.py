"""The retold command line: help text, migrate, one-line errors, no torch on plain commands."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from retold.cli import build_parser, main
from retold.store.migrations import LATEST, MIGRATIONS


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "retold.cli", *args], capture_output=True, text=True,
        timeout=60, cwd=cwd, env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )


def test_every_command_has_help_text() -> None:
    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command")
    assert set(commands.choices) >= {"migrate", "demo"}  # type: ignore[arg-type]
    for name, sub in commands.choices.items():  # type: ignore[union-attr]
        assert sub.description, name
        helps = {a.dest: a.help for a in sub._actions}
        assert helps["store"] and helps["config"] and helps["actor"], name


def test_help_runs_without_importing_torch() -> None:
    code = (
        "import sys\nfrom retold.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "assert 'torch' not in sys.modules and 'sentence_transformers' not in sys.modules\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "migrate" in result.stdout and "demo" in result.stdout


def test_migrate_creates_and_reports_a_store(store_target: str) -> None:
    store = store_target
    first = run_cli("migrate", "--store", store)
    assert first.returncode == 0, first.stderr
    applied = ", ".join(str(m.version) for m in MIGRATIONS)
    assert f"schema version {LATEST} (applied: {applied})" in first.stdout
    assert "embedding family: none recorded" in first.stdout  # no vector yet
    again = run_cli("migrate", "--store", store)
    assert "none pending" in again.stdout


@pytest.mark.parametrize(
    ("setup", "args", "needle"),
    [
        (lambda p: p.write_text("not a db" * 10), ("migrate", "--store", "{p}"), "not a SQLite database"),
        (lambda p: p.write_text("store: {path: x}\nbogus: 1\n"), ("migrate", "--config", "{p}"), "bogus"),
        (lambda p: None, ("migrate", "--config", "{p}"), "not found"),
    ],
)
def test_errors_are_one_line_and_a_nonzero_exit(tmp_path: Path, setup, args, needle) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "input"
    setup(path)
    result = run_cli(*(a.format(p=path) for a in args), cwd=tmp_path)
    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def test_no_command_prints_help_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 1
    assert "usage: retold" in capsys.readouterr().out
