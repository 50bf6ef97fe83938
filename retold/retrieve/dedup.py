"""Duplicate collapse: drop a candidate nearly identical to one already kept."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from retold.models import Candidate

__all__ = ["PairwiseCosine", "collapse_duplicates"]


class PairwiseCosine(Protocol):
    """What duplicate collapse needs from the vector index (``VectorIndex.cosine_matrix``)."""

    def cosine_matrix(self, record_ids: Sequence[str]) -> np.ndarray:
        """Pairwise cosines of these records; nan where one has no vector."""
        ...


def collapse_duplicates(
    candidates: Sequence[Candidate], index: PairwiseCosine, threshold: float
) -> tuple[list[Candidate], list[tuple[str, str, float]]]:
    """Keep candidates in order, dropping any whose cosine to a kept one is ``>= threshold``.

    Returns the kept candidates and one ``(dropped_id, kept_id, cosine)`` entry per drop,
    cosine rounded to 4 places, naming the highest-ranked kept record that matched.
    The candidates' rows are read once under the index lock as one small Gram matrix,
    never the whole index matrix. A pair without vectors (nan) is never a duplicate.
    """
    if not candidates:
        return [], []
    gram = index.cosine_matrix([c.record_id for c in candidates])
    kept: list[int] = []
    dropped: list[tuple[str, str, float]] = []
    for i, candidate in enumerate(candidates):
        hits = [j for j in kept if gram[i, j] >= threshold]  # nan compares False
        if hits:
            dropped.append((candidate.record_id, candidates[hits[0]].record_id,
                            round(float(gram[i, hits[0]]), 4)))
        else:
            kept.append(i)
    return [candidates[i] for i in kept], dropped
