"""Fusion: the dense, lexical and entity channels become one ranked list.

Cosines and BM25 scores live on different scales, and how far apart two records are within
one channel says something a rank does not: a record whose BM25 score is twice the next
one's holds the question's rare words, which a rank of 1 against a rank of 2 hides. So each
channel's scores are scaled within the search's own list, from the channel's score at
``retrieval.fusion.zero_rank`` (0) to its best (1), and added with the channel's weight.
The zero lies far below the records that become candidates: one the channel places
twentieth in a long history is still much closer than a typical record, and a zero at the
candidates' own end would count it as nothing (docs/decisions.md has what that trades). A
channel that matched fewer records than the zero's rank scales from no match (a cosine or
BM25 score of 0) instead: in a store of two records the second is not nothing just because
it is second. An entity match adds its weight whole, and so does a record the link hop
reached, up to the record it came from (:func:`add_links`). A record no channel found gets
nothing from it. Freshness and confidence then multiply the sum
(:mod:`retold.retrieve.freshness`, :mod:`retold.retrieve.confidence`). docs/decisions.md,
"How search decides", has the comparison with reciprocal rank fusion that chose this.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from retold.config import FusionConfig
from retold.models import Candidate, GeneratorHit, LexicalMatch

__all__ = ["LexicalHitLike", "Scale", "add_links", "floor_at", "fuse", "scaled"]

Scale = Callable[[Sequence[float], float | None], list[float]]
"""How one channel's scores become shares of its weight: the scores best first and the
channel's zero (:func:`floor_at`) in, one share per score out."""


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


def floor_at(scores: Sequence[float], rank: int) -> float | None:
    """The channel's zero: its score at ``rank`` (1-based) in a best-first list, higher
    better; None when the channel matched fewer records, so its scale starts from no match."""
    return float(scores[rank - 1]) if rank >= 1 and len(scores) >= rank else None


def scaled(scores: Sequence[float], floor: float | None) -> list[float]:
    """Each score as its place between ``floor`` (0) and the list's best (1); with no floor,
    between no match (a score of 0) and the best. A score below the floor counts 0, and a
    list whose scores are all equal scales to 1 throughout."""
    if not scores:
        return []
    high = max(scores)
    low = min(0.0, high) if floor is None else min(floor, high)
    if high - low <= 1e-12:
        return [1.0] * len(scores)
    return [max(0.0, (s - low) / (high - low)) for s in scores]


def fuse(
    dense: Sequence[tuple[str, float]],
    lexical: Sequence[LexicalHitLike],
    entity: Sequence[tuple[str, str]],
    weights: FusionConfig,
    floors: tuple[float | None, float | None] = (None, None),
    scale: Scale = scaled,
) -> list[Candidate]:
    """Candidates in fused order, best first, each carrying every channel's evidence.

    ``dense`` is ``(record_id, score)`` best first (the cosine, or its mix with the cosine
    beyond the question's names), ``lexical`` the lexical hits (BM25, lower is better, put
    in order of their ``rank``), ``entity`` ``(record_id, entity_id)``; ``floors`` the dense
    and lexical zeros (:func:`floor_at`, the lexical one of the negated BM25 scores). Each
    candidate gets a :class:`GeneratorHit` per channel that found it, its matched lexical
    terms and entity id, ``fused_score``, its 1-based ``fused_rank`` and ``score =
    fused_score`` (freshness adjusts it next). Equal sums keep the order in which the
    channels first listed the records: dense, then lexical, then entity. ``scale`` is
    :func:`scaled` in every search; the benchmarks pass others to compare.
    """
    # A record listed twice by one channel (linked to two matched entities, say) keeps its
    # first, best position: one channel is one opinion.
    dense_hits: dict[str, GeneratorHit] = {}
    for record_id, cosine in dense:
        dense_hits.setdefault(record_id, GeneratorHit(len(dense_hits) + 1, float(cosine)))
    lexical_hits: dict[str, tuple[GeneratorHit, LexicalMatch]] = {}
    for found in sorted(lexical, key=lambda h: h.rank):  # stable: equal ranks keep list order
        if found.record_id not in lexical_hits:
            lexical_hits[found.record_id] = (GeneratorHit(len(lexical_hits) + 1, float(found.bm25)),
                                             found.match)
    entity_hits: dict[str, tuple[GeneratorHit, str]] = {}
    for record_id, entity_id in entity:
        if record_id not in entity_hits:
            entity_hits[record_id] = (GeneratorHit(len(entity_hits) + 1, 0.0), entity_id)

    candidates: dict[str, Candidate] = {}

    def of(record_id: str) -> Candidate:
        found = candidates.get(record_id)
        if found is None:
            found = candidates[record_id] = Candidate(record_id)
        return found

    for (record_id, dense_hit), share in zip(dense_hits.items(),
                                             scale([h.score for h in dense_hits.values()], floors[0]),
                                             strict=True):
        c = of(record_id)
        c.dense, c.dense_part = dense_hit, weights.dense * share
        c.fused_score += c.dense_part
    # BM25 is lower-is-better on both backends: negated, so the best match scales to 1.
    for (record_id, (lexical_hit, match)), share in zip(
            lexical_hits.items(), scale([-h.score for h, _ in lexical_hits.values()], floors[1]),
            strict=True):
        c = of(record_id)
        c.lexical, c.lexical_terms = lexical_hit, match
        c.lexical_part = weights.lexical * share
        c.fused_score += c.lexical_part
    for record_id, (entity_hit, entity_id) in entity_hits.items():
        c = of(record_id)
        c.entity, c.entity_id, c.entity_part = entity_hit, entity_id, weights.entity
        c.fused_score += c.entity_part
    ordered = sorted(candidates.values(), key=lambda c: -c.fused_score)  # stable
    for rank, c in enumerate(ordered, start=1):
        c.fused_rank, c.score = rank, c.fused_score
    return ordered


def add_links(candidates: list[Candidate], linked: Sequence[tuple[str, str]],
              weight: float) -> list[Candidate]:
    """The fourth channel: each ``(record_id, via)`` the link hop found gains ``weight``
    (joining the list if no other channel had it), then the list is ranked again.

    The hop starts from the best records the other channels fused, so it runs after them.
    It lifts a record up to the record it was reached from, never past it: what is known
    only through another record is no stronger evidence than that record. A record that
    already stood higher on its own keeps its score.
    """
    if not linked:
        return candidates
    by_id = {c.record_id: c for c in candidates}
    source = {c.record_id: c.fused_score for c in candidates}  # before this hop adds anything
    for record_id, via in linked:
        c = by_id.get(record_id)
        if c is None:
            c = by_id[record_id] = Candidate(record_id)
            candidates.append(c)
        lifted = min(c.fused_score + weight, source.get(via, c.fused_score + weight))
        raised = max(c.fused_score, lifted)
        c.via, c.link_part, c.fused_score = via, c.link_part + raised - c.fused_score, raised
    ordered = sorted(candidates, key=lambda c: -c.fused_score)
    for rank, c in enumerate(ordered, start=1):
        c.fused_rank, c.score = rank, c.fused_score
    return ordered
