"""Duplicate collapse against a real VectorIndex."""

from __future__ import annotations

import numpy as np

from retold.index.vector import VectorIndex
from retold.models import Candidate
from retold.retrieve.dedup import collapse_duplicates

DIMS = 4


def index_with(vectors: dict[str, list[float]]) -> VectorIndex:
    index = VectorIndex("test-model", "1", DIMS)
    for record_id, vec in vectors.items():
        row = np.asarray(vec, dtype=np.float32)
        index.upsert(record_id, row / np.linalg.norm(row))
    return index


def candidates(*ids: str) -> list[Candidate]:
    return [Candidate(record_id, fused_rank=i) for i, record_id in enumerate(ids, start=1)]


def test_dedup_keeps_the_higher_ranked_record_and_logs_the_pair() -> None:
    # B is nearly A (cosine ~0.995); C is orthogonal to both.
    index = index_with({"A": [1, 0, 0, 0], "B": [1, 0.1, 0, 0], "C": [0, 0, 1, 0]})

    kept, dropped = collapse_duplicates(candidates("A", "B", "C"), index, 0.92)

    assert [c.record_id for c in kept] == ["A", "C"]
    expected = round(1 / float(np.sqrt(1.01)), 4)
    assert dropped == [("B", "A", expected)]


def test_dedup_below_threshold_keeps_both() -> None:
    index = index_with({"A": [1, 0, 0, 0], "B": [1, 1, 0, 0]})  # cosine ~0.707

    kept, dropped = collapse_duplicates(candidates("A", "B"), index, 0.92)

    assert [c.record_id for c in kept] == ["A", "B"]
    assert dropped == []


def test_dedup_compares_with_every_kept_record() -> None:
    index = index_with({"A": [1, 0, 0, 0], "C": [0, 0, 1, 0], "D": [0, 0, 1, 0.05]})

    kept, dropped = collapse_duplicates(candidates("A", "C", "D"), index, 0.92)

    assert [c.record_id for c in kept] == ["A", "C"]
    assert [(d, k) for d, k, _ in dropped] == [("D", "C")]


def test_a_record_without_a_vector_is_never_a_duplicate() -> None:
    index = index_with({"A": [1, 0, 0, 0]})

    kept, dropped = collapse_duplicates(candidates("A", "missing"), index, 0.0)

    assert [c.record_id for c in kept] == ["A", "missing"]
    assert dropped == []
