"""Reciprocal rank fusion of the three candidate generators.

Cosine, BM25 and entity matches live on different scales, so fusion looks only at ranks:
each list a record appears in adds ``1 / (k + rank)``. :func:`rrf` is the bare formula;
:func:`fuse` turns the generators' outputs into :class:`~retold.models.Candidate` values
that carry every generator's evidence forward to the gate, the explanation and the log.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Protocol

from retold.models import Candidate, GeneratorHit, LexicalMatch

__all__ = ["LexicalHitLike", "fuse", "rrf"]


class LexicalHitLike(Protocol):
    """The shape of one lexical-search hit that fusion reads.

    Read-only properties, so frozen dataclasses satisfy it.
    """

    @property
    def record_id(self) -> str: ...

    @property
    def rank(self) -> int: ...

    @property
    def bm25(self) -> float: ...

    @property
    def match(self) -> LexicalMatch: ...


def rrf(rankings: Sequence[Sequence[str]], k: int) -> dict[str, float]:
    """Fuse ranked id lists into ``{record_id: score}``, best first.

    A record at 1-based ``rank`` in a list gains ``1 / (k + rank)``. Ties keep the order
    in which ids were first seen; an empty list adds nothing.
    """
    score: defaultdict[str, float] = defaultdict(float)
    for ranking in rankings:
        for rank, record_id in enumerate(ranking, start=1):
            score[record_id] += 1.0 / (k + rank)
    # sorted() is stable and the dict keeps first-seen order, so ties stay first-seen.
    return dict(sorted(score.items(), key=lambda item: -item[1]))


def fuse(
    dense: Sequence[tuple[str, float]],
    lexical: Sequence[LexicalHitLike],
    entity: Sequence[tuple[str, str]],
    k: int,
) -> list[Candidate]:
    """Build fused candidates from the dense, lexical and entity generators.

    ``dense`` is ``(record_id, cosine)`` best first, ``lexical`` the lexical hits (put in
    order of their ``rank``), ``entity`` ``(record_id, entity_id)`` best first. Each
    candidate carries a :class:`GeneratorHit` per generator that found it, its matched
    lexical terms and entity id, ``rrf_score``, its dense share ``dense_vote``, 1-based
    ``fused_rank`` and ``score = rrf_score`` (freshness adjusts it next).
    """
    # A record listed twice by one generator (e.g. linked to two matched entities) keeps
    # its first, best position: one generator is one vote in RRF.
    dense_hits: dict[str, GeneratorHit] = {}
    for record_id, cosine in dense:
        dense_hits.setdefault(record_id, GeneratorHit(len(dense_hits) + 1, float(cosine)))

    lexical_hits: dict[str, tuple[GeneratorHit, LexicalMatch]] = {}
    for hit in sorted(lexical, key=lambda h: h.rank):  # stable: equal ranks keep list order
        if hit.record_id not in lexical_hits:
            lexical_hits[hit.record_id] = (GeneratorHit(len(lexical_hits) + 1, float(hit.bm25)), hit.match)

    entity_hits: dict[str, tuple[GeneratorHit, str]] = {}
    for record_id, entity_id in entity:
        if record_id not in entity_hits:
            entity_hits[record_id] = (GeneratorHit(len(entity_hits) + 1, 0.0), entity_id)

    # Fused in this order (dense, lexical, entity): ties keep first-seen order, so this
    # order breaks them.
    fused = rrf([list(dense_hits), list(lexical_hits), list(entity_hits)], k)

    candidates: list[Candidate] = []
    for fused_rank, (record_id, rrf_score) in enumerate(fused.items(), start=1):
        candidate = Candidate(record_id, rrf_score=rrf_score, fused_rank=fused_rank, score=rrf_score)
        candidate.dense = dense_hits.get(record_id)
        if candidate.dense is not None:
            candidate.dense_vote = 1.0 / (k + candidate.dense.rank)
        if record_id in lexical_hits:
            candidate.lexical, candidate.lexical_terms = lexical_hits[record_id]
        if record_id in entity_hits:
            candidate.entity, candidate.entity_id = entity_hits[record_id]
        candidates.append(candidate)
    return candidates
