"""A scripted CrewAI model, for running a crew with no key and no network. Needs the
``crewai`` extra.

It plays its script (:mod:`retold.testing.scripted`) in CrewAI's text protocol: for the
task being run (its description is the user message), each tool call of the exchange as
one ``Action``, then the reply as the ``Final Answer``; a task the script does not hold
gets the stand-in reply. The messages of every call are kept for assertions.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from crewai.llms.base_llm import BaseLLM

from retold.policy.prompt import RECALLED_HEADER
from retold.testing.scripted import Exchange, next_step

__all__ = ["ScriptedCrewLLM"]

_OBSERVATION = "\nObservation: "


class ScriptedCrewLLM(BaseLLM):
    """Plays ``script``; ``standing_in_for`` names the real model in the stand-in reply."""

    def __init__(self, script: Sequence[Exchange] = (), standing_in_for: str = "a chat model") -> None:
        super().__init__(model="scripted")
        self.script = list(script)
        self.standing_in_for = standing_in_for
        self.seen: list[list[dict[str, Any]]] = []
        self.results: dict[str, str] = {}  # tool-call id -> the result the model saw

    def call(self, messages: Any, tools: Any = None, callbacks: Any = None,
             available_functions: Any = None, from_task: Any = None, from_agent: Any = None,
             response_model: Any = None) -> str:
        self.seen.append([dict(m) for m in messages])
        user = str(getattr(from_task, "description", "") or "")
        exchange = next((e for e in self.script if e.user == user), None)
        steps = [m["content"] for m in messages if m["role"] == "assistant"]
        for call, text in zip(exchange.calls if exchange else (), steps, strict=False):
            self.results[call.id] = _observed(text)
        recalled = any(str(m.get("content", "")).startswith(RECALLED_HEADER) for m in messages)
        step = next_step(self.script, user, self.results, self.standing_in_for, recalled=recalled)
        if step.call is not None:
            return (f"Thought: I should use {step.call.name}.\nAction: {step.call.name}\n"
                    f"Action Input: {json.dumps(step.args)}")
        return f"Thought: I now know the final answer\nFinal Answer: {step.reply}"


def _observed(step: str) -> str:
    """The tool result in an executed step's text: the JSON value where there is one
    (CrewAI may add a reminder after it), else the whole observation."""
    text = step.split(_OBSERVATION, 1)[1]
    try:
        value, _ = json.JSONDecoder().raw_decode(text)
    except ValueError:
        return text
    return json.dumps(value)
