"""Answer accuracy through the real provider SDKs (``anthropic`` and ``openai``) against
the scripted loopback APIs: each question answered and graded in two structured calls
under the fixed prompts, the models named, the tokens the providers reported counted per
model and priced, and a key the provider refuses failing every item without a grade."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from retold.hosted import AnthropicClient, CompletionClient, OpenAIClient
from retold.quality.answering import (
    ANSWER_SCHEMA,
    JUDGE_SCHEMA,
    AnswerItem,
    TokenPrice,
    grade_answers,
    load_prompt,
)
from retold.testing import anthropic_stub as claude
from retold.testing import openai_stub as oai
from retold.testing.anthropic_stub import AnthropicStub
from retold.testing.openai_stub import OpenAIStub

ITEMS = [
    AnswerItem("Which editor does Aditya use?", ("Aditya uses Helix as his editor.",), "Helix", "editor"),
    AnswerItem("How does Aditya take his coffee?", ("Aditya drinks oat milk flat whites.",),
               "An oat milk flat white", "coffee"),
    AnswerItem("What is Aditya's passport number?", (), None, "passport"),
]
# The stubs report 42 input and 17 output tokens for every answer.
PER_CALL = (42, 17)


@dataclass
class Provider:
    name: str
    model: str
    stub: AnthropicStub | OpenAIStub

    def client(self, model: str | None = None) -> CompletionClient:
        cls = AnthropicClient if isinstance(self.stub, AnthropicStub) else OpenAIClient
        return cls(model or self.model, "test-key", base_url=self.stub.base_url, retry_backoff_s=0.01)

    def ok(self, obj: Any) -> Any:
        return claude.tool_use(obj) if isinstance(self.stub, AnthropicStub) else oai.answer(obj)

    def refused(self) -> Any:
        return claude.error(401, "invalid x-api-key") if isinstance(self.stub, AnthropicStub) else \
            oai.error(401, "Incorrect API key provided")

    def system_of(self, body: dict[str, Any]) -> str:
        if isinstance(self.stub, AnthropicStub):
            return str(body["system"])
        return str(body["messages"][0]["content"])


@pytest.fixture(params=["anthropic", "openai"])
def provider(request: pytest.FixtureRequest) -> Provider:
    if request.param == "anthropic":
        return Provider("anthropic", "claude-haiku-4-5-20251001", request.getfixturevalue("anthropic_stub"))
    return Provider("openai", "gpt-4o-mini", request.getfixturevalue("openai_stub"))


def test_answers_are_graded_through_the_provider_with_tokens_and_cost(provider: Provider) -> None:
    provider.stub.script(
        provider.ok({"answer": "Aditya uses Helix.", "known": True}),
        provider.ok({"verdict": "correct", "reason": "Helix is the expected editor."}),
        provider.ok({"answer": "Black coffee.", "known": True}),
        provider.ok({"verdict": "incorrect", "reason": "The expected answer is an oat milk flat white."}),
        provider.ok({"answer": "I don't know", "known": False}),
    )
    judge_model = "claude-sonnet-4-5" if provider.name == "anthropic" else "gpt-4o"
    prices = {provider.model: TokenPrice(1.0, 5.0), judge_model: TokenPrice(3.0, 15.0)}

    report = grade_answers(ITEMS, provider.client(), provider.client(judge_model), prices=prices)

    assert (report.status, report.graded, report.correct, report.accuracy) == ("graded", 3, 2, 0.6667)
    assert (report.answer_model, report.judge_model) == (provider.model, judge_model)
    assert [r.verdict for r in report.results] == ["correct", "incorrect", "correct"]
    inputs, outputs = PER_CALL
    assert (report.answer_tokens.calls, report.answer_tokens.input_tokens,
            report.answer_tokens.output_tokens) == (3, 3 * inputs, 3 * outputs)
    assert (report.judge_tokens.calls, report.judge_tokens.input_tokens) == (2, 2 * inputs)
    assert report.cost_usd == round((3 * inputs * 1.0 + 3 * outputs * 5.0 + 2 * inputs * 3.0
                                     + 2 * outputs * 15.0) / 1e6, 6)
    bodies = provider.stub.requests
    assert [b["model"] for b in bodies] == [provider.model, judge_model] * 2 + [provider.model]
    assert provider.system_of(bodies[0]) == load_prompt("answer_v1")
    assert provider.system_of(bodies[1]) == load_prompt("judge_v1")


def test_anthropic_answers_and_grades_through_one_forced_tool_each(anthropic_stub: AnthropicStub) -> None:
    anthropic_stub.script(claude.tool_use({"answer": "Helix.", "known": True}),
                          claude.tool_use({"verdict": "correct", "reason": "Same editor."}))
    client = AnthropicClient("claude-haiku-4-5-20251001", "test-key", base_url=anthropic_stub.base_url)

    grade_answers(ITEMS[:1], client)

    answer_body, judge_body = anthropic_stub.requests
    assert answer_body["tool_choice"] == {"type": "tool", "name": "memory_answer"}
    assert answer_body["tools"][0]["input_schema"] == ANSWER_SCHEMA
    assert judge_body["tool_choice"] == {"type": "tool", "name": "answer_grade"}
    assert judge_body["tools"][0]["input_schema"] == JUDGE_SCHEMA


def test_openai_holds_both_answers_to_a_strict_schema(openai_stub: OpenAIStub) -> None:
    openai_stub.script(oai.answer({"answer": "Helix.", "known": True}),
                       oai.answer({"verdict": "correct", "reason": "Same editor."}))
    client = OpenAIClient("gpt-4o-mini", "test-key", base_url=openai_stub.base_url)

    grade_answers(ITEMS[:1], client)

    for body, name in zip(openai_stub.requests, ("memory_answer", "answer_grade"), strict=True):
        assert body["response_format"]["json_schema"]["name"] == name
        assert body["response_format"]["json_schema"]["strict"] is True


def test_a_refused_key_fails_every_item_and_grades_none(provider: Provider) -> None:
    provider.stub.script(*(provider.refused() for _ in ITEMS))

    report = grade_answers(ITEMS, provider.client(), prices={provider.model: TokenPrice(1.0, 5.0)})

    assert (report.status, report.graded, report.failed, report.accuracy) == ("graded", 0, 3, None)
    assert all(r.error is not None and "401" in r.error for r in report.results)
    assert report.answer_tokens.calls == 0 and report.cost_usd == 0.0  # no answer, nothing to pay
    assert len(provider.stub.requests) == 3  # a 401 is not retried
