"""HostedLLMQueryRewriter through the real Anthropic SDK and a loopback stub."""

from __future__ import annotations

import json

import pytest

from retold.config import RetrievalConfig, RewriteConfig
from retold.hosted import AnthropicClient, FakeCompletionClient
from retold.retrieve.rewrite import (
    REWRITE_PROMPT_VERSION,
    REWRITE_SCHEMA,
    HostedLLMQueryRewriter,
    NoRewriter,
    RewriteError,
    load_rewrite_prompt,
    rewrite_stage,
    rewriter_from_config,
)
from retold.testing.anthropic_stub import AnthropicStub, error, tool_use

MODEL = "claude-haiku-4-5-20251001"
# Generous wherever no timeout is under test, so a loaded machine never turns an answer
# into a timeout.
ON = RewriteConfig(enabled=True, timeout_ms=10_000, max_output_tokens=128)
RAW = ["what does he prefer?", "the second one"]
CONTEXT = "user: How should you explain things to Aditya?\nassistant: Briefly. Two deploy scripts exist."


def _rewriter(stub: AnthropicStub, cfg: RewriteConfig = ON) -> HostedLLMQueryRewriter:
    client = AnthropicClient(MODEL, "test-key", base_url=stub.base_url, max_retries=0)
    client.prepare()  # the SDK import must not eat the stage budget
    return HostedLLMQueryRewriter(client, cfg)


def test_an_applied_rewrite_replaces_the_queries(anthropic_stub: AnthropicStub) -> None:
    rewritten = ["Aditya's preferred explanation style", "the second deploy script"]
    anthropic_stub.script(tool_use({"queries": rewritten}))

    queries, status = rewrite_stage(_rewriter(anthropic_stub), RAW, CONTEXT, ON)

    assert (queries, status) == (rewritten, "applied")
    (body,) = anthropic_stub.requests
    assert body["model"] == MODEL
    assert body["max_tokens"] == 128
    assert body["system"] == load_rewrite_prompt()
    assert body["tools"][0]["input_schema"] == REWRITE_SCHEMA
    assert body["tool_choice"] == {"type": "tool", "name": body["tools"][0]["name"]}
    # The model sees the raw queries and the context, nothing else.
    (message,) = body["messages"]
    assert message["role"] == "user"
    assert json.loads(message["content"]) == {"queries": RAW, "context": CONTEXT}


def test_the_context_sent_is_capped_at_max_context_chars(anthropic_stub: AnthropicStub) -> None:
    cfg = RewriteConfig(enabled=True, timeout_ms=10_000, max_context_chars=20)
    anthropic_stub.script(tool_use({"queries": RAW}))

    result = _rewriter(anthropic_stub, cfg).rewrite(RAW, CONTEXT)

    assert result.status == "unchanged"
    sent = json.loads(anthropic_stub.requests[0]["messages"][0]["content"])
    assert sent["context"] == CONTEXT[:20]


def test_a_wrong_query_count_fails_and_the_raw_queries_proceed(anthropic_stub: AnthropicStub) -> None:
    anthropic_stub.script(tool_use({"queries": ["Aditya's preferred explanation style"]}))

    assert rewrite_stage(_rewriter(anthropic_stub), RAW, CONTEXT, ON) == (RAW, "failed")


def test_an_invented_name_is_refused(anthropic_stub: AnthropicStub) -> None:
    # "Priya" is in neither the queries nor the context: the rewrite must not carry it.
    invented = ["the explanation style Priya prefers", "the second deploy script"]
    anthropic_stub.script(tool_use({"queries": invented}), tool_use({"queries": invented}))
    rewriter = _rewriter(anthropic_stub)

    with pytest.raises(RewriteError, match="Priya"):
        rewriter.rewrite(RAW, CONTEXT)
    assert rewrite_stage(rewriter, RAW, CONTEXT, ON) == (RAW, "failed")


def test_a_name_from_the_context_is_accepted(anthropic_stub: AnthropicStub) -> None:
    # Not the first word and capitalised, but present in the context.
    rewritten = ["explanation style preferred by Aditya", "the second deploy script"]
    anthropic_stub.script(tool_use({"queries": rewritten}))

    assert rewrite_stage(_rewriter(anthropic_stub), RAW, CONTEXT, ON) == (rewritten, "applied")


def test_a_capitalised_first_word_is_not_a_name(anthropic_stub: AnthropicStub) -> None:
    rewritten = ["Explanation style Aditya prefers", "Second deploy script"]
    anthropic_stub.script(tool_use({"queries": rewritten}))

    assert rewrite_stage(_rewriter(anthropic_stub), RAW, CONTEXT, ON) == (rewritten, "applied")


def test_without_context_only_names_in_the_queries_are_allowed(anthropic_stub: AnthropicStub) -> None:
    raw = ["what does Aditya prefer?", "the second one"]
    anthropic_stub.script(
        tool_use({"queries": ["what Aditya prefers", "the second one"]}),
        tool_use({"queries": ["what Aditya prefers", "the second Kubernetes cluster"]}),
    )
    rewriter = _rewriter(anthropic_stub)

    assert rewrite_stage(rewriter, raw, None, ON) == (["what Aditya prefers", "the second one"], "applied")
    assert rewrite_stage(rewriter, raw, None, ON) == (raw, "failed")


def test_a_timeout_fails_and_the_raw_queries_proceed(anthropic_stub: AnthropicStub) -> None:
    cfg = RewriteConfig(enabled=True, timeout_ms=150)
    anthropic_stub.script(tool_use({"queries": RAW}, delay_s=2.0))

    assert rewrite_stage(_rewriter(anthropic_stub, cfg), RAW, CONTEXT, cfg) == (RAW, "failed")


def test_a_provider_error_becomes_a_rewrite_error(anthropic_stub: AnthropicStub) -> None:
    anthropic_stub.script(error(500))

    with pytest.raises(RewriteError, match="provider"):
        _rewriter(anthropic_stub).rewrite(RAW, CONTEXT)


def test_a_schema_violating_answer_fails(anthropic_stub: AnthropicStub) -> None:
    anthropic_stub.script(tool_use({"queries": ["ok", ""]}))

    assert rewrite_stage(_rewriter(anthropic_stub), RAW, CONTEXT, ON) == (RAW, "failed")


def test_the_prompt_is_versioned_package_data() -> None:
    assert REWRITE_PROMPT_VERSION == "rewrite_v1"
    assert HostedLLMQueryRewriter.prompt_version == REWRITE_PROMPT_VERSION
    assert "same order" in load_rewrite_prompt()


# --- rewriter_from_config -----------------------------------------------------------------


def test_rewriter_from_config_needs_both_enabled_and_a_client() -> None:
    client = FakeCompletionClient([])
    enabled = RetrievalConfig(rewrite=ON)

    assert isinstance(rewriter_from_config(RetrievalConfig(), client), NoRewriter)
    assert isinstance(rewriter_from_config(enabled, None), NoRewriter)
    chosen = rewriter_from_config(enabled, client)
    assert isinstance(chosen, HostedLLMQueryRewriter)
    assert chosen.client is client and chosen.cfg == ON
    assert client.calls == []  # choosing a rewriter makes no hosted call
