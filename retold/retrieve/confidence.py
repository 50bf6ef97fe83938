"""Confidence: the second factor after fusion, a record's score times how sure the store is
of it, except where the question recalls what the agent itself said.

Every record carries a confidence set by where it came from and raised by reinforcement
(:mod:`retold.policy.lifecycle` holds the table: what the user said starts highest, at 0.95,
an agent's own inference lowest, at 0.60). Without it in the order, an assistant's long
restatement of a topic outranks the user's one sentence about it, though the store trusts
the sentence more. Multiplying keeps every order among records the store is equally sure of
(one factor for all changes neither the order nor the tail cut, which reads shares of the
top score), and puts a less trusted record below a more trusted one only when their scores
are closer than the ratio of their confidences.

Trust ranks claims by how likely they are to be true. A question that speaks of what the
agent did or said before ("the hotel you recommended", "you told me to...") asks for the
agent's own words, whose truth is not in question, so :func:`weighs` leaves such a search
ordered by its channels alone. The cue is grammatical, the second person followed by a
verb in the past, and says nothing of any topic.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Protocol

from retold.models import Candidate

__all__ = ["Trusted", "apply_confidence", "weighs"]

# "you" (or "you've", "you have", "you had") and then a past form: a regular one of at least
# five letters, which leaves out "need" and "used", or a common irregular one.
_RECALLS_AGENT = re.compile(
    r"\byou(?:['’]ve|\s+have|\s+had)?\s+(?:[a-z]{3,}ed|said|told|gave|made|wrote|sent|taught|chose"
    r"|found|thought)\b", re.IGNORECASE)


class Trusted(Protocol):
    """What this factor reads of a record: a full Record or the store's RecordMeta."""

    @property
    def confidence(self) -> float: ...


def weighs(queries: Sequence[str]) -> bool:
    """Whether confidence orders a search of ``queries``: not when one of them recalls what
    the agent itself said or did (module docstring)."""
    return not any(_RECALLS_AGENT.search(query) for query in queries)


def apply_confidence(candidates: list[Candidate], records: Mapping[str, Trusted]) -> None:
    """Multiply each candidate's ``score`` by its record's confidence, then re-sort
    ``candidates`` in place (stable: equal scores keep their order). A candidate whose
    record is missing from ``records`` keeps its score."""
    for candidate in candidates:
        record = records.get(candidate.record_id)
        if record is not None:
            candidate.score *= record.confidence
    candidates.sort(key=lambda c: -c.score)
