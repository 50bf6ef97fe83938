"""Query rewriting and its interplay with freshness."""

from __future__ import annotations

import logging
import time

import pytest

from retold.config import RewriteConfig
from retold.models import RewriteResult
from retold.retrieve.rewrite import FakeRewriter, NoRewriter, RewriteError, rewrite_stage

ON = RewriteConfig(enabled=True)
RAW = ["what does he prefer?", "the second one"]
CONTEXT = "user: How should you explain things to Aditya?\nassistant: Briefly."


def test_rewriting_disabled_keeps_queries_and_never_calls_the_rewriter() -> None:
    fake = FakeRewriter(["Aditya's preferred explanation style", "the second deploy script"])

    queries, status = rewrite_stage(fake, RAW, CONTEXT, RewriteConfig(enabled=False))

    assert (queries, status) == (RAW, "disabled")
    assert fake.calls == []


def test_fake_rewriter_applied_returns_the_rewritten_queries() -> None:
    rewritten = ["Aditya's preferred explanation style", "the second deploy script"]
    fake = FakeRewriter(rewritten)

    queries, status = rewrite_stage(fake, RAW, CONTEXT, ON)

    assert (queries, status) == (rewritten, "applied")


def test_rewriter_receives_only_queries_and_context() -> None:
    fake = FakeRewriter(["Aditya's preferred explanation style", "the second deploy script"])

    rewrite_stage(fake, RAW, CONTEXT, ON)

    assert fake.calls == [(RAW, CONTEXT)]
    (args,) = fake.calls
    assert len(args) == 2  # no candidates, store or earlier results
    assert all(isinstance(q, str) for q in args[0])


def test_without_context_the_rewriter_runs_on_the_raw_queries_alone() -> None:
    fake = FakeRewriter(["Aditya's preferred explanation style", "the second deploy script"])

    queries, status = rewrite_stage(fake, RAW, None, ON)

    assert fake.calls == [(RAW, None)]
    assert status == "applied"


def test_context_is_truncated_to_max_context_chars() -> None:
    fake = FakeRewriter(["Aditya's preferred explanation style", "the second deploy script"])

    rewrite_stage(fake, RAW, "x" * 50, RewriteConfig(enabled=True, max_context_chars=10))

    assert fake.calls == [(RAW, "x" * 10)]


def test_rewriter_timeout_falls_back_to_raw_queries_and_failed(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeRewriter(["Aditya's preferred explanation style", "the second deploy script"], delay_s=1.0)

    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="retold.retrieve.rewrite"):
        queries, status = rewrite_stage(fake, RAW, CONTEXT, RewriteConfig(enabled=True, timeout_ms=50))
    elapsed = time.monotonic() - started

    assert (queries, status) == (RAW, "failed")
    assert elapsed < 0.5  # the caller is not held until the slow rewriter returns
    assert len([r for r in caplog.records if r.name == "retold.retrieve.rewrite"]) == 1


@pytest.mark.parametrize("error", [RewriteError("bad json"), TimeoutError("upstream"), RuntimeError("boom")])
def test_rewriter_error_falls_back_to_raw_queries_and_failed(
    error: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    fake = FakeRewriter(fail=error)

    with caplog.at_level(logging.WARNING, logger="retold.retrieve.rewrite"):
        queries, status = rewrite_stage(fake, RAW, CONTEXT, ON)

    assert (queries, status) == (RAW, "failed")
    assert len([r for r in caplog.records if r.name == "retold.retrieve.rewrite"]) == 1


@pytest.mark.parametrize("output", [["only one"], ["one", "two", "three"], ["one", "  "]])
def test_a_rewrite_with_the_wrong_number_of_queries_or_a_blank_one_fails(output: list[str]) -> None:
    queries, status = rewrite_stage(FakeRewriter(output), RAW, CONTEXT, ON)

    assert (queries, status) == (RAW, "failed")


def test_a_rewriter_reporting_failure_falls_back_to_raw_queries() -> None:
    class Failing:
        def rewrite(self, queries: list[str], context: str | None) -> RewriteResult:
            return RewriteResult(["Aditya's style", "deploy script two"], "failed")

    assert rewrite_stage(Failing(), RAW, CONTEXT, ON) == (RAW, "failed")


def test_an_identical_rewrite_is_unchanged() -> None:
    assert rewrite_stage(FakeRewriter(list(RAW)), RAW, CONTEXT, ON) == (RAW, "unchanged")
    assert rewrite_stage(NoRewriter(), RAW, CONTEXT, ON) == (RAW, "unchanged")


def test_the_rewriter_cannot_mutate_the_callers_queries() -> None:
    class Mutating:
        def rewrite(self, queries: list[str], context: str | None) -> RewriteResult:
            queries[0] = "tampered"
            return RewriteResult(list(queries), "applied")

    raw = list(RAW)
    rewrite_stage(Mutating(), raw, CONTEXT, ON)

    assert raw == RAW
