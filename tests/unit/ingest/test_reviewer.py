"""StructuredLLMReviewer, apply_revision and TableReviewer."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import jsonschema
import pytest

from retold.config import IngestionConfig
from retold.hosted import FakeCompletionClient, HostedError
from retold.ingest.extractor import load_prompt
from retold.ingest.reviewer import (
    REVIEW_PROMPT_VERSION,
    REVIEW_SCHEMA,
    InvalidReviewRevision,
    StructuredLLMReviewer,
    TableReviewer,
    apply_revision,
)
from retold.models import CandidateRecord, EntityMention, ReviewContext, ReviewDecision, Scope, Turn
from retold.testing import make_record

T0 = datetime(2026, 9, 3, 12, 0, tzinfo=UTC)
USER = Scope("user", "aditya")


def cand(content: str = "Aditya prefers concise answers.", **fields: Any) -> CandidateRecord:
    base: dict[str, Any] = {
        "type": "semantic",
        "content": content,
        "attribute": "explanation_style",
        "source_kind": "agent_inference",
        "evidence": "Keep answers concise.",
        "evidence_turn": 3,
        "entity_mentions": [EntityMention("person", "Aditya", "about", "ent_aditya")],
        "valid_from": datetime(2026, 9, 1, tzinfo=UTC),
        "confidence": 0.8,
    }
    base.update(fields)
    return CandidateRecord(**base)


def turns() -> list[Turn]:
    return [Turn("s1", n, "user" if n % 2 else "assistant", f"turn text {n}", T0) for n in range(1, 7)]


def ctx(records: list[Any] | None = None) -> ReviewContext:
    return ReviewContext(
        transcript_window=turns(),
        destination_scope=USER,
        primary_entity_id="ent_aditya",
        live_records=records or [],
        prompt_version=REVIEW_PROMPT_VERSION,
    )


def decision(index: int, action: str = "accept", revision: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"index": index, "action": action, "reason": f"because {index}", "revision": revision}


def review(revision: dict[str, Any], candidate: CandidateRecord | None = None) -> ReviewDecision:
    client = FakeCompletionClient(answers=[{"decisions": [decision(0, "revise", revision)]}])
    reviewer = StructuredLLMReviewer(client, IngestionConfig())
    return reviewer.review_batch([(candidate or cand(), ctx())])[0]


def test_all_candidates_in_one_call_with_windows_scope_entity_and_live_records() -> None:
    live = make_record(content="Aditya likes short replies.", attribute="explanation_style")
    items = [(cand(f"Fact {i}.", evidence_turn=2 + i), ctx([live])) for i in range(3)]
    client = FakeCompletionClient(answers=[{"decisions": [decision(i) for i in range(3)]}])
    cfg = IngestionConfig(review_timeout_ms=4321, hosted_max_output_tokens=999)
    reviewer = StructuredLLMReviewer(client, cfg)

    reviewer.review_batch(items)

    assert len(client.calls) == 1
    request = client.calls[0]
    assert request.system == load_prompt(REVIEW_PROMPT_VERSION)
    assert request.schema == REVIEW_SCHEMA
    assert request.timeout_ms == 4321 and request.max_output_tokens == 999
    text = request.messages[0].content
    for i in range(3):
        assert f"### Candidate {i}" in text
        assert f'"content": "Fact {i}."' in text
    assert "destination scope: user:aditya" in text
    assert "primary entity: ent_aditya" in text
    assert "Aditya likes short replies." in text and live.id in text
    # Candidate 0 quotes turn 2: the window is turns 1-3 only.
    block0 = text.split("### Candidate 1")[0]
    assert "[turn 1 · user · 2026-09-03T12:00Z] turn text 1" in block0
    assert "turn text 3" in block0 and "turn text 4" not in block0
    assert reviewer.name == "llm:fake-model" and reviewer.prompt_version == "review_v1"


def test_decisions_come_back_in_input_order_whatever_the_answer_order() -> None:
    items = [(cand(f"Fact {i}."), ctx()) for i in range(3)]
    answer = {"decisions": [decision(2, "reject"), decision(0, "accept"), decision(1, "reject")]}
    reviewer = StructuredLLMReviewer(FakeCompletionClient(answers=[answer]), IngestionConfig())

    got = reviewer.review_batch(items)

    assert [(d.action, d.reason) for d in got] == [
        ("accept", "because 0"),
        ("reject", "because 1"),
        ("reject", "because 2"),
    ]
    assert all(d.candidate is None for d in got)


def test_no_candidates_means_no_call() -> None:
    client = FakeCompletionClient(answers=[])

    assert StructuredLLMReviewer(client, IngestionConfig()).review_batch([]) == []
    assert client.calls == []


def test_revise_narrows_content_attribute_temporal_and_lowers_confidence() -> None:
    got = review(
        {
            "content": "Aditya prefers concise answers in code reviews.",
            "attribute": "review_style",
            "valid_from": None,
            "review_at": "2026-12-01T00:00:00Z",
            "confidence": 0.5,
        }
    )

    assert got.action == "revise" and got.reason == "because 0"
    assert got.candidate == cand(
        "Aditya prefers concise answers in code reviews.",
        attribute="review_style",
        valid_from=None,
        review_at=datetime(2026, 12, 1, tzinfo=UTC),
        confidence=0.5,
    )


@pytest.mark.parametrize(
    ("revision", "field"),
    [
        ({"source_kind": "user_statement"}, "source_kind"),
        ({"evidence": "Keep answers very concise."}, "evidence"),
        ({"evidence_turn": 1}, "evidence_turn"),
        ({"entity_mentions": [{"kind": "person", "text": "Bob", "role": "about"}]}, "entity_mentions"),
        ({"scope": "user:bob"}, "scope"),
        ({"type": "procedural"}, "type"),
        ({"content": "Shorter.", "source_kind": "user_statement"}, "source_kind"),
        ({"confidence": 0.95}, "confidence"),
        ({"content": "   "}, "content"),
        ({"content": "x" * 200}, "content"),
        ({"event_at": "someday"}, "event_at"),
        ({"valid_until": "2026-08-01T00:00:00Z"}, "valid_until"),
    ],
)
def test_a_forbidden_or_widening_revision_rejects_the_candidate(revision: dict[str, Any], field: str) -> None:
    got = review(revision)

    assert got == ReviewDecision("reject", None, f"invalid_review_revision: {field}")


def test_apply_revision_leaves_the_original_untouched() -> None:
    original = cand()

    revised = apply_revision(original, {"content": "Aditya prefers short answers.", "confidence": 0.8})

    assert original.content == "Aditya prefers concise answers."
    assert revised.content == "Aditya prefers short answers." and revised.confidence == 0.8
    assert revised.entity_mentions == original.entity_mentions
    assert revised.entity_mentions is not original.entity_mentions
    with pytest.raises(InvalidReviewRevision) as caught:
        apply_revision(original, {"confidence": 0.81})
    assert caught.value.field == "confidence"


@pytest.mark.parametrize(
    "decisions",
    [
        [decision(0)],  # one missing
        [decision(0), decision(0)],  # duplicate
        [decision(0), decision(2)],  # out of range
        [decision(0), decision(-1)],
        [decision(0), {"index": 1, "action": "maybe", "reason": "", "revision": None}],
        [decision(0), {"index": 1, "action": "accept", "reason": "ok"}],  # no revision key
        [decision(0), decision(1, "revise", None)],  # revise without revision
        [decision(0), decision(1, "accept", {"content": "x"})],  # revision on accept
    ],
)
def test_index_and_shape_problems_are_malformed(decisions: list[dict[str, Any]]) -> None:
    client = FakeCompletionClient(answers=[{"decisions": decisions}])
    reviewer = StructuredLLMReviewer(client, IngestionConfig())

    with pytest.raises(HostedError) as caught:
        reviewer.review_batch([(cand("A."), ctx()), (cand("B."), ctx())])

    assert caught.value.kind == "malformed"


def test_client_failures_pass_through() -> None:
    client = FakeCompletionClient(answers=[HostedError("timeout", "too slow")])

    with pytest.raises(HostedError) as caught:
        StructuredLLMReviewer(client, IngestionConfig()).review_batch([(cand(), ctx())])

    assert caught.value.kind == "timeout"


def test_review_schema_is_valid_and_accepts_an_answer() -> None:
    jsonschema.Draft202012Validator.check_schema(REVIEW_SCHEMA)
    jsonschema.validate(
        {"decisions": [decision(0), decision(1, "revise", {"content": "Shorter.", "confidence": 0.3})]},
        REVIEW_SCHEMA,
    )


def test_table_reviewer_still_decides_by_content() -> None:
    rejected = ReviewDecision("reject", None, "no")
    reviewer = TableReviewer(
        table={
            "B.": rejected,
            "C.": lambda c: ReviewDecision("revise", apply_revision(c, {"confidence": 0.1}), "lower"),
        }
    )
    items = [(cand("A."), ctx()), (cand("B."), ctx()), (cand("C."), ctx())]

    got = reviewer.review_batch(items)

    assert [d.action for d in got] == ["accept", "reject", "revise"]
    assert got[2].candidate is not None and got[2].candidate.confidence == 0.1
    assert reviewer.batches == [items]


def test_live_records_of_one_entity_are_shown_once_for_the_whole_batch() -> None:
    live = [make_record(content="Aditya works from Lisbon."), make_record(content="Aditya uses vim.")]
    client = FakeCompletionClient([{"decisions": [decision(i) for i in range(3)]}])
    reviewer = StructuredLLMReviewer(client, IngestionConfig())
    items = [(cand(f"Aditya prefers option {i}.", evidence_turn=1), ctx(live)) for i in range(3)]
    reviewer.review_batch(items)
    (request,) = client.calls
    text = request.messages[0].content
    assert text.count("Aditya works from Lisbon.") == 1
    assert text.count("see G1") == 3
