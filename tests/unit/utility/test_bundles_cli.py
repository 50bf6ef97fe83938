"""``retold bundles`` and ``retold metrics --rollback-check`` on a real store, through
``main``: a recorded pass lets a bundle serve, a later failure takes it back, and the
rollback check exits 4 naming what was breached."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from retold import build_runtime, load_config
from retold.cli import main
from retold.config.env import store_target as store_keys
from retold.ingest.session import InProcessScheduler
from retold.models import Scope
from retold.quiet import QUIET_ENVIRONMENT
from retold.testing import ScriptedJudge, ScriptedPlanner

AGENT = "cli-agent"


@pytest.fixture(autouse=True)
def _restore_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in QUIET_ENVIRONMENT.items():
        monkeypatch.setenv(name, os.environ.get(name, value))


@pytest.fixture
def flags(tmp_path: Path, store_target: str) -> Iterator[list[str]]:
    """A store with host-issued memory on (hybrid) and 25 decided turns: one that failed,
    the others with no gap."""
    config = tmp_path / "config.yaml"
    config.write_text(f"store:\n  path: {tmp_path / 'mem.sqlite'}\nembedding:\n  model: fake\n"
                      "retrieval:\n  trigger:\n    mode: hybrid\nutility:\n  enabled: true\n")
    loaded = load_config(config, overrides={"store": store_keys(store_target)})
    planner = ScriptedPlanner({"broken": RuntimeError("planner crashed")})
    with build_runtime(loaded, scheduler=InProcessScheduler(), environ={}, planner=planner,
                       admission=ScriptedJudge()) as rt:
        rt.host.grant(AGENT, Scope("user", "cleo"), read=True, write=True)
        with rt.session(AGENT, "cleo", session_id="chat") as s:
            for i in range(25):
                s.say("user", "this one is broken, please look" if i == 0 else f"Tell me a fact number {i}.")
                s.respond(lambda recalled: "a reply")
    yield ["--store", store_target, "--config", str(config)]


def out_of(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(list(args)) == 0
    return capsys.readouterr().out


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_record_a_pass_then_a_failure(flags: list[str], tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "bundles", "list", *flags)
    assert code == 0 and "runs in shadow" in out and "no results recorded" in out
    code, out, _ = run(capsys, "bundles", "show", *flags)
    shown = json.loads(out)
    # The configured models name the bundle, whether or not a key is set in this process.
    assert shown["components"]["planner"].startswith("claude-") and len(shown["bundle"]) == 16
    assert f"current bundle {shown['bundle']}" in out_of(capsys, "bundles", "list", *flags)
    components = tmp_path / "components.json"
    components.write_text(json.dumps(shown["components"]))

    code, out, _ = run(capsys, "bundles", "record", str(components), "--passed", "--evidence",
                       "utility_bench: pollution 0.0", "--by", "ops", *flags)
    assert code == 0 and f"recorded bundle {shown['bundle']} as passed" in out and "note:" not in out
    code, out, _ = run(capsys, "bundles", "list", *flags)
    assert "may serve regenerated replies" in out and "passed  by ops: utility_bench" in out

    code, out, _ = run(capsys, "bundles", "record", str(components), "--failed", "--evidence", "rolled back",
                       "--by", "ops", *flags)
    assert code == 0 and "runs in shadow" in out
    code, out, _ = run(capsys, "bundles", "list", "--json", *flags)
    listed = json.loads(out)
    assert listed["may_serve"] is False and [r["passed"] for r in listed["results"]] == [False, True]


@pytest.mark.parametrize("content", ["not json", "[1, 2]", "{}"])
def test_a_bad_components_file_is_one_line_and_records_nothing(
        flags: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    code, out, err = run(capsys, "bundles", "record", str(bad), "--passed", "--evidence", "x", "--by", "ops",
                         *flags)
    assert code == 1 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    code, out, _ = run(capsys, "bundles", "list", *flags)
    assert "no results recorded" in out
    code, _, err = run(capsys, "bundles", "record", str(bad), "--evidence", "x", "--by", "ops", *flags)
    assert code == 1 and "--passed or --failed" in err


def test_metrics_reports_turns_and_the_rollback_check_exits_4_on_a_breach(
        flags: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "metrics", "--no-queue", "--no-hygiene", *flags)
    assert code == 0 and "25 (failed 1, no_gap 24)" in out and "failed 4%" in out

    code, out, err = run(capsys, "metrics", "--no-queue", "--no-hygiene", "--rollback-check", *flags)
    assert code == 0 and "rollback:" not in err  # 1 failure in 25 turns is within 5%

    strict = Path(flags[-1]).read_text() + "  rollback:\n    max_failure_rate: 0.01\n"
    Path(flags[-1]).write_text(strict)
    code, out, err = run(capsys, "metrics", "--no-queue", "--no-hygiene", "--rollback-check", "--json",
                         *flags)
    assert code == 4
    breaches = json.loads(out)["rollback"]
    assert len(breaches) == 1 and "failure rate 0.04 over utility.rollback's 0.01" in breaches[0]
    assert "rollback: bundle" in err
