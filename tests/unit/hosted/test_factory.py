"""client_from_config: the provider, key, endpoint and retries the ``hosted:`` block names."""

from __future__ import annotations

import pytest

from retold.config import HostedConfig
from retold.hosted import (
    AnthropicClient,
    CompletionRequest,
    HostedError,
    Message,
    OpenAIClient,
    client_from_config,
)
from retold.testing.anthropic_stub import AnthropicStub, tool_use
from retold.testing.openai_stub import OpenAIStub, answer

CLAUDE = "claude-haiku-4-5-20251001"
SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"],
          "additionalProperties": False}
ASK = CompletionRequest("Answer briefly.", (Message("user", "Six times seven?"),), SCHEMA, "give_answer",
                        max_output_tokens=64, timeout_ms=10_000)


def test_no_api_key_means_no_client() -> None:
    assert client_from_config(CLAUDE, HostedConfig(), environ={}) is None
    assert client_from_config(CLAUDE, HostedConfig(), environ={"ANTHROPIC_API_KEY": "  "}) is None
    openai = HostedConfig(provider="openai", api_key_env="OPENAI_API_KEY")
    assert client_from_config("gpt-4o-mini", openai, environ={"ANTHROPIC_API_KEY": "sk-x"}) is None


def test_a_key_in_the_named_variable_builds_an_anthropic_client(anthropic_stub: AnthropicStub) -> None:
    hosted = HostedConfig(base_url=anthropic_stub.base_url, api_key_env="RETOLD_KEY", max_retries=0)

    client = client_from_config(CLAUDE, hosted, environ={"RETOLD_KEY": "sk-secret"})

    assert isinstance(client, AnthropicClient)
    assert (client.model, client.max_retries, client.base_url) == (CLAUDE, 0, anthropic_stub.base_url)
    assert "sk-secret" not in repr(client)
    assert client_from_config(CLAUDE, hosted, environ={"ANTHROPIC_API_KEY": "sk-other"}) is None
    anthropic_stub.script(tool_use({"answer": "42"}))
    assert client.complete(ASK) == {"answer": "42"}
    assert anthropic_stub.api_keys == ["sk-secret"]


@pytest.mark.parametrize("model", ["gpt-4o-mini", "meta-llama/Llama-3.1-8B-Instruct", "llama3.1:8b", CLAUDE])
def test_the_openai_provider_serves_any_model_name_its_server_knows(
    openai_stub: OpenAIStub, model: str
) -> None:
    hosted = HostedConfig(provider="openai", base_url=openai_stub.base_url, api_key_env="VLLM_KEY",
                          max_retries=1, structured_output="tools")

    client = client_from_config(model, hosted, environ={"VLLM_KEY": "sk-local"})

    assert isinstance(client, OpenAIClient)
    assert (client.model, client.max_retries, client.base_url) == (model, 1, openai_stub.base_url)
    assert client.structured_output == "tools"
    openai_stub.script(answer({"answer": "42"}))
    assert client.complete(ASK) == {"answer": "42"}
    assert openai_stub.api_keys == ["sk-local"] and openai_stub.requests[0]["model"] == model


def test_a_model_the_anthropic_provider_cannot_serve_is_not_configured() -> None:
    with pytest.raises(HostedError) as info:
        client_from_config("gpt-4o-mini", HostedConfig(), environ={"ANTHROPIC_API_KEY": "sk-x"})

    assert info.value.kind == "not_configured"
    assert "gpt-4o-mini" in str(info.value) and "hosted.provider: openai" in str(info.value)
