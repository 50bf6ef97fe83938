"""The gap planner: what the answer to a user turn needs that the turn does not say.

Relevance is not need. A record about the user's coffee habit is relevant to every coffee
question, but only some answers should change because of it, and no similarity floor
tells the two apart. So before anything is searched, one structured call asks what
information the reply is missing (a preference the user stated before, a fact about a
person or project the turn names without explaining), and each gap becomes one search.
A turn the model can answer from what it sees has no gap, and nothing is searched.

The planner sees the turn, the recent context and the session's profile block (which
already ends with a content-free inventory of what memory holds per category), never
the stored records themselves.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from retold.hosted.client import HostedError
from retold.utility.decision import Gap
from retold.utility.prompting import HostedPrompt

__all__ = ["PLANNER_PROMPT_VERSION", "GapPlanner", "HostedGapPlanner", "PlannerInput", "ScriptedPlanner"]

PLANNER_PROMPT_VERSION = "gaps-1"

_SCHEMA: dict[str, object] = {
    "type": "object",
    "properties": {
        "gaps": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "need": {"type": "string", "minLength": 1},
                    "query": {"type": "string", "minLength": 1},
                    "category": {"type": "string"},
                },
                "required": ["need", "query", "category"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["gaps"],
    "additionalProperties": False,
}


@dataclass(frozen=True)
class PlannerInput:
    """What the planner is shown for one turn."""

    turn: str
    context: str  # the recent conversation before the turn
    profile: str  # the session's profile block, inventory included
    max_gaps: int


class GapPlanner(Protocol):
    """Names a turn's information gaps; raises HostedError when it cannot (the caller
    serves the draft)."""

    @property
    def version(self) -> str:
        """The model and prompt this planner answers with, for the bundle hash."""
        ...

    def plan(self, asked: PlannerInput, timeout_ms: int) -> list[Gap]:
        ...


class HostedGapPlanner(HostedPrompt):
    """The planner as one structured call to a hosted model."""

    prompt_version = PLANNER_PROMPT_VERSION

    def plan(self, asked: PlannerInput, timeout_ms: int) -> list[Gap]:
        shown = [f"Latest user message:\n{asked.turn}"]
        if asked.context.strip():
            shown.insert(0, f"Recent conversation:\n{asked.context}")
        if asked.profile.strip():
            shown.insert(0, f"What the assistant already knows about the user:\n{asked.profile}")
        answer = self._ask("\n\n".join(shown), _SCHEMA, "information_gaps", timeout_ms,
                           max_gaps=asked.max_gaps)
        gaps = [Gap(g["need"].strip(), g["query"].strip(), g["category"].strip()) for g in answer["gaps"]]
        if any(not g.query for g in gaps):
            raise HostedError("malformed", f"{self.model}: a gap without a search query")
        return gaps[: asked.max_gaps]


@dataclass
class ScriptedPlanner:
    """Gaps by turn, for tests and the scripted benchmarks: a turn that contains a key
    (any case) gets that key's gaps, or raises it when the value is an exception; any
    other turn has none. ``delay_s`` stands in for the model's latency."""

    gaps: Mapping[str, Sequence[Gap] | Exception] = field(default_factory=dict)
    delay_s: float = 0.0
    version: str = "scripted-planner/1"
    calls: list[PlannerInput] = field(default_factory=list)

    def plan(self, asked: PlannerInput, timeout_ms: int) -> list[Gap]:
        self.calls.append(asked)
        if self.delay_s:
            time.sleep(self.delay_s)
        for key, value in self.gaps.items():
            if key.lower() in asked.turn.lower():
                if isinstance(value, Exception):
                    raise value
                return list(value)[: asked.max_gaps]
        return []
