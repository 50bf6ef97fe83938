"""The script a scripted chat model plays, in no framework's shape.

A script is a list of :class:`Exchange`: what the user says, the tool calls the model
makes in answer (one model step each, in order) and the reply that closes the exchange.
The framework wrappers (:mod:`retold.testing.langchain_chat` for LangChain and Deep
Agents, :mod:`retold.testing.crewai_llm` for CrewAI) find the exchange for the newest
user message and play its next step. A user message the script does not hold gets the
stand-in reply, which says that no model was called: that is what the framework examples
print when ``RETOLD_SCRIPTED_MODEL`` is set (docs/integrations.md).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Exchange", "FromResult", "Step", "ToolCall", "next_step", "resolve", "stand_in_reply"]


@dataclass(frozen=True)
class FromResult:
    """An argument the model copies from an earlier call's result: the value at ``key``
    of the JSON result of the call whose id is ``call``."""

    call: str
    key: str


@dataclass(frozen=True)
class ToolCall:
    """One tool call the scripted model makes. ``id`` doubles as the framework's
    tool-call id, so a later call can find this call's result by it."""

    id: str
    name: str
    args: Mapping[str, Any]


@dataclass(frozen=True)
class Exchange:
    """One user message, the tool calls it prompts (one model step each) and the reply."""

    user: str
    calls: tuple[ToolCall, ...] = field(default=())
    reply: str = ""
    # The reply when recalled memory is in the model's input (a regeneration); empty: the
    # same reply either way.
    with_memory: str = ""


@dataclass(frozen=True)
class Step:
    """What the model does next: call ``call`` with ``args``, or (``call`` None) reply."""

    call: ToolCall | None
    args: dict[str, Any]
    reply: str


def resolve(args: Mapping[str, Any], results: Mapping[str, str]) -> dict[str, Any]:
    """``args`` with each :class:`FromResult` replaced from ``results`` (tool-call id to
    the result text the model saw)."""
    out: dict[str, Any] = {}
    for key, value in args.items():
        if isinstance(value, FromResult):
            value = json.loads(results[value.call])[value.key]
        out[key] = value
    return out


def stand_in_reply(standing_in_for: str, user: str) -> str:
    """The reply to a message no exchange holds: it names the model that was not called,
    so output read later cannot be mistaken for a real model's answer."""
    return (f"[scripted stand-in for {standing_in_for}; no model was called] "
            f"A real model would answer this message: {user}")


def next_step(script: Sequence[Exchange], user: str, results: Mapping[str, str],
              standing_in_for: str, *, recalled: bool = False) -> Step:
    """The next step for the newest user message ``user``, given the results of the tool
    calls already made for it (tool-call id to result text) and whether recalled memory
    is in view."""
    exchange = next((e for e in script if e.user == user), None)
    if exchange is None:
        return Step(None, {}, stand_in_reply(standing_in_for, user))
    done = sum(1 for call in exchange.calls if call.id in results)
    if done < len(exchange.calls):
        call = exchange.calls[done]
        return Step(call, resolve(call.args, results), "")
    return Step(None, {}, exchange.with_memory if recalled and exchange.with_memory else exchange.reply)
