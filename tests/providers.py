"""What the tests of hosted-model prompts share: a real provider SDK pointed at its loopback
stub (the ``provider`` fixture, offered to every test through conftest), and a structured
answer in whichever provider's shape that stub plays."""

from __future__ import annotations

from typing import Any

import pytest

from retold.hosted import AnthropicClient, CompletionClient, OpenAIClient
from retold.testing import anthropic_stub as claude
from retold.testing import openai_stub as oai
from retold.testing.anthropic_stub import AnthropicStub
from retold.testing.openai_stub import OpenAIStub

__all__ = ["provider", "stub_answer"]
@pytest.fixture(params=["anthropic", "openai"])
def provider(request: pytest.FixtureRequest) -> tuple[CompletionClient, AnthropicStub | OpenAIStub]:
    """A real provider SDK pointed at its loopback stub, whose ``requests`` are the bodies sent."""
    if request.param == "anthropic":
        stub: AnthropicStub | OpenAIStub = request.getfixturevalue("anthropic_stub")
        return AnthropicClient("claude-haiku-4-5-20251001", "test-key", base_url=stub.base_url), stub
    stub = request.getfixturevalue("openai_stub")
    return OpenAIClient("gpt-4o-mini", "test-key", base_url=stub.base_url), stub


def stub_answer(stub: AnthropicStub | OpenAIStub, obj: dict[str, Any]) -> Any:
    """``obj`` as the structured answer of whichever provider ``stub`` plays."""
    return claude.tool_use(obj) if isinstance(stub, AnthropicStub) else oai.answer(obj)
