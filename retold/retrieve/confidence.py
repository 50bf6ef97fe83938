"""Confidence: the second factor after fusion, a record's score times how sure the store is
of it.

Every record carries a confidence set by where it came from and raised by reinforcement
(:mod:`retold.policy.lifecycle` holds the table: what the user said starts highest, at 0.95,
an agent's own inference lowest, at 0.60). Without it in the order, an assistant's long
restatement of a topic outranks the user's one sentence about it, though the store trusts
the sentence more. Multiplying keeps every order among records the store is equally sure of
(one factor for all changes neither the order nor the tail cut, which reads shares of the
top score), and puts a less trusted record below a more trusted one only when their scores
are closer than the ratio of their confidences.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from retold.models import Candidate

__all__ = ["Trusted", "apply_confidence"]


class Trusted(Protocol):
    """What this factor reads of a record: a full Record or the store's RecordMeta."""

    @property
    def confidence(self) -> float: ...


def apply_confidence(candidates: list[Candidate], records: Mapping[str, Trusted]) -> None:
    """Multiply each candidate's ``score`` by its record's confidence, then re-sort
    ``candidates`` in place (stable: equal scores keep their order). A candidate whose
    record is missing from ``records`` keeps its score."""
    for candidate in candidates:
        record = records.get(candidate.record_id)
        if record is not None:
            candidate.score *= record.confidence
    candidates.sort(key=lambda c: -c.score)
