"""Fusion: channel scores scaled within their lists, weighted and added; the link channel."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from retold.config import FusionConfig
from retold.models import Candidate, GeneratorHit, LexicalMatch, LexicalTerm
from retold.retrieve.fusion import add_links, floor_at, fuse, scaled

WEIGHTS = FusionConfig(dense=1.0, lexical=0.5, entity=0.25, link=0.4)


@dataclass(frozen=True)
class Hit:
    """Same shape as the lexical generator's hit."""

    record_id: str
    rank: int
    bm25: float
    match: LexicalMatch


def match(*terms: str, total: int = 3) -> LexicalMatch:
    return LexicalMatch(tuple(LexicalTerm(t, False, False) for t in terms), total)


def order(candidates: list[Candidate]) -> list[str]:
    return [c.record_id for c in candidates]


def test_a_list_scales_from_its_zero_to_its_best() -> None:
    assert scaled([0.9, 0.7, 0.5], floor=0.5) == pytest.approx([1.0, 0.5, 0.0])
    assert scaled([0.9, 0.2], floor=0.3) == pytest.approx([1.0, 0.0])  # below the zero counts nothing


def test_the_zero_is_the_score_at_its_rank_and_none_in_a_shorter_list() -> None:
    assert floor_at([0.9, 0.7, 0.5], 3) == 0.5
    assert floor_at([0.9, 0.7], 3) is None


def test_the_last_candidate_still_counts_when_the_zero_lies_further_down() -> None:
    # The channel's 100th record sets the zero: its 30th, the last candidate, is much
    # closer than that and keeps most of its weight.
    assert scaled([0.6, 0.5, 0.45], floor=0.1) == pytest.approx([1.0, 0.8, 0.7])


def test_a_short_list_scales_from_no_match_so_its_last_record_still_counts() -> None:
    # Two records in the whole store: the second is not worth nothing for being second.
    assert scaled([0.8, 0.4], floor=None) == pytest.approx([1.0, 0.5])
    assert scaled([5.0], floor=None) == [1.0]
    assert scaled([], floor=None) == []


def test_equal_scores_scale_to_one() -> None:
    assert scaled([0.6, 0.6, 0.6], floor=0.6) == [1.0, 1.0, 1.0]


def test_a_standout_bm25_score_outweighs_a_second_dense_place() -> None:
    # R holds the question's rare words (BM25 far ahead of the rest), P is only a little
    # closer in meaning than R: the margins decide, not the ranks.
    dense = [("P", 0.62), ("R", 0.60), ("X", 0.20)]
    lexical = [Hit("R", 1, -9.0, match("rare", "words")), Hit("X", 2, -1.0, match("words")),
               Hit("P", 3, -0.5, match("words"))]
    fused = fuse(dense, lexical, [], WEIGHTS, floors=(0.20, 0.5))
    assert order(fused) == ["R", "P", "X"]
    r = fused[0]
    assert r.fused_score == pytest.approx(1.0 * (0.40 / 0.42) + 0.5 * 1.0)
    assert (r.fused_rank, r.score) == (1, r.fused_score)


def test_every_channel_s_evidence_is_carried_on_the_candidate() -> None:
    fused = fuse([("A", 0.8), ("B", 0.5)], [Hit("B", 1, -2.0, match("x", "y"))], [("A", "ent_1")],
                 WEIGHTS)
    by_id = {c.record_id: c for c in fused}
    assert by_id["A"].dense == GeneratorHit(1, 0.8) and by_id["A"].entity == GeneratorHit(1, 0.0)
    assert by_id["A"].entity_id == "ent_1" and by_id["A"].lexical is None
    assert by_id["B"].lexical == GeneratorHit(1, -2.0) and by_id["B"].lexical_terms == match("x", "y")
    # A: dense 1.0 + entity 0.25; B: dense 0.5/0.8 (a short list scales from 0) + lexical 0.5.
    assert by_id["A"].fused_score == pytest.approx(1.25)
    assert by_id["B"].fused_score == pytest.approx(0.625 + 0.5)


