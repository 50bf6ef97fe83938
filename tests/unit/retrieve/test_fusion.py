"""Reciprocal rank fusion and candidate building."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from retold.models import GeneratorHit, LexicalMatch, LexicalTerm
from retold.retrieve.fusion import fuse, rrf


@dataclass(frozen=True)
class Hit:
    """Same shape as the lexical generator's hit."""

    record_id: str
    rank: int
    bm25: float
    match: LexicalMatch


def match(*terms: str, total: int = 3) -> LexicalMatch:
    return LexicalMatch(tuple(LexicalTerm(t, False, False) for t in terms), total)


def test_rrf_component_guide_example() -> None:
    scores = rrf([["A", "B", "C"], ["C", "A", "D"]], k=60)

    assert list(scores) == ["A", "C", "B", "D"]
    assert [round(s, 5) for s in scores.values()] == [0.03252, 0.03227, 0.01613, 0.01587]


def test_rrf_handles_an_empty_generator() -> None:
    assert rrf([[], ["A", "B"], []], k=60) == rrf([["A", "B"]], k=60)
    assert rrf([[], [], []], k=60) == {}


def test_rrf_ties_keep_first_seen_order() -> None:
    assert list(rrf([["B", "A"], ["A", "B"]], k=60)) == ["B", "A"]


def test_fuse_sets_ranks_hits_and_terms() -> None:
    lexical = [
        Hit("A", 1, 7.5, match("deploy", "yml")),
        Hit("B", 2, 3.0, match("deploy")),
        Hit("C", 3, 1.0, match("x")),
    ]
    dense = [("C", 0.81), ("A", 0.74), ("D", 0.52)]
    entity = [("D", "ent_aditya")]

    candidates = fuse(dense, lexical, entity, k=60)

    by_id = {c.record_id: c for c in candidates}
    assert [c.record_id for c in candidates] == ["A", "C", "D", "B"]
    assert [c.fused_rank for c in candidates] == [1, 2, 3, 4]
    a, d = by_id["A"], by_id["D"]
    assert a.dense == GeneratorHit(2, 0.74)
    assert a.lexical == GeneratorHit(1, 7.5)
    assert a.lexical_terms == match("deploy", "yml")
    assert a.entity is None and a.entity_id is None
    assert a.rrf_score == pytest.approx(1 / 62 + 1 / 61)
    assert a.score == a.rrf_score
    assert d.entity == GeneratorHit(1, 0.0) and d.entity_id == "ent_aditya"
    assert d.lexical is None and d.lexical_terms is None
    assert d.rrf_score == pytest.approx(1 / 63 + 1 / 61)
    assert by_id["B"].dense is None


def test_fuse_orders_lexical_hits_by_rank_and_counts_a_repeated_record_once() -> None:
    lexical = [Hit("B", 2, 3.0, match("b")), Hit("A", 1, 5.0, match("a"))]
    entity = [("E", "ent_one"), ("E", "ent_two")]

    candidates = fuse([], lexical, entity, k=60)

    by_id = {c.record_id: c for c in candidates}
    assert by_id["A"].lexical == GeneratorHit(1, 5.0)
    assert by_id["B"].lexical == GeneratorHit(2, 3.0)
    assert by_id["E"].entity_id == "ent_one"
    assert by_id["E"].rrf_score == pytest.approx(1 / 61)


def test_fuse_with_every_generator_empty_is_empty() -> None:
    assert fuse([], [], [], k=60) == []
