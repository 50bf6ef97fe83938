"""Answer accuracy: whether a model answers each labelled question right from the memory
retrieved for it.

For every item a hosted model answers the question from the retrieved memory texts alone,
under the fixed prompt :data:`ANSWER_PROMPT_VERSION` (``prompts/answer_v1.md``: answer only
from the memories, else say you don't know), and a judge grades the answer against the
expected one under :data:`JUDGE_PROMPT_VERSION` (``prompts/judge_v1.md``: correct or
incorrect). An item whose expected answer is "nothing stored answers this"
(``expected=None``) is correct when the model says it does not know, and costs no judge
call. Both calls go through the hosted provider layer (:mod:`retold.hosted`: Anthropic or
any OpenAI-compatible server), whose answers report their tokens
(:mod:`retold.hosted.spend`); the report names both models and counts their tokens apart,
and prices them when the caller gives a price per model. Without a configured provider
the report says it was skipped, and why, in one line.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from typing import Any, Literal

from retold.hosted.client import CompletionClient, CompletionRequest, HostedError, Message
from retold.hosted.spend import Spend, counting

__all__ = [
    "ANSWER_PROMPT_VERSION", "ANSWER_SCHEMA", "JUDGE_PROMPT_VERSION", "JUDGE_SCHEMA", "NOT_CONFIGURED",
    "AnswerItem", "AnswerReport", "GradedAnswer", "TokenPrice", "TokenUse", "grade_answers", "load_prompt",
]

ANSWER_PROMPT_VERSION = "answer_v1"
JUDGE_PROMPT_VERSION = "judge_v1"
# The answers each prompt asks for. Both fit OpenAI's strict mode (every field required,
# nothing else allowed), so an OpenAI-compatible server is held to them as well.
ANSWER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"answer": {"type": "string"}, "known": {"type": "boolean"}},
    "required": ["answer", "known"],
    "additionalProperties": False,
}
JUDGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"verdict": {"type": "string", "enum": ["correct", "incorrect"]},
                   "reason": {"type": "string"}},
    "required": ["verdict", "reason"],
    "additionalProperties": False,
}
NOT_CONFIGURED = ("no hosted model is configured: set the API key variable hosted.api_key_env names"
                  " (an Anthropic key, or hosted.provider: openai with its base_url)")
_ANSWER_TOOL, _JUDGE_TOOL = "memory_answer", "answer_grade"
_ANSWER_TOKENS, _JUDGE_TOKENS = 512, 256  # a short answer, a verdict and one sentence
_TIMEOUT_MS = 30_000  # an offline evaluation, not a search: a slow answer is still an answer

Verdict = Literal["correct", "incorrect"]


@cache
def load_prompt(version: str) -> str:
    """The system prompt of ``version`` (``answer_v1``, ``judge_v1``), from the package data."""
    return files("retold.quality").joinpath("prompts").joinpath(f"{version}.md").read_text(encoding="utf-8")


@dataclass(frozen=True)
class AnswerItem:
    """One labelled question: the memory texts retrieved for it, best first, and the
    expected answer (None: nothing stored answers it, so the right answer is "I don't know")."""

    question: str
    memories: tuple[str, ...]
    expected: str | None
    item_id: str = ""


@dataclass(frozen=True)
class GradedAnswer:
    """What the model answered for one item and how it was graded; ``verdict`` is None and
    ``error`` says why when a hosted call failed for this item."""

    item_id: str
    question: str
    expected: str | None
    answer: str | None
    known: bool | None  # the model said it knew the answer
    verdict: Verdict | None
    reason: str
    error: str | None = None


@dataclass(frozen=True)
class TokenUse:
    """Hosted calls answered and their tokens."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0

    def plus(self, spend: Spend) -> TokenUse:
        return TokenUse(self.calls + spend.calls, self.input_tokens + spend.input_tokens,
                        self.output_tokens + spend.output_tokens)


@dataclass(frozen=True)
class TokenPrice:
    """What one model costs, in US dollars per million tokens."""

    input_per_million: float
    output_per_million: float

    def cost(self, use: TokenUse) -> float:
        return (use.input_tokens * self.input_per_million + use.output_tokens * self.output_per_million) / 1e6


@dataclass(frozen=True)
class AnswerReport:
    """Answer accuracy over a set of items: ``accuracy`` is the share of graded items
    judged correct (None when none was graded); items whose hosted call failed are counted
    in ``failed`` and left out of it. ``status`` is ``skipped`` (with a one-line
    ``reason``) when no provider could be used."""

    status: Literal["graded", "skipped"]
    reason: str | None
    answer_model: str | None
    judge_model: str | None
    answer_prompt: str
    judge_prompt: str
    items: int
    graded: int
    correct: int
    failed: int
    accuracy: float | None
    answer_tokens: TokenUse
    judge_tokens: TokenUse
    cost_usd: float | None  # None unless a price was given for every model that was called
    results: tuple[GradedAnswer, ...]

    @property
    def input_tokens(self) -> int:
        return self.answer_tokens.input_tokens + self.judge_tokens.input_tokens

    @property
    def output_tokens(self) -> int:
        return self.answer_tokens.output_tokens + self.judge_tokens.output_tokens

    def summary(self) -> str:
        """The report in one line, as a person reads it."""
        if self.status == "skipped":
            return f"answer accuracy: skipped ({self.reason})"
        accuracy = "-" if self.accuracy is None else f"{100 * self.accuracy:.1f}%"
        failed = f", {self.failed} failed" if self.failed else ""
        cost = "" if self.cost_usd is None else f", ${self.cost_usd:.4f}"
        return (f"answer accuracy: {accuracy} ({self.correct}/{self.graded} correct{failed}); answered by"
                f" {self.answer_model} ({ANSWER_PROMPT_VERSION}), judged by {self.judge_model}"
                f" ({JUDGE_PROMPT_VERSION}); {self.input_tokens} tokens in, {self.output_tokens} out{cost}")


