"""Duplicate collapse: drop a candidate nearly identical to one already kept (LLD 10.6)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

from retold.models import Candidate

__all__ = ["PairwiseCosine", "collapse_duplicates"]


class PairwiseCosine(Protocol):
    """What duplicate collapse needs from the vector index (``VectorIndex.cosine``)."""

    def cosine(self, first_id: str, second_id: str) -> float:
        """Cosine of two indexed records; nan when either has no vector."""
        ...


def collapse_duplicates(
    candidates: Sequence[Candidate], index: PairwiseCosine, threshold: float
) -> tuple[list[Candidate], list[tuple[str, str, float]]]:
    """Keep candidates in order, dropping any whose cosine to a kept one is ``>= threshold``.

    Returns the kept candidates and one ``(dropped_id, kept_id, cosine)`` entry per drop,
    cosine rounded to 4 places, naming the highest-ranked kept record that matched.
    Pairs are read one at a time through the index (under its lock) rather than copying
    the matrix (LLD 10.6). A pair without vectors (nan) is never a duplicate.
    """
    kept: list[Candidate] = []
    dropped: list[tuple[str, str, float]] = []
    for candidate in candidates:
        duplicate_of: tuple[str, float] | None = None
        for earlier in kept:
            cosine = index.cosine(candidate.record_id, earlier.record_id)
            if not math.isnan(cosine) and cosine >= threshold:
                duplicate_of = (earlier.record_id, cosine)
                break
        if duplicate_of is None:
            kept.append(candidate)
        else:
            dropped.append((candidate.record_id, duplicate_of[0], round(duplicate_of[1], 4)))
    return kept, dropped