def test_each_channel_s_part_of_the_sum_is_kept_and_they_add_up() -> None:
    fused = fuse([("A", 0.8), ("B", 0.5)], [Hit("B", 1, -2.0, match("x", "y"))], [("A", "ent_1")],
                 WEIGHTS)
    by_id = {c.record_id: c for c in fused}
    a, b = by_id["A"], by_id["B"]
    assert (a.dense_part, a.lexical_part, a.entity_part) == pytest.approx((1.0, 0.0, 0.25))
    assert (b.dense_part, b.lexical_part, b.entity_part) == pytest.approx((0.625, 0.5, 0.0))
    linked = {c.record_id: c for c in add_links(fused, [("B", "A")], WEIGHTS.link)}
    # The hop lifts B towards A (1.25) by its weight: the lift is B's link part.
    assert linked["B"].link_part == pytest.approx(0.125)
    for c in linked.values():
        assert c.fused_score == pytest.approx(c.dense_part + c.lexical_part + c.entity_part + c.link_part)


def test_a_record_listed_twice_by_one_channel_keeps_its_first_place() -> None:
    fused = fuse([], [], [("A", "ent_1"), ("A", "ent_2"), ("B", "ent_2")], WEIGHTS)
    assert order(fused) == ["A", "B"]
    assert fused[0].entity_id == "ent_1" and fused[0].fused_score == pytest.approx(0.25)


def test_equal_sums_keep_the_order_the_channels_listed_them() -> None:
    fused = fuse([("A", 0.5)], [Hit("B", 1, -1.0, match("x"))], [],
                 FusionConfig(dense=1.0, lexical=1.0, entity=0.0, link=0.0))
    assert order(fused) == ["A", "B"]


def test_a_channel_weighted_zero_has_no_say() -> None:
    dense = [("A", 0.9), ("B", 0.1)]
    lexical = [Hit("B", 1, -5.0, match("x")), Hit("A", 2, -0.1, match("x"))]
    only_dense = fuse(dense, lexical, [], FusionConfig(1.0, 0.0, 0.0, 0.0), floors=(0.1, 0.1))
    only_lexical = fuse(dense, lexical, [], FusionConfig(0.0, 1.0, 0.0, 0.0), floors=(0.1, 0.1))
    assert order(only_dense) == ["A", "B"] and order(only_lexical) == ["B", "A"]


def test_the_link_channel_adds_its_weight_and_ranks_again() -> None:
    fused = fuse([("A", 0.9), ("B", 0.5), ("C", 0.45)], [], [], WEIGHTS, floors=(0.45, None))
    assert order(fused) == ["A", "B", "C"]
    linked = add_links(fused, [("C", "A"), ("D", "A")], WEIGHTS.link)
    assert order(linked) == ["A", "C", "D", "B"]
    by_id = {c.record_id: c for c in linked}
    assert by_id["C"].via == "A" and by_id["D"].via == "A" and by_id["B"].via is None
    assert by_id["D"].fused_score == pytest.approx(0.4) and by_id["D"].dense is None
    assert [c.fused_rank for c in linked] == [1, 2, 3, 4]


def test_the_hop_lifts_a_record_up_to_its_source_never_past_it() -> None:
    # B (0.5 of A's dense share) reaches D; D rises to B's score, not above it, while a
    # record that already stood higher (A, reached from B too) keeps its own score.
    fused = fuse([("A", 0.9), ("B", 0.5), ("C", 0.1)], [], [], WEIGHTS, floors=(0.1, None))
    linked = add_links(fused, [("D", "B"), ("A", "B")], weight=2.0)
    by_id = {c.record_id: c for c in linked}
    assert order(linked) == ["A", "B", "D", "C"]
    assert by_id["D"].fused_score == pytest.approx(by_id["B"].fused_score) == pytest.approx(0.5)
    assert by_id["A"].fused_score == pytest.approx(1.0)


def test_no_link_changes_nothing() -> None:
    fused = fuse([("A", 0.9)], [], [], WEIGHTS)
    assert add_links(fused, [], WEIGHTS.link) is fused