class _Skip(Exception):
    """No answer can come from this provider at all (not configured, SDK missing)."""


def grade_answers(items: Sequence[AnswerItem], llm_client: CompletionClient | None,
                  judge_client: CompletionClient | None = None, *,
                  prices: Mapping[str, TokenPrice] | None = None) -> AnswerReport:
    """Answer each item's question from its memories with ``llm_client`` and grade the
    answer with ``judge_client`` (default: the same client); ``prices`` maps a model name
    to its :class:`TokenPrice`. Without a client the report is skipped, naming why."""
    judge = judge_client or llm_client
    if llm_client is None or judge is None:
        return _skipped(NOT_CONFIGURED, len(items), llm_client, judge)
    results: list[GradedAnswer] = []
    answer_use, judge_use = TokenUse(), TokenUse()
    try:
        for item in items:
            graded, answer_spend, judge_spend = _grade(item, llm_client, judge)
            answer_use, judge_use = answer_use.plus(answer_spend), judge_use.plus(judge_spend)
            results.append(graded)
    except _Skip as skip:
        return _skipped(str(skip), len(items), llm_client, judge)
    done = [r for r in results if r.verdict is not None]
    correct = sum(1 for r in done if r.verdict == "correct")
    return AnswerReport(
        "graded", None, llm_client.model, judge.model, ANSWER_PROMPT_VERSION, JUDGE_PROMPT_VERSION,
        len(items), len(done), correct, len(results) - len(done),
        round(correct / len(done), 4) if done else None, answer_use, judge_use,
        _cost(prices, ((llm_client.model, answer_use), (judge.model, judge_use))), tuple(results))


def _grade(item: AnswerItem, client: CompletionClient,
           judge: CompletionClient) -> tuple[GradedAnswer, Spend, Spend]:
    """One item: its answer, then its grade; a failed hosted call fails only this item."""
    with counting() as answer_spend:
        try:
            said = _ask(client, ANSWER_PROMPT_VERSION, ANSWER_SCHEMA, _ANSWER_TOOL, _ANSWER_TOKENS,
                        {"question": item.question, "memories": list(item.memories)})
        except HostedError as exc:
            return _failed(item, None, None, exc), answer_spend, Spend()
    answer, known = str(said["answer"]).strip(), bool(said["known"])
    if item.expected is None:  # nothing stored answers it: knowing better is the error
        verdict: Verdict = "incorrect" if known else "correct"
        why = "answered although nothing stored answers this" if known else "said it does not know"
        graded = GradedAnswer(item.item_id, item.question, None, answer, known, verdict, why)
        return graded, answer_spend, Spend()
    with counting() as judge_spend:
        try:
            grade = _ask(judge, JUDGE_PROMPT_VERSION, JUDGE_SCHEMA, _JUDGE_TOOL, _JUDGE_TOKENS,
                         {"question": item.question, "expected": item.expected, "candidate": answer})
        except HostedError as exc:
            return _failed(item, answer, known, exc), answer_spend, judge_spend
    return (GradedAnswer(item.item_id, item.question, item.expected, answer, known, grade["verdict"],
                         str(grade["reason"]).strip()), answer_spend, judge_spend)


def _ask(client: CompletionClient, version: str, schema: dict[str, Any], tool: str, max_tokens: int,
         shown: dict[str, Any]) -> dict[str, Any]:
    """One structured call under the prompt ``version``; JSON keeps the question, the
    memories and the answers apart whatever they contain. A provider that cannot be used
    at all stops the whole grading."""
    try:
        return client.complete(CompletionRequest(
            system=load_prompt(version), messages=(Message("user", json.dumps(shown, ensure_ascii=False)),),
            schema=schema, schema_name=tool, max_output_tokens=max_tokens, timeout_ms=_TIMEOUT_MS))
    except HostedError as exc:
        if exc.kind == "not_configured":
            raise _Skip(" ".join(str(exc).split())) from exc
        raise


def _failed(item: AnswerItem, answer: str | None, known: bool | None, exc: HostedError) -> GradedAnswer:
    return GradedAnswer(item.item_id, item.question, item.expected, answer, known, None, "",
                        f"{exc.kind}: {' '.join(str(exc).split())}")


def _skipped(reason: str, items: int, client: CompletionClient | None,
             judge: CompletionClient | None) -> AnswerReport:
    return AnswerReport("skipped", reason, client.model if client else None, judge.model if judge else None,
                        ANSWER_PROMPT_VERSION, JUDGE_PROMPT_VERSION, items, 0, 0, 0, None, TokenUse(),
                        TokenUse(), None, ())


def _cost(prices: Mapping[str, TokenPrice] | None, uses: Sequence[tuple[str, TokenUse]]) -> float | None:
    """The dollars the calls cost, or None when a model that was called has no price."""
    called = [(model, use) for model, use in uses if use.calls]
    if prices is None or any(model not in prices for model, _ in called):
        return None
    return round(sum(prices[model].cost(use) for model, use in called), 6)
