"""Candidate review before apply: the reviewer protocol and its implementations (LLD 8.2).

All candidates of one session are reviewed in ONE call (``review_batch``), one decision
per candidate. ``StructuredLLMReviewer`` uses the versioned prompt ``prompts/review_v1.md``;
``TableReviewer`` serves tests.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from retold.models import CandidateRecord, ReviewContext, ReviewDecision

__all__ = ["CandidateReviewer", "TableReviewer"]


class CandidateReviewer(Protocol):
    """Accepts, rejects or narrows each candidate; one decision per input, in order."""

    name: str
    prompt_version: str

    def review_batch(
        self, items: list[tuple[CandidateRecord, ReviewContext]]
    ) -> list[ReviewDecision]: ...


@dataclass
class TableReviewer:
    """Decides by candidate content: ``table[content]`` or ``default`` (accept). A callable
    value receives the candidate and returns the decision. Records every batch."""

    table: dict[str, ReviewDecision | Callable[[CandidateRecord], ReviewDecision]] = field(
        default_factory=dict
    )
    name: str = "table"
    prompt_version: str = "table-1"
    batches: list[list[tuple[CandidateRecord, ReviewContext]]] = field(default_factory=list)

    def review_batch(
        self, items: list[tuple[CandidateRecord, ReviewContext]]
    ) -> list[ReviewDecision]:
        self.batches.append(list(items))
        decisions = []
        for candidate, _context in items:
            rule = self.table.get(candidate.content)
            if rule is None:
                decisions.append(ReviewDecision("accept", None, "accepted by default"))
            elif callable(rule):
                decisions.append(rule(candidate))
            else:
                decisions.append(rule)
        return decisions
