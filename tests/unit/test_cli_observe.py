"""``retold sessions``, ``events`` and ``metrics`` on a real store, through ``main`` (and
once through ``python -m retold.cli``): text and ``--json``, filters, one-line errors,
and no model needed to read what the pipeline did."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from retold import build_runtime, load_config
from retold.cli import main
from retold.config.env import store_target as store_keys
from retold.ingest.extractor import FakeExtractor
from retold.ingest.reviewer import TableReviewer
from retold.ingest.session import InProcessScheduler
from retold.models import ExtractionOutput, Principal, Scope, SessionSummary
from retold.quiet import QUIET_ENVIRONMENT

AGENT = "cli-agent"
QUIET = ExtractionOutput([], SessionSummary("They talked about the weather.", [], []))


@pytest.fixture(autouse=True)
def _restore_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # main() sets the quiet variables in os.environ; keep them out of later tests.
    for name, value in QUIET_ENVIRONMENT.items():
        monkeypatch.setenv(name, os.environ.get(name, value))


@pytest.fixture
def store(tmp_path: Path, store_target: str) -> Iterator[list[str]]:
    """Sessions ``chat`` (open), ``stuck`` (no hosted model: blocked until one is), ``done``
    (extracted) and ``bea-1`` (another user's, ended, never tried); returns the flags."""
    config = tmp_path / "config.yaml"
    # The store path places the embedded broker's file, on both backends.
    config.write_text(f"store:\n  path: {tmp_path / 'mem.sqlite'}\nembedding:\n  model: fake\n")
    path = store_target
    loaded = load_config(config, overrides={"store": store_keys(path)})
    with build_runtime(loaded, scheduler=InProcessScheduler(), environ={}) as rt:
        rt.host.grant(AGENT, Scope("user", "cleo"), read=True, write=True)
        for session_id, user in (("chat", "cleo"), ("stuck", "cleo"), ("done", "cleo"), ("bea-1", "bea")):
            principal = Principal(AGENT, user, session_id, None)
            rt.hooks.on_turn(principal, "user", "What a sunny day it is in Berlin today.")
            if session_id != "chat":
                rt.hooks.on_session_end(principal)
        assert rt.session_end.run("stuck").outcome == "not_configured"
        assert rt.session_end.using(FakeExtractor(QUIET), TableReviewer()).run("done").outcome == "extracted"
    yield ["--store", path, "--config", str(config)]


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _ok(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    code, out, err = _run(capsys, *args)
    assert code == 0, err
    return out


def _json_lines(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines()]


def test_sessions_lists_state_attempts_and_the_last_error(
    store: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    out = _ok(capsys, "sessions", *store)
    header, *rows = out.splitlines()
    assert header.split()[:4] == ["SESSION", "STATE", "USER", "AGENT"] and "LAST ERROR" in header
    states = {row.split()[0]: row.split()[1] for row in rows}
    assert states == {"chat": "open", "stuck": "blocked", "done": "extracted", "bea-1": "pending"}
    stuck = next(row for row in rows if row.startswith("stuck"))
    assert "not_configured" in stuck and "ANTHROPIC_API_KEY" in stuck
    failed = _json_lines(_ok(capsys, "sessions", "--failed", "--json", *store))
    # Not being configured is no failed attempt: the session waits for another setup.
    assert [(s["id"], s["state"], s["attempts"]) for s in failed] == [("stuck", "blocked", 0)]
    assert "not_configured" in str(failed[0]["last_error"]) and failed[0]["ended_at"]
    pending = _json_lines(_ok(capsys, "sessions", "--pending", "--json", *store))
    assert [s["id"] for s in pending] == ["bea-1"]
    assert [s["id"] for s in _json_lines(_ok(capsys, "sessions", "--user", "bea", "--json", *store))] == [
        "bea-1"]
    assert [s["id"] for s in _json_lines(_ok(capsys, "sessions", "--state", "extracted", "--state", "open",
                                             "--json", *store))] == ["chat", "done"]


def test_events_filter_and_print_payloads(store: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    extraction = _json_lines(_ok(capsys, "events", "--kind", "extraction.*", "--json", *store))
    assert [e["kind"] for e in extraction] == ["extraction.not_configured", "extraction.run"]
    assert extraction[0]["payload"]["session_id"] == "stuck"  # type: ignore[index]
    summary_id = extraction[1]["payload"]["summary"]["record_id"]  # type: ignore[index]
    by_record = _json_lines(_ok(capsys, "events", "--record", str(summary_id), "--json", *store))
    assert [e["kind"] for e in by_record] == ["record.created"]
    text = _ok(capsys, "events", "--session", "stuck", *store)
    assert text.splitlines()[0].split() == ["AT", "KIND", "ACTOR", "RECORD", "PAYLOAD"]
    assert "extraction.not_configured" in text
    assert '"message": "no extractor is configured: ANTHROPIC_API_KEY' in text
    assert _ok(capsys, "events", "--since", "1h", "--limit", "1", "--json", *store).count("\n") == 1
    assert _ok(capsys, "events", "--since", "2999-01-01T00:00:00Z", "--json", *store) == ""


def test_metrics_as_text_and_json(store: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads(_ok(capsys, "metrics", "--json", *store))
    assert data["extractions"] == {"extracted": 1, "not_configured": 1}
    assert data["writes"] == {"created": 1}  # the session summary of "done"
    assert data["sessions"] == {"open": 1, "pending": 1, "extracting": 0, "extracted": 1, "failed": 0,
                                "blocked": 1}
    assert data["searches"] == {"total": 0, "empty": 0, "empty_rate": None}
    assert data["extraction_lag"]["count"] == 1
    assert data["vectors_indexed"] == 1  # the summary's: what a process serving the store holds
    assert data["queue"]["reachable"] and data["queue"]["depths"] == {"extraction": 0, "maintenance": 0}
    text = _ok(capsys, "metrics", "--no-queue", *store)
    assert "extractions: extracted 1, not_configured 1" in text
    assert "sessions:    open 1, pending 1, extracted 1, blocked 1" in text
    assert "queues:      not asked (--no-queue)" in text
    assert "vectors:     1 indexed (what a process serving this tenant holds), none pending" in text
    assert json.loads(_ok(capsys, "metrics", "--json", "--no-queue", *store))["queue"] is None


def test_an_unreachable_broker_is_a_line_of_the_report_not_a_failure(
    store: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from tests.ports import free_port

    config = tmp_path / "redis.yaml"
    config.write_text(f"embedding:\n  model: fake\nqueue:\n  broker_url: redis://127.0.0.1:{free_port()}/0\n")
    text = _ok(capsys, "metrics", "--store", store[1], "--config", str(config))
    assert "queues:      broker unreachable (redis://127.0.0.1:" in text


def test_bad_input_is_one_line_and_a_nonzero_exit(
    store: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["events", "--since", "yesterday", *store])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and len(err) == 1 and "--since" in err[0]
    missing = str(tmp_path / "nowhere.sqlite")
    for command in ("sessions", "events", "metrics"):
        code, out, err = _run(capsys, command, "--store", missing, "--config", store[3])
        assert (code, out, err.strip()) == (
            1, "", f"retold {command}: no store at {missing}; `retold migrate --store {missing}` creates one")


def test_reads_need_no_model_files_and_import_no_torch(store: list[str], tmp_path: Path) -> None:
    config = tmp_path / "missing-model.yaml"
    config.write_text(f"embedding:\n  model: {tmp_path / 'no-such-model'}\n")
    code = (
        "import sys\nfrom retold.cli import main\n"
        f"for command in ('sessions', 'events', 'metrics'):\n"
        f"    assert main([command, '--store', {store[1]!r}, '--config', {str(config)!r}]) == 0\n"
        "assert 'torch' not in sys.modules and 'sentence_transformers' not in sys.modules\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "stuck" in result.stdout and "extraction.run" in result.stdout and "sessions:" in result.stdout


def test_the_console_entry_point_runs_the_new_commands(store: list[str]) -> None:
    result = subprocess.run([sys.executable, "-m", "retold.cli", "sessions", "--failed", *store],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[1].startswith("stuck")
    assert result.stderr.strip() == "1 session (newest 50 that match, oldest first)"
