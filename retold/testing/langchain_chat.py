"""A scripted LangChain chat model, for running a LangChain or Deep Agents agent with no
key and no network. Needs ``langchain-core`` (installed with the ``deepagents`` extra).

It answers the newest user message from its script (:mod:`retold.testing.scripted`):
the exchange's tool calls one model step at a time, then its reply; a message the script
does not hold gets the stand-in reply. What it was given is kept for assertions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field

from retold.policy.prompt import RECALLED_HEADER
from retold.testing.scripted import Exchange, next_step

__all__ = ["ScriptedChatModel"]


class ScriptedChatModel(BaseChatModel):
    """Plays ``script``; ``standing_in_for`` names the real model in the stand-in reply."""

    script: list[Exchange] = Field(default_factory=list)
    standing_in_for: str = "a chat model"
    seen: list[list[BaseMessage]] = Field(default_factory=list)
    bound: list[list[str]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        self.bound.append([getattr(t, "name", None) or t.get("name", "") for t in tools])
        return self

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: Any = None, **kwargs: Any) -> ChatResult:
        self.seen.append(list(messages))
        users = [m for m in messages if isinstance(m, HumanMessage)]
        user = users[-1].text if users else ""
        results = {m.tool_call_id: str(m.text) for m in messages if isinstance(m, ToolMessage)}
        # Recalled memory for this message: a recalled block after the newest user message.
        last = max((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), default=-1)
        recalled = any(isinstance(m, ToolMessage) and str(m.text).startswith(RECALLED_HEADER)
                       for m in messages[last + 1:])
        step = next_step(self.script, user, results, self.standing_in_for, recalled=recalled)
        if step.call is None:
            reply = AIMessage(content=step.reply)
        else:
            reply = AIMessage(content="", tool_calls=[{
                "name": step.call.name, "args": step.args, "id": step.call.id, "type": "tool_call"}])
        return ChatResult(generations=[ChatGeneration(message=reply)])
