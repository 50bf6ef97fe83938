"""What session extraction withholds: model output that holds a credential.

Extraction persists each stage's output before the next runs, so the screen runs on the
model's answer before it is stored: a candidate whose content or evidence holds a
credential is dropped, a revision that adds one becomes a rejection, and a summary that
holds one is withheld (stored empty, so no summary record is written for the session).
Each withheld item becomes an ``extraction.secret_withheld`` event naming the item, the
field and the kind of credential, never its text. See docs/decisions.md, "Secrets are
refused on every write path".
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from retold.models import CandidateRecord, ExtractionOutput, ReviewDecision
from retold.policy.secrets import SecretFound, SecretKind, screen

__all__ = ["Withheld", "candidate_secret", "screen_decisions", "screen_output"]


@dataclass(frozen=True)
class Withheld:
    """One item the screen kept out of a stage's stored output."""

    stage: str  # extract | review
    item: str  # "candidate 2", "summary"
    kind: SecretKind
    field: str

    def payload(self, session_id: str) -> dict[str, Any]:
        return {"session_id": session_id, "stage": self.stage, "item": self.item, "kind": self.kind,
                "field": self.field}


def candidate_secret(candidate: CandidateRecord) -> SecretFound | None:
    """The credential in a candidate's content or evidence, if any."""
    return screen(content=candidate.content, evidence=candidate.evidence)


def screen_output(output: ExtractionOutput) -> tuple[ExtractionOutput, list[Withheld]]:
    """``output`` without the candidates and summary that hold a credential."""
    withheld: list[Withheld] = []
    kept: list[CandidateRecord] = []
    for index, candidate in enumerate(output.candidates):
        found = candidate_secret(candidate)
        if found is None:
            kept.append(candidate)
        else:
            withheld.append(Withheld("extract", f"candidate {index}", found.kind, found.field))
    summary = output.summary
    found = screen(content=summary.content, decisions="\n".join(summary.decisions))
    if found is not None:
        withheld.append(Withheld("extract", "summary", found.kind, found.field))
        summary = replace(summary, content="", decisions=[], entity_mentions=[])
    return ExtractionOutput(kept, summary), withheld


def screen_decisions(decisions: list[ReviewDecision],
                     indices: list[int]) -> tuple[list[ReviewDecision], list[Withheld]]:
    """The reviewer's decisions (for candidates ``indices``), a revision that holds a
    credential turned into a rejection that says so."""
    withheld: list[Withheld] = []
    out: list[ReviewDecision] = []
    for index, decision in zip(indices, decisions, strict=True):
        found = candidate_secret(decision.candidate) if decision.candidate is not None else None
        if found is None:
            out.append(decision)
            continue
        withheld.append(Withheld("review", f"candidate {index}", found.kind, found.field))
        out.append(ReviewDecision("reject", None, f"secret_detected: the revision's {found.field} "
                                                  f"holds {found.kind}"))
    return out, withheld
