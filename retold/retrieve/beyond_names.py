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

The same lift misranks: asked about the wrong person ("What did Oskar paint?" when Priya
painted), the dense channel lists every record about Oskar above Priya's painting. So for a
question that names something the store knows, the dense channel scores each record by a
mix of its plain cosine and this remainder (``retrieval.fusion.beyond_names``, the share of
the remainder): the name still counts, through the plain half and the lexical and entity
channels, but no longer decides the dense order alone.

The name vectors come from the same encoder as the query (its cache keeps repeated names
free); the record rows are the RAM index's. Nothing here reads the store.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Protocol

import numpy as np

__all__ = ["IndexRows", "Searchable", "beyond_names", "dense_beyond_names"]


class IndexRows(Protocol):
    """What this needs from the vector index (``VectorIndex.rows``)."""

    def rows(self, record_ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Copies of these records' rows and which of them have a live vector."""
        ...


class Searchable(Protocol):
    """What the dense channel needs from the vector index (``VectorIndex.search``)."""

    def search(self, qvec: np.ndarray, eligible_ids: Collection[str], k: int,
               score: Callable[[np.ndarray], np.ndarray] | None = None) -> list[tuple[str, float]]:
        """Top ``k`` eligible records by ``score`` of their products with ``qvec``."""
        ...


def _basis(name_vectors: np.ndarray) -> np.ndarray:
    """An orthonormal basis (rows) of the names' span; a repeated name adds nothing to it."""
    names = np.asarray(name_vectors, dtype=np.float64).reshape(len(name_vectors), -1)
    u, s, _ = np.linalg.svd(names.T, full_matrices=False)
    basis: np.ndarray = u[:, s > 1e-6 * s[0]].T
    return basis


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
    basis = _basis(name_vectors)
    queries = np.asarray(query_vectors, dtype=np.float64).reshape(-1, basis.shape[1])
    rows, present = index.rows(record_ids)
    scores = _without(rows.astype(np.float64), basis) @ _without(queries, basis).T
    best = scores.max(axis=1)
    return {rid: round(float(best[i]), 6) for i, rid in enumerate(record_ids) if present[i]}


def dense_beyond_names(index: Searchable, query_vectors: np.ndarray, name_vectors: np.ndarray,
                       eligible: Collection[str], k: int, share: float) -> list[tuple[str, float]]:
    """The dense channel for a question naming something: the ``k`` eligible records best by
    ``(1 - share) * cosine + share * cosine beyond the names`` (each the best over the
    queries), best first.

    One product with the index: the queries, the queries without the names, and the names'
    basis. A stored row is a unit vector, so its length beyond the names is
    ``sqrt(1 - sum of its products with the basis squared)``; a record that says little
    beyond the name has nothing left and scores its plain share only."""
    basis = _basis(name_vectors)
    queries = np.asarray(query_vectors, dtype=np.float64).reshape(-1, basis.shape[1])
    rest = queries - (queries @ basis.T) @ basis
    lengths = np.linalg.norm(rest, axis=1)
    n = len(queries)
    inverse = np.divide(1.0, lengths, out=np.zeros_like(lengths), where=lengths > 1e-6).astype(np.float32)

    def score(products: np.ndarray) -> np.ndarray:
        along = products[:, 2 * n:]
        left = np.sqrt(np.clip(1.0 - np.einsum("ij,ij->i", along, along), 0.0, None))
        along_rest = (products[:, n:2 * n] * inverse).max(axis=1)
        beyond = np.where(left > 1e-3, along_rest / np.maximum(left, 1e-3), 0.0)
        mixed: np.ndarray = (1.0 - share) * products[:, :n].max(axis=1) + share * beyond
        return mixed

    matrix = np.vstack([queries, rest, basis]).astype(np.float32)
    return index.search(matrix, eligible, k, score=score)
