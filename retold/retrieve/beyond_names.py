"""How close a record comes to the question once the question's names are taken out.

A record that shares a name with the question has a high cosine to it whatever the
question asks about that name: a sentence vector leans towards each of its words, and the
name is in both texts. "Who are Prism's customers?", which the store does not hold, meets
"Zane owns the Prism project" at 0.63, about where "Which band is Petra in?" meets "Petra
plays the bass guitar in a jazz trio" (0.68). Removing the names' own directions from both
vectors leaves what the question asks set against what the record says: the band record
keeps 0.48, the owner record 0.38, and the project's other records 0.23. The best such
remainder is one of the signals the gate decides on (:mod:`retold.retrieve.signals`;
docs/decisions.md, "How search decides").

The name vectors come from the same encoder as the query (its cache keeps repeated names
free); the record rows are the RAM index's. Nothing here reads the store.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

__all__ = ["IndexRows", "beyond_names"]


class IndexRows(Protocol):
    """What this needs from the vector index (``VectorIndex.rows``)."""

    def rows(self, record_ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Copies of these records' rows and which of them have a live vector."""
        ...


def _without(vectors: np.ndarray, basis: np.ndarray) -> np.ndarray:
    """``vectors`` (rows) with the span of ``basis`` (orthonormal rows) removed, re-normalised;
    a row left with (almost) nothing stays zeros."""
    rest = vectors - (vectors @ basis.T) @ basis
    norms = np.linalg.norm(rest, axis=1, keepdims=True)
    unit: np.ndarray = np.divide(rest, norms, out=np.zeros_like(rest), where=norms > 1e-6)
    return unit


def beyond_names(
    index: IndexRows, record_ids: Sequence[str], query_vectors: np.ndarray, name_vectors: np.ndarray
) -> dict[str, float]:
    """Each record's best cosine over the queries with every name vector's direction
    removed from both sides; records without a live vector are left out."""
    if not record_ids or len(name_vectors) == 0:
        return {}
    names = np.asarray(name_vectors, dtype=np.float64).reshape(len(name_vectors), -1)
    # An orthonormal basis of the names' span (a repeated name adds nothing to it).
    u, s, _ = np.linalg.svd(names.T, full_matrices=False)
    basis = u[:, s > 1e-6 * s[0]].T
    queries = np.asarray(query_vectors, dtype=np.float64).reshape(-1, names.shape[1])
    rows, present = index.rows(record_ids)
    scores = _without(rows.astype(np.float64), basis) @ _without(queries, basis).T
    best = scores.max(axis=1)
    return {rid: round(float(best[i]), 6) for i, rid in enumerate(record_ids) if present[i]}
