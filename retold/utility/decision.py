"""What one host-issued memory decision is made of: the gaps a turn leaves, the verdict on
each candidate, and the :class:`TurnDecision` the store keeps for every decided turn.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["DISPOSITIONS", "Disposition", "Effect", "Gap", "Stage", "TurnDecision", "Verdict"]

# How a turn ended, in the order the decision can stop:
#   skipped        the turn was too short to plan for (retrieval.trigger.host_min_query_chars)
#   no_gap         the planner found nothing the answer needs that the turn does not say
#   no_candidates  the gaps' searches found nothing
#   none_admitted  the judge kept no candidate: the draft needs none of them
#   shadow         records were admitted, but the configuration has no recorded pass: the
#                  draft was served and the decision kept for evaluation
#   regenerated    records were admitted and the reply was made again with them
#   failed         a stage failed or time ran out (``failed_stage`` says which); the draft was served
Disposition = Literal[
    "skipped", "no_gap", "no_candidates", "none_admitted", "shadow", "regenerated", "failed"]
DISPOSITIONS: tuple[Disposition, ...] = (
    "skipped", "no_gap", "no_candidates", "none_admitted", "shadow", "regenerated", "failed")
Stage = Literal["planner", "search", "admission", "regeneration"]
Effect = Literal["fills", "contradicts", "not_needed"]


@dataclass(frozen=True)
class Gap:
    """Something the answer needs that the turn does not say: the search that may fill it
    and the memory category it concerns."""

    need: str
    query: str
    category: str = ""

    def as_dict(self) -> dict[str, str]:
        return {"need": self.need, "query": self.query, "category": self.category}


@dataclass(frozen=True)
class Verdict:
    """The judge's word on one candidate, given the draft: it ``fills`` a gap the draft
    leaves open, ``contradicts`` the draft, or is ``not_needed``."""

    record_id: str
    effect: Effect
    reason: str = ""

    @property
    def admitted(self) -> bool:
        return self.effect != "not_needed"

    def as_dict(self) -> dict[str, str]:
        return {"record_id": self.record_id, "effect": self.effect, "reason": self.reason}


@dataclass
class TurnDecision:
    """One user turn's memory decision, as the store keeps it (searches by their log id,
    candidates and admitted records by id, times per stage in milliseconds)."""

    id: str
    at: str
    agent_id: str
    user_id: str
    session_id: str
    turn: int  # the user turn's position among the session's recorded messages
    bundle: str
    disposition: Disposition = "skipped"
    failed_stage: Stage | None = None
    error: str | None = None
    gaps: list[Gap] = field(default_factory=list)
    searches: list[str] = field(default_factory=list)
    candidates: list[str] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    timings_ms: dict[str, float] = field(default_factory=dict)
    hosted_calls: int = 0
    hosted_tokens: int = 0

    @property
    def admitted(self) -> list[str]:
        return [v.record_id for v in self.verdicts if v.admitted]

    def as_row(self) -> dict[str, Any]:
        """The stored form: plain values and JSON-ready lists."""
        return {
            "id": self.id, "at": self.at, "agent_id": self.agent_id, "user_id": self.user_id,
            "session_id": self.session_id, "turn": self.turn, "bundle": self.bundle,
            "disposition": self.disposition, "failed_stage": self.failed_stage, "error": self.error,
            "gaps": [g.as_dict() for g in self.gaps], "searches": self.searches,
            "candidates": self.candidates, "verdicts": [v.as_dict() for v in self.verdicts],
            "timings_ms": self.timings_ms, "hosted_calls": self.hosted_calls,
            "hosted_tokens": self.hosted_tokens,
        }
