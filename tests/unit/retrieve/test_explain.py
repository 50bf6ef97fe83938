"""The tool result's explanation: the written-out conversion gives what the generic one
gives, key for key and in the same order, with every optional part present or absent."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import numpy as np

from retold.models import Explanation, GeneratorHit, LexicalMatch, LexicalTerm
from retold.plain import to_plain
from retold.retrieve.explain import explanation_plain

AT = datetime(2026, 3, 4, 5, 6, 7, 890123, tzinfo=UTC)


def _full() -> Explanation:
    terms = LexicalMatch((LexicalTerm("atlas", False, True, True), LexicalTerm("deploy", False, False)), 3, 1)
    return Explanation(
        raw_queries=["when does Atlas deploy?"], rewritten_queries=["atlas deploy day"],
        rewrite_status="applied", matched_by=["dense", "lexical", "entity"],
        dense=GeneratorHit(1, 0.8125), lexical=GeneratorHit(2, -3.5), lexical_terms=terms,
        entity=GeneratorHit(3, 0.0), fused_rank=1, freshness_multiplier=0.75,
        rerank=(1, 2, np.float32(0.5)), gate="passed on dense", dedup="kept",
        budget="fit at position 1 of 5", source_kind="user_statement", status="confirmed",
        created_at=AT, event_at=AT, entity_ids=["ent_1", "ent_2"], conflicts_with=["rec_9"],
        summary="matched: dense 0.81 (rank 1)",
    )


def _bare() -> Explanation:
    return Explanation(
        raw_queries=["x"], rewritten_queries=None, rewrite_status="disabled", matched_by=[],
        dense=None, lexical=None, lexical_terms=None, entity=None, fused_rank=0,
        freshness_multiplier=None, rerank=None, gate="admitted", dedup="kept", budget="fit",
        source_kind="system", status="provisional", created_at=AT, event_at=AT,
        entity_ids=[], conflicts_with=[], summary="authority counterpart",
    )


def test_the_written_out_explanation_equals_the_generic_conversion() -> None:
    for ex in (_full(), _bare()):
        fast, generic = explanation_plain(ex), to_plain(ex)
        assert fast == generic
        # Same order and JSON-ready: the text a model receives is byte for byte the same.
        assert json.dumps(fast) == json.dumps(generic)
    assert explanation_plain(_full())["rerank"] == [1, 2, 0.5]
    assert explanation_plain(_full())["created_at"] == "2026-03-04T05:06:07.890123Z"
