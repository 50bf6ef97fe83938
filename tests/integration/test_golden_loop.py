"""The loop a team runs per release, through the ``retold`` command on SQLite and on
PostgreSQL: capture a golden set from the search log, label it, freeze it, evaluate it
against the store (which stays exactly as it was), compare with the last run, and fail
the run when a planted regression makes a metric worse, naming the metric and the items."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from retold.cli import main
from retold.config import is_database_url
from retold.quality.golden import read_golden
from retold.testing import anthropic_stub as claude
from retold.testing.anthropic_stub import AnthropicStub
from tests.golden_world import QUESTIONS, GoldenWorld, build
from tests.sql import execute, rows

pytestmark = pytest.mark.both_backends

ANSWERS = {"drink": ["drink"], "manager": ["manager"], "billing": ["marcus"], "phone": ["phone"],
           "tower": [], "deploy": ["deploy"], "cat": ["cat"], "allergy": []}


# A busy test machine's timings are not what this test is about.
STEADY = ("--tolerance", "search_p50_ms=10000%")


def retold(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "retold.cli", *args], capture_output=True, text=True,
                          timeout=180, env={**os.environ, "HF_HUB_OFFLINE": "1"})


def fingerprint(target: str) -> object:
    """What must not change when the store is only read: the file's bytes on SQLite; on
    PostgreSQL every content table's rows."""
    if not is_database_url(target):
        return hashlib.sha256(Path(target).read_bytes()).hexdigest()
    tables = ("records", "record_conflicts", "events", "search_log", "embeddings", "entities", "grants",
              "sessions", "session_turns", "store_meta")
    return {table: sorted(map(repr, rows(target, f"SELECT * FROM {table}"))) for table in tables}


def newest(reports: Path) -> dict[str, object]:
    """The report the last run wrote."""
    found = [json.loads(path.read_text()) for path in reports.glob("eval-*.json")]
    return max(found, key=lambda data: str(data["at"]))


@pytest.fixture
def deployment(tmp_path: Path, store_target: str) -> GoldenWorld:
    gw = build(tmp_path, store_target)
    gw.ask_all()
    gw.scores = gw.answer_scores()
    gw.world.rt.close()  # what the command reads is what the agents left
    return gw


