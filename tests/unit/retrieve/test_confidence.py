"""Confidence, the factor after fusion: an order among equally trusted records never moves,
and a question recalling what the agent said is not ordered by trust."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from retold.models import Candidate
from retold.retrieve.confidence import apply_confidence, weighs


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


@pytest.mark.parametrize("question", [
    "Can you remind me of the restaurant you recommended in Rome?",
    "You mentioned some resources for learning music theory; which website was it?",
    "I remember you told me to dilute tea tree oil. What ratio?",
    "What was the move you made after Kg2?",
    "Which list you've compiled for me was longest?",
])
def test_a_question_about_what_the_agent_said_or_did_is_not_weighed_by_trust(question: str) -> None:
    assert not weighs([question])


@pytest.mark.parametrize("question", [
    "Can you remind me where I parked?",
    "What did I tell you about my dog?",
    "Do you think my sneezing comes from the living room?",
    "What do you need from me for the visa?",
    "When is the standup?",
])
def test_requests_and_questions_about_the_user_keep_trust_in_the_order(question: str) -> None:
    assert weighs([question])


def test_one_query_recalling_the_agent_is_enough() -> None:
    assert not weighs(["when is the standup", "the standup time you mentioned"])
