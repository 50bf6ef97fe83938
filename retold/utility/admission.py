"""Draft-relative admission: which recalled records should change the reply.

The model first answers without recalled memory (the draft). The judge then sees the
draft, the gaps and the candidates, and keeps a candidate only when it fills a gap the
draft leaves open or contradicts something the draft says. A record that agrees with the
draft, or that is on topic but changes nothing, is not admitted: showing it would only
spend context and invite the model to mention it. This is the judgement a relevance floor
cannot make, because it depends on the answer, not on the question.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from retold.hosted.client import HostedError
from retold.utility.decision import Effect, Gap, Verdict
from retold.utility.prompting import HostedPrompt

__all__ = ["ADMISSION_PROMPT_VERSION", "AdmissionInput", "AdmissionJudge", "HostedAdmissionJudge",
           "ScriptedJudge", "Shown"]

ADMISSION_PROMPT_VERSION = "admit-1"

_SCHEMA: dict[str, object] = {
    "type": "object",
    "properties": {
        "verdicts": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "effect": {"enum": ["fills", "contradicts", "not_needed"]},
                    "reason": {"type": "string"},
                },
                "required": ["id", "effect", "reason"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["verdicts"],
    "additionalProperties": False,
}


@dataclass(frozen=True)
class Shown:
    """One candidate as the judge sees it: its id and text."""

    record_id: str
    content: str


@dataclass(frozen=True)
class AdmissionInput:
    turn: str
    draft: str
    gaps: Sequence[Gap]
    candidates: Sequence[Shown]


class AdmissionJudge(Protocol):
    """Says, per candidate, whether it should change the draft; raises HostedError when
    it cannot (the caller serves the draft)."""

    @property
    def version(self) -> str:
        """The model and prompt this judge answers with, for the bundle hash."""
        ...

    def judge(self, asked: AdmissionInput, timeout_ms: int) -> list[Verdict]:
        ...


class HostedAdmissionJudge(HostedPrompt):
    """The judge as one structured call to a hosted model."""

    prompt_version = ADMISSION_PROMPT_VERSION

    def judge(self, asked: AdmissionInput, timeout_ms: int) -> list[Verdict]:
        gaps = "\n".join(f"- {g.need}" for g in asked.gaps)
        memories = "\n".join(f"[{c.record_id}] {c.content}" for c in asked.candidates)
        shown = (f"User message:\n{asked.turn}\n\nDraft reply:\n{asked.draft}\n\n"
                 f"Gaps the reply may need filled:\n{gaps}\n\nStored memories:\n{memories}")
        answer = self._ask(shown, _SCHEMA, "memory_admission", timeout_ms)
        return verdicts_for(answer["verdicts"], asked.candidates, self.model)


def verdicts_for(raw: Sequence[dict[str, str]], candidates: Sequence[Shown], model: str) -> list[Verdict]:
    """The judge's verdicts in candidate order. An id the candidates do not hold is a
    malformed answer (admitting it would show the model a record nobody searched for); a
    candidate the judge left out is not admitted."""
    known = {c.record_id for c in candidates}
    given: dict[str, Verdict] = {}
    for item in raw:
        if item["id"] not in known:
            raise HostedError("malformed", f"{model}: a verdict for {item['id']!r}, not a candidate")
        given.setdefault(item["id"], Verdict(item["id"], item["effect"], item["reason"].strip()))  # type: ignore[arg-type]
    return [given.get(c.record_id, Verdict(c.record_id, "not_needed", "no verdict given"))
            for c in candidates]


@dataclass
class ScriptedJudge:
    """Verdicts by content, for tests and the scripted benchmarks: a candidate whose text
    contains a key (any case) gets that key's effect, any other is not needed; ``error``
    is raised instead when set. ``delay_s`` stands in for the model's latency."""

    effects: Mapping[str, Effect] = field(default_factory=dict)
    error: Exception | None = None
    delay_s: float = 0.0
    version: str = "scripted-judge/1"
    calls: list[AdmissionInput] = field(default_factory=list)

    def judge(self, asked: AdmissionInput, timeout_ms: int) -> list[Verdict]:
        self.calls.append(asked)
        if self.delay_s:
            time.sleep(self.delay_s)
        if self.error is not None:
            raise self.error
        out = []
        for shown in asked.candidates:
            effect: Effect = next(
                (e for key, e in self.effects.items() if key.lower() in shown.content.lower()), "not_needed")
            out.append(Verdict(shown.record_id, effect, f"scripted: {effect}"))
        return out