def test_capture_label_freeze_eval_and_compare(deployment: GoldenWorld, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    gw, config, target = deployment, str(deployment.config), deployment.world.target
    golden, reports = tmp_path / "release.jsonl", tmp_path / "reports"
    before = fingerprint(target)

    captured = retold("golden", "capture", "--config", config, "--out", str(golden), "--seed", "3")
    assert captured.returncode == 0, captured.stderr
    assert f"captured {len(QUESTIONS)} items" in captured.stdout
    assert fingerprint(target) == before

    keys = {question: key for key, _, _, question in QUESTIONS}
    for item in read_golden(golden).items:
        answer = [gw.ids[k] for k in ANSWERS[keys[item.question[0]]]]
        # A labeller types the short ids search results show, or says nothing answers.
        args = ["--expect", *(rid[-8:] for rid in answer)] if answer else ["--nothing", "--answer", "unknown"]
        assert main(["golden", "label", str(golden), item.id, *args]) == 0
    assert main(["golden", "show", str(golden)]) == 0
    shown = capsys.readouterr().out
    assert f"labelled {len(QUESTIONS)} (6 answerable, 2 nothing stored), unlabelled 0" in shown
    assert main(["golden", "freeze", str(golden)]) == 0
    frozen = read_golden(golden)
    assert frozen.header.frozen is not None and frozen.header.frozen.sha256 == frozen.content_hash()

    first = retold("eval", str(golden), "--config", config, "--report-dir", str(reports), *STEADY)
    assert first.returncode == 0, first.stderr
    assert "recall@10 1," in first.stdout and "leaks 0" in first.stdout
    assert "no previous report" in first.stdout
    assert fingerprint(target) == before  # not a search-log row, not a byte
    written = sorted(reports.glob("eval-*.json"))
    assert len(written) == 1 and written[0].with_suffix(".md").is_file()
    report = json.loads(written[0].read_text())
    assert report["set"]["sha256"] == frozen.content_hash() and report["baseline"] is True
    assert str(tmp_path) not in written[0].read_text()

    again = retold("eval", str(golden), "--config", config, "--report-dir", str(reports), *STEADY)
    assert again.returncode == 0, again.stderr
    assert f"compared with {written[0].name}" in again.stdout

    billing = next(i.id for i in frozen.items if keys[i.question[0]] == "billing")
    # Planted: the superseded billing contact made current again.
    execute(target, "UPDATE records SET status = 'confirmed' WHERE id = ?", gw.ids["dana"])
    stale = retold("eval", str(golden), "--config", config, "--report-dir", str(reports), *STEADY)
    assert stale.returncode == 3
    named = next(line for line in stale.stderr.splitlines() if "stale_rate regressed overall" in line)
    went_stale = [i["id"] for i in newest(reports)["items"] if i["stale"] == [gw.ids["dana"]]]
    assert billing in went_stale and named.endswith(f"items {', '.join(went_stale)}")
    execute(target, "UPDATE records SET status = 'superseded' WHERE id = ?", gw.ids["dana"])
    before = fingerprint(target)

    # Planted: the answer threshold moved just above the weakest answerable question's score.
    answerable = sorted({score for key, score in gw.scores.items() if ANSWERS[key]})
    threshold = (answerable[0] + answerable[1]) / 2
    weakest = sorted(i.id for i in frozen.items if ANSWERS[keys[i.question[0]]]
                     and gw.scores[keys[i.question[0]]] < threshold)
    raised = yaml.safe_load(Path(config).read_text())
    raised["retrieval"]["gate"]["answer_at"]["tool"] = threshold
    moved = tmp_path / "raised.yaml"
    moved.write_text(yaml.safe_dump(raised))
    empty = retold("eval", str(golden), "--config", str(moved), "--report-dir", str(reports), *STEADY)
    assert empty.returncode == 3, empty.stderr
    gone = [i["id"] for i in newest(reports)["items"] if i["kind"] == "answerable" and i["empty"]]
    assert gone == weakest
    named = next(line for line in empty.stderr.splitlines() if "empty_rate regressed overall" in line)
    assert named.endswith(f"items {', '.join(weakest)}")
    # A failed run is no baseline: running it again fails again.
    rerun = retold("eval", str(golden), "--config", str(moved), "--report-dir", str(reports), *STEADY)
    assert rerun.returncode == 3
    assert fingerprint(target) == before


def test_a_frozen_set_refuses_edits_and_labels_in_one_line(deployment: GoldenWorld, tmp_path: Path) -> None:
    config, golden = str(deployment.config), tmp_path / "set.jsonl"
    assert retold("golden", "capture", "--config", config, "--out", str(golden)).returncode == 0
    again = retold("golden", "capture", "--config", config, "--out", str(golden))
    assert again.returncode == 2 and "exists" in again.stderr and len(again.stderr.splitlines()) == 1
    for item in read_golden(golden).items:
        assert main(["golden", "label", str(golden), item.id, "--nothing"]) == 0
    assert main(["golden", "freeze", str(golden)]) == 0
    first = read_golden(golden).items[0].id
    relabel = retold("golden", "label", str(golden), first, "--expect", "abcd")
    assert relabel.returncode == 1 and "frozen" in relabel.stderr and len(relabel.stderr.splitlines()) == 1
    text = golden.read_text()
    golden.write_text(text.replace('"nothing_stored": true', '"nothing_stored": false, "x": 1', 1))
    tampered = retold("eval", str(golden), "--config", config)
    assert tampered.returncode == 1 and "Traceback" not in tampered.stderr
    assert len(tampered.stderr.splitlines()) == 1 and str(golden) in tampered.stderr
    golden.write_text(text.replace('"labelled": true', '"labelled": true ', 1).replace(
        '"answer": null', '"answer": "edited"', 1))
    edited = retold("eval", str(golden), "--config", config)
    assert edited.returncode == 1 and "changed after freezing" in edited.stderr
    assert len(edited.stderr.splitlines()) == 1


def test_eval_grades_answers_through_a_provider_and_reports_the_audit(
        deployment: GoldenWorld, tmp_path: Path, anthropic_stub: AnthropicStub) -> None:
    gw, target = deployment, deployment.world.target
    golden, reports = tmp_path / "answers.jsonl", tmp_path / "reports"
    assert retold("golden", "capture", "--config", str(gw.config), "--out", str(golden)).returncode == 0
    keys = {question: key for key, _, _, question in QUESTIONS}
    for item in read_golden(golden).items:
        key = keys[item.question[0]]
        answer = [gw.ids[k] for k in ANSWERS[key]]
        # Only the billing question and the two "nothing stored" ones say what the answer is.
        args = (["--nothing"] if not answer else ["--expect", *answer]) + (
            ["--answer", "Marcus Chen"] if key == "billing" else [])
        assert main(["golden", "label", str(golden), item.id, *args]) == 0
    assert main(["golden", "freeze", str(golden)]) == 0
    before = fingerprint(target)
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")} | {"HF_HUB_OFFLINE": "1"}

    def run_eval(config: Path, *extra: str, key: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "retold.cli", "eval", str(golden), "--config", str(config), "--answer",
             "--report-dir", str(reports), *STEADY, *extra], capture_output=True, text=True, timeout=180,
            env=env | ({"ANTHROPIC_API_KEY": key} if key else {}))

    skipped = run_eval(gw.config)
    assert skipped.returncode == 0, skipped.stderr
    assert "answer accuracy: skipped (" in skipped.stdout
    assert newest(reports)["answers"]["status"] == "skipped"
    audit = newest(reports)["audit"]
    assert audit["tenant"] == "default" and audit["open"] == 0 and audit["true_rate"] is None

    # Each graded item: the answer, then (for an expected answer) the judge's verdict.
    script = []
    for item in read_golden(golden).labelled:
        if item.nothing_stored:
            script.append(claude.tool_use({"answer": "I don't know.", "known": False}))
        elif item.answer is not None:
            script += [claude.tool_use({"answer": "Marcus Chen handles billing.", "known": True}),
                       claude.tool_use({"verdict": "correct", "reason": "names Marcus Chen"})]
    anthropic_stub.script(*script)
    hosted = yaml.safe_load(Path(gw.config).read_text())
    hosted["hosted"] = {"provider": "anthropic", "base_url": anthropic_stub.base_url}
    config = tmp_path / "hosted.yaml"
    config.write_text(yaml.safe_dump(hosted))
    graded = run_eval(config, "--price", "claude-haiku-4-5-20251001=1,5", key="test-key")
    assert graded.returncode == 0, graded.stderr
    assert "answer accuracy: 100.0% (3/3 correct)" in graded.stdout, graded.stdout
    answers = newest(reports)["answers"]
    assert answers["answer_model"] == "claude-haiku-4-5-20251001" and answers["cost_usd"] > 0
    assert len(anthropic_stub.requests) == len(script)
    markdown = sorted(reports.glob("eval-*.md"))[-1].read_text()
    assert "## Answer accuracy" in markdown and "## Extraction audit" in markdown
    assert fingerprint(target) == before
