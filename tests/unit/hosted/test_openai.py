"""OpenAIClient: CompletionClient through the real openai SDK against a loopback Chat
Completions stub, with the retry, timeout and validation rules of every provider."""

from __future__ import annotations

import time
from typing import Any

import pytest

from retold.hosted import CompletionRequest, HostedError, Message, OpenAIClient
from retold.hosted.openai_api import OPENAI_BASE_URL
from retold.testing.openai_stub import (
    OpenAIStub,
    answer,
    error,
    model_refusal,
    reply,
    serve_openai_stub,
    tool_call,
)

MODEL = "gpt-4o-mini"
# Fits strict mode once minLength (a check strict mode refuses) is left out.
CLOSED: dict[str, Any] = {
    "type": "object",
    "properties": {"answer": {"type": "string", "minLength": 1}, "unit": {"type": ["string", "null"]}},
    "required": ["answer"],
    "additionalProperties": False,
}
# An open object: strict mode would have to close it, so it goes as a tool call.
OPEN: dict[str, Any] = {"type": "object", "properties": {"answer": {"type": "string"}},
                        "required": ["answer"]}


# A generous timeout wherever none is under test: on a loaded machine a 300 ms one expired
# and the retry took the scripted second answer.
SETTLED_MS = 10_000


def ask(schema: dict[str, Any] = CLOSED, timeout_ms: int = SETTLED_MS) -> CompletionRequest:
    return CompletionRequest(
        system="Answer briefly.",
        messages=(Message("user", "What is six times seven?"), Message("assistant", "Thinking."),
                  Message("user", "Well?")),
        schema=schema, schema_name="give_answer", max_output_tokens=256, timeout_ms=timeout_ms,
    )


def client(stub: OpenAIStub, max_retries: int = 2, **kwargs: Any) -> OpenAIClient:
    return OpenAIClient(MODEL, "test-key", base_url=stub.base_url, max_retries=max_retries,
                        retry_backoff_s=0.01, **kwargs)


def test_a_schema_that_fits_strict_mode_is_asked_for_as_strict_json(openai_stub: OpenAIStub) -> None:
    openai_stub.script(answer({"answer": "42", "unit": None}))

    assert client(openai_stub).complete(ask()) == {"answer": "42", "unit": None}

    (body,) = openai_stub.requests
    assert (body["model"], body["max_completion_tokens"]) == (MODEL, 256)
    assert body["messages"] == [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "What is six times seven?"},
        {"role": "assistant", "content": "Thinking."},
        {"role": "user", "content": "Well?"},
    ]
    assert "tools" not in body and "tool_choice" not in body
    spec = body["response_format"]["json_schema"]
    assert body["response_format"]["type"] == "json_schema"
    assert (spec["name"], spec["strict"]) == ("give_answer", True)
    # minLength is left out and the nullable optional "unit" becomes required.
    assert spec["schema"]["properties"]["answer"] == {"type": "string"}
    assert spec["schema"]["required"] == ["answer", "unit"]
    assert openai_stub.api_keys == ["test-key"]


def test_a_schema_outside_strict_mode_is_asked_for_as_a_forced_tool_call(openai_stub: OpenAIStub) -> None:
    openai_stub.script(answer({"answer": "42"}))

    assert client(openai_stub).complete(ask(OPEN)) == {"answer": "42"}

    (body,) = openai_stub.requests
    assert "response_format" not in body
    assert body["tool_choice"] == {"type": "function", "function": {"name": "give_answer"}}
    (tool,) = body["tools"]
    assert tool["function"]["name"] == "give_answer" and tool["function"]["parameters"] == OPEN
    assert "strict" not in tool["function"]


def test_structured_output_tools_never_asks_for_a_response_format(openai_stub: OpenAIStub) -> None:
    openai_stub.script(answer({"answer": "42"}))

    assert client(openai_stub, structured_output="tools").complete(ask()) == {"answer": "42"}

    (body,) = openai_stub.requests
    assert "response_format" not in body
    assert body["tools"][0]["function"]["parameters"] == CLOSED  # the schema as written


def test_a_timeout_is_retried_then_reported_as_timeout(openai_stub: OpenAIStub) -> None:
    openai_stub.script(*[answer({"answer": "late"}, delay_s=2.0)] * 3)

    started = time.monotonic()
    with pytest.raises(HostedError) as info:
        client(openai_stub).complete(ask(timeout_ms=150))

    assert info.value.kind == "timeout" and "after 3 attempts" in str(info.value)
    assert len(openai_stub.requests) == 3  # 1 + max_retries
    assert time.monotonic() - started < 1.5  # each attempt gave up at timeout_ms, not at 2 s


