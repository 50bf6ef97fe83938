"""Reports and their comparison: which way each metric may move, by how much, the items
named with a regression, leaks that fail every run, and which report is the baseline."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from retold.quality.evaluation import Evaluation, ItemResult, Leak, metrics_of
from retold.quality.report import (
    DEFAULT_TOLERANCES,
    Tolerance,
    compare,
    latest_report,
    parse_tolerance,
    render_markdown,
    report_data,
    write_report,
)
from retold.testing import T0


def result(item: str, *, found: bool = True, empty: bool = False, stale: bool = False, tokens: int = 100,
           ms: float = 10.0, nothing: bool = False, leak: bool = False) -> ItemResult:
    returned = [] if empty else [f"{item}-rec"]
    return ItemResult(
        id=item, scope="user:aditya", kind="nothing_stored" if nothing else "answerable", returned=returned,
        found=[f"{item}-rec"] if found and not nothing and not empty else [],
        missing=[] if nothing or (found and not empty) else [f"{item}-rec"],
        recall=None if nothing else float(found and not empty), empty=empty,
        stale=[f"{item}-rec"] if stale else [], contradictions=[],
        leaks=[Leak(item, "x", "user:mei", "a/aditya", "item", "cannot read")] if leak else [],
        tokens=tokens, ms=ms)


def run(results: Sequence[ItemResult]) -> Evaluation:
    overall = metrics_of(results, 0, 100)
    return Evaluation("f" * 64, True, "default", 10, list(results), overall, {"user:aditya": overall},
                      0, 0, [], 0.5)


def data(evaluation: Evaluation, **extra: Any) -> dict[str, Any]:
    return report_data(evaluation, at=T0, set_name="set.jsonl", settings={}, tolerances=DEFAULT_TOLERANCES,
                       previous=None, previous_name=None, regressions=[], **extra)


BASE = [result("q1"), result("q2"), result("q3"), result("q4", nothing=True, empty=True)]


def test_an_unchanged_run_has_no_regression() -> None:
    assert compare(run(BASE), data(run(BASE)), DEFAULT_TOLERANCES) == []


def test_an_answerable_item_gone_empty_names_the_metrics_and_the_item() -> None:
    after = [BASE[0], result("q2", empty=True), BASE[2], BASE[3]]
    found = {(r.metric, r.scope): r for r in compare(run(after), data(run(BASE)), DEFAULT_TOLERANCES)}
    assert set(found) == {("recall_at_k", "overall"), ("empty_rate", "overall"),
                          ("recall_at_k", "user:aditya"), ("empty_rate", "user:aditya")}
    empty = found[("empty_rate", "overall")]
    assert empty.items == ["q2"] and empty.before == 0.0 and empty.after == round(1 / 3, 4)
    assert "empty_rate regressed overall" in empty.line() and "items q2" in empty.line()


def test_better_figures_and_moves_within_tolerance_pass() -> None:
    before = [result("q1", empty=True), *BASE[1:]]
    assert compare(run(BASE), data(run(before)), DEFAULT_TOLERANCES) == []  # recall went up
    stale = [*BASE[:3], result("q5", stale=True)]
    loose = {**DEFAULT_TOLERANCES, "stale_rate": Tolerance(0.5)}
    assert compare(run(stale), data(run([*BASE[:3], result("q5")])), loose) == []
    assert [r.metric for r in compare(run(stale), data(run([*BASE[:3], result("q5")])), DEFAULT_TOLERANCES)
            if r.scope == "overall"] == ["stale_rate"]


def test_timings_and_tokens_move_by_share_and_a_small_slowdown_is_noise() -> None:
    slower = [result(r.id, ms=14.0, nothing=r.kind == "nothing_stored", empty=r.empty) for r in BASE]
    assert compare(run(slower), data(run(BASE)), DEFAULT_TOLERANCES) == []  # +4 ms: under the floor
    much = [result(r.id, ms=40.0, nothing=r.kind == "nothing_stored", empty=r.empty) for r in BASE]
    metrics = {r.metric for r in compare(run(much), data(run(BASE)), DEFAULT_TOLERANCES)}
    assert metrics == {"search_p50_ms"}
    heavy = [result(r.id, tokens=150, nothing=r.kind == "nothing_stored", empty=r.empty) for r in BASE]
    metrics = {r.metric for r in compare(run(heavy), data(run(BASE)), DEFAULT_TOLERANCES)}
    assert metrics == {"tokens_per_search"}


def test_a_leak_fails_the_run_without_any_previous_report() -> None:
    leaking = [result("q1", leak=True), *BASE[1:]]
    found = compare(run(leaking), None, DEFAULT_TOLERANCES)
    assert [(r.metric, r.items) for r in found] == [("leaks", ["q1"])]
    assert data(run(leaking), accepted=True)["baseline"] is False


def test_the_previous_report_is_the_latest_baseline_of_the_same_set(tmp_path: Path) -> None:
    first = data(run(BASE))
    write_report(tmp_path, first)
    regressed = report_data(run(BASE), at=T0.replace(hour=13), set_name="set.jsonl", settings={},
                            tolerances=DEFAULT_TOLERANCES, previous=first, previous_name="x",
                            regressions=compare(run([result("q1", empty=True), *BASE[1:]]), first,
                                                DEFAULT_TOLERANCES))
    assert regressed["baseline"] is False
    write_report(tmp_path, regressed)
    other_k = {**data(run(BASE)), "k": 5, "at": "2026-09-03T14:00:00.000000Z"}
    write_report(tmp_path, other_k)
    found = latest_report(tmp_path, "f" * 64, 10)
    assert found is not None and found[1]["at"] == first["at"]
    assert latest_report(tmp_path, "e" * 64, 10) is None
    markdown = render_markdown(regressed)
    assert "## Regressions" in markdown and "Not a baseline" in markdown


@pytest.mark.parametrize(("text", "expected"), [
    ("recall_at_k=0.05", ("recall_at_k", Tolerance(0.05))),
    ("search_p50_ms=50%", ("search_p50_ms", Tolerance(0.5, relative=True))),
])
def test_tolerances_are_absolute_or_relative(text: str, expected: tuple[str, Tolerance]) -> None:
    assert parse_tolerance(text) == expected


@pytest.mark.parametrize(("text", "needle"), [
    ("recall=0.1", "no metric 'recall'"), ("leaks=1", "any leak fails"), ("recall_at_k", "METRIC=VALUE"),
])
def test_a_bad_tolerance_says_what_is_wrong(text: str, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        parse_tolerance(text)
