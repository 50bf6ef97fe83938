"""AnthropicClient: CompletionClient through the real Anthropic SDK against a loopback stub."""

from __future__ import annotations

import time
from typing import Any

import pytest

from retold.hosted import (
    AnthropicClient,
    CompletionClient,
    CompletionRequest,
    FakeCompletionClient,
    HostedError,
    Message,
)
from retold.testing.anthropic_stub import AnthropicStub, error, rate_limited, text_only, tool_use

MODEL = "claude-haiku-4-5-20251001"
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"answer": {"type": "string"}},
    "required": ["answer"],
    "additionalProperties": False,
}


# A generous timeout wherever none is under test, so a loaded machine never turns an
# answer into a retry.
SETTLED_MS = 10_000


def _request(timeout_ms: int = SETTLED_MS) -> CompletionRequest:
    return CompletionRequest(
        system="Answer briefly.",
        messages=(Message("user", "What is six times seven?"),),
        schema=SCHEMA,
        schema_name="give_answer",
        max_output_tokens=256,
        timeout_ms=timeout_ms,
    )


def _client(stub: AnthropicStub, max_retries: int = 2) -> AnthropicClient:
    return AnthropicClient(
        MODEL, "test-key", base_url=stub.base_url, max_retries=max_retries, retry_backoff_s=0.01
    )


def test_a_tool_use_answer_is_returned_and_the_request_forces_the_tool(anthropic_stub: AnthropicStub) -> None:
    anthropic_stub.script(tool_use({"answer": "42"}))

    assert _client(anthropic_stub).complete(_request()) == {"answer": "42"}

    (body,) = anthropic_stub.requests
    assert body["model"] == MODEL
    assert body["max_tokens"] == 256
    assert body["system"] == "Answer briefly."
    assert body["messages"] == [{"role": "user", "content": "What is six times seven?"}]
    assert body["tool_choice"] == {"type": "tool", "name": "give_answer"}
    (tool,) = body["tools"]
    assert tool["name"] == "give_answer"
    assert tool["input_schema"] == SCHEMA
    assert anthropic_stub.api_keys == ["test-key"]


def test_a_timeout_is_retried_then_reported_as_timeout(anthropic_stub: AnthropicStub) -> None:
    anthropic_stub.script(*[tool_use({"answer": "late"}, delay_s=2.0)] * 3)

    started = time.monotonic()
    with pytest.raises(HostedError) as info:
        _client(anthropic_stub, max_retries=2).complete(_request(timeout_ms=150))

    assert info.value.kind == "timeout"
    assert "after 3 attempts" in str(info.value)
    assert len(anthropic_stub.requests) == 3  # 1 + max_retries
    assert time.monotonic() - started < 1.5  # each attempt gave up at timeout_ms, not at 2 s


@pytest.mark.parametrize("transient", [error(500), rate_limited(), error(529, "Overloaded")])
def test_a_transient_failure_then_success_returns_the_answer(
    anthropic_stub: AnthropicStub, transient: Any
) -> None:
    anthropic_stub.script(transient, tool_use({"answer": "42"}))

    assert _client(anthropic_stub).complete(_request()) == {"answer": "42"}
    assert len(anthropic_stub.requests) == 2


def test_persistent_server_errors_give_up_after_max_retries(anthropic_stub: AnthropicStub) -> None:
    anthropic_stub.script(error(500), error(500), error(500))

    with pytest.raises(HostedError) as info:
        _client(anthropic_stub, max_retries=1).complete(_request())

    assert info.value.kind == "provider"
    assert "HTTP 500" in str(info.value)
    assert len(anthropic_stub.requests) == 2


def test_max_retries_zero_makes_one_attempt(anthropic_stub: AnthropicStub) -> None:
    anthropic_stub.script(error(500), tool_use({"answer": "42"}))

    with pytest.raises(HostedError):
        _client(anthropic_stub, max_retries=0).complete(_request())

    assert len(anthropic_stub.requests) == 1


def test_a_client_error_is_not_retried(anthropic_stub: AnthropicStub) -> None:
    anthropic_stub.script(error(400, "tools.0.name: bad"), tool_use({"answer": "42"}))

    with pytest.raises(HostedError) as info:
        _client(anthropic_stub).complete(_request())

    assert info.value.kind == "provider" and not info.value.retryable
    assert len(anthropic_stub.requests) == 1


def test_a_text_only_answer_is_malformed_and_not_retried(anthropic_stub: AnthropicStub) -> None:
    anthropic_stub.script(text_only(), tool_use({"answer": "42"}))

    with pytest.raises(HostedError) as info:
        _client(anthropic_stub).complete(_request())

    assert info.value.kind == "malformed"
    assert "text" in str(info.value)
    assert len(anthropic_stub.requests) == 1


@pytest.mark.parametrize(
    "tool_input",
    [{"answer": 42}, {"answer": "42", "extra": True}, {}, ["42"]],
    ids=["wrong-type", "extra-key", "missing-key", "not-an-object"],
)
def test_a_tool_input_that_breaks_the_schema_is_malformed(
    anthropic_stub: AnthropicStub, tool_input: object
) -> None:
    anthropic_stub.script(tool_use(tool_input), tool_use({"answer": "42"}))

    with pytest.raises(HostedError) as info:
        _client(anthropic_stub).complete(_request())

    assert info.value.kind == "malformed"
    assert len(anthropic_stub.requests) == 1


def test_an_answer_cut_at_max_tokens_is_malformed(anthropic_stub: AnthropicStub) -> None:
    anthropic_stub.script(tool_use({"answer": "4"}, stop_reason="max_tokens"))

    with pytest.raises(HostedError) as info:
        _client(anthropic_stub).complete(_request())

    assert info.value.kind == "malformed"
    assert "max_output_tokens" in str(info.value)


def test_a_provider_raising_builtin_timeouts_is_retried() -> None:
    class Flaky(CompletionClient):
        model = "flaky"
        retry_backoff_s = 0.0

        def __init__(self) -> None:
            self.calls = 0

        def _call(self, request: CompletionRequest) -> object:
            self.calls += 1
            if self.calls == 1:
                raise TimeoutError
            return {"answer": "42"}

    flaky = Flaky()
    assert flaky.complete(_request()) == {"answer": "42"}
    assert flaky.calls == 2


def test_the_fake_client_plays_its_script() -> None:
    fake = FakeCompletionClient([{"answer": "1"}, HostedError("timeout", "slow")])

    assert fake.complete(_request()) == {"answer": "1"}
    with pytest.raises(HostedError):
        fake.complete(_request())
    assert len(fake.calls) == 2