@pytest.mark.parametrize("transient", [error(500), error(503), error(429, "Rate limit reached")])
def test_a_transient_failure_then_success_returns_the_answer(openai_stub: OpenAIStub, transient: Any) -> None:
    openai_stub.script(transient, answer({"answer": "42"}))

    assert client(openai_stub).complete(ask()) == {"answer": "42"}
    assert len(openai_stub.requests) == 2


def test_persistent_server_errors_give_up_after_max_retries(openai_stub: OpenAIStub) -> None:
    openai_stub.script(error(500), error(500), error(500))

    with pytest.raises(HostedError) as info:
        client(openai_stub, max_retries=1).complete(ask())

    assert info.value.kind == "provider" and "HTTP 500" in str(info.value)
    assert openai_stub.base_url in str(info.value)  # which server failed: OpenAI, vLLM, ...
    assert len(openai_stub.requests) == 2


@pytest.mark.parametrize("permanent", [
    error(400, "Invalid parameter"), error(401, "Incorrect API key"),
    error(429, "You exceeded your current quota", code="insufficient_quota"),
], ids=["bad-request", "bad-key", "quota"])
def test_a_failure_that_asking_again_cannot_fix_is_not_retried(
    openai_stub: OpenAIStub, permanent: Any
) -> None:
    openai_stub.script(permanent, answer({"answer": "42"}))

    with pytest.raises(HostedError) as info:
        client(openai_stub).complete(ask())

    assert info.value.kind == "provider" and not info.value.retryable
    assert len(openai_stub.requests) == 1


def test_a_server_that_is_not_there_is_a_retried_provider_failure() -> None:
    with serve_openai_stub() as gone:
        url = gone.base_url
    started = time.monotonic()

    with pytest.raises(HostedError) as info:
        OpenAIClient(MODEL, "test-key", base_url=url, retry_backoff_s=0.01).complete(ask())

    assert info.value.kind == "provider" and info.value.retryable
    assert "cannot reach" in str(info.value) and "after 3 attempts" in str(info.value)
    assert time.monotonic() - started < 5


@pytest.mark.parametrize(("scripted", "schema", "says"), [
    (reply("42, obviously"), OPEN, "text, not a give_answer call"),
    (tool_call("other_tool", {"answer": "42"}), OPEN, "not a give_answer call"),
    (model_refusal("I can't help with that."), CLOSED, "refused to answer: I can't help"),
    (answer({"answer": "4"}, finish_reason="length"), CLOSED, "max_output_tokens=256"),
    (answer({"answer": "4"}, finish_reason="content_filter"), CLOSED, "content filter"),
    (reply("{not json"), CLOSED, "not JSON"),
    (reply(""), CLOSED, "answered nothing"),
], ids=["text", "other-tool", "refusal", "cut", "filtered", "not-json", "empty"])
def test_an_answer_without_the_object_is_malformed_and_not_retried(
    openai_stub: OpenAIStub, scripted: Any, schema: dict[str, Any], says: str
) -> None:
    openai_stub.script(scripted, answer({"answer": "42"}))

    with pytest.raises(HostedError) as info:
        client(openai_stub).complete(ask(schema))

    assert info.value.kind == "malformed" and says in str(info.value)
    assert len(openai_stub.requests) == 1


@pytest.mark.parametrize(("schema", "payload"), [
    (CLOSED, {"answer": ""}),  # minLength, which strict mode never saw, still holds
    (CLOSED, {"answer": 42, "unit": None}),
    (CLOSED, ["42"]),
    (OPEN, {"answer": 42}),
    (OPEN, {}),
], ids=["strict-empty", "strict-wrong-type", "strict-not-an-object", "tool-wrong-type", "tool-missing-key"])
def test_an_answer_that_breaks_the_schema_is_malformed(
    openai_stub: OpenAIStub, schema: dict[str, Any], payload: object
) -> None:
    openai_stub.script(answer(payload), answer({"answer": "42"}))

    with pytest.raises(HostedError) as info:
        client(openai_stub).complete(ask(schema))

    assert info.value.kind == "malformed"
    assert len(openai_stub.requests) == 1


def test_the_key_stays_out_of_the_repr_and_no_base_url_means_openai() -> None:
    plain = OpenAIClient(MODEL, "sk-secret")

    assert "sk-secret" not in repr(plain)
    assert plain.base_url == OPENAI_BASE_URL  # set explicitly, never read from OPENAI_BASE_URL
