"""Confidence, the factor after fusion: an order among equally trusted records never moves."""

from __future__ import annotations

from dataclasses import dataclass

from retold.models import Candidate
from retold.retrieve.confidence import apply_confidence


@dataclass(frozen=True)
class Sure:
    confidence: float


def _candidates(*scores: float) -> list[Candidate]:
    return [Candidate(f"r{i}", score=s) for i, s in enumerate(scores)]


def test_records_trusted_alike_keep_their_order_and_their_shares_of_the_top() -> None:
    candidates = _candidates(1.0, 0.5, 0.2)
    apply_confidence(candidates, {c.record_id: Sure(0.9) for c in candidates})
    assert [c.record_id for c in candidates] == ["r0", "r1", "r2"]
    # The tail cut reads shares of the top score: one factor for all leaves them as they were.
    assert [round(c.score / candidates[0].score, 6) for c in candidates] == [1.0, 0.5, 0.2]


def test_a_less_trusted_record_drops_below_one_closer_than_the_ratio_and_no_further() -> None:
    candidates = _candidates(1.0, 0.9, 0.5)  # r0 an agent's inference, r1 and r2 user statements
    trust = {"r0": Sure(0.60), "r1": Sure(0.95), "r2": Sure(0.95)}
    apply_confidence(candidates, trust)
    assert [c.record_id for c in candidates] == ["r1", "r0", "r2"]


def test_a_record_without_a_confidence_keeps_its_score() -> None:
    candidates = _candidates(0.4, 0.3)
    apply_confidence(candidates, {"r1": Sure(0.5)})
    assert [(c.record_id, c.score) for c in candidates] == [("r0", 0.4), ("r1", 0.15)]
