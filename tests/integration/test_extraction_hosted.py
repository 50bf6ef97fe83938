"""Session extraction through the real Anthropic SDK (hosted models, no tool-call loop).

``StructuredLLMExtractor`` and ``StructuredLLMReviewer`` drive ``AnthropicClient`` (the
official SDK) against the loopback Messages-API stub, inside the extraction runner on a real
store file. The stub's request log counts the hosted calls a session costs: one extract
call and one batched review call, never more.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from retold.hosted import AnthropicClient
from retold.ingest.extraction import ExtractionResult
from retold.ingest.extractor import EXTRACTION_SCHEMA, StructuredLLMExtractor, output_to_json
from retold.ingest.reviewer import REVIEW_SCHEMA, StructuredLLMReviewer
from retold.models import CandidateRecord, ExtractionOutput, SessionSummary
from retold.testing import World, make_world
from retold.testing.anthropic_stub import AnthropicStub, error, text_only, tool_use

MODEL = "claude-haiku-4-5-20251001"
USER_SAYS = "Please keep every answer short and technical, I read them on my phone."
ASSISTANT_SAYS = "Understood, I will keep answers short."
TOOL_SAYS = "timezone lookup result: Europe/Berlin for the account"
SUMMARY = "Aditya asked for short technical answers. The agent looked up the account time zone."

PREFERS = CandidateRecord(
    type="semantic", content="Aditya prefers short technical answers.", attribute="answer_style",
    source_kind="user_statement", evidence="keep every answer short and technical", evidence_turn=1,
    entity_mentions=[], confidence=0.8,
)
TIMEZONE = CandidateRecord(
    type="semantic", content="Aditya's account time zone is Europe/Berlin.", attribute="timezone",
    source_kind="tool_result", evidence="result: Europe/Berlin for the account", evidence_turn=3,
    entity_mentions=[], confidence=0.9,
)
CANDIDATES = (PREFERS, TIMEZONE)

EXTRACTED: dict[str, Any] = output_to_json(
    ExtractionOutput(list(CANDIDATES), SessionSummary(SUMMARY, ["answers stay short"], []))
)
REVIEWED: dict[str, Any] = {
    "decisions": [
        {"index": i, "action": "accept", "reason": "stated and useful", "revision": None}
        for i in range(len(CANDIDATES))
    ]
}


def end_session(world: World) -> str:
    for role, text in (("user", USER_SAYS), ("assistant", ASSISTANT_SAYS), ("tool", TOOL_SAYS)):
        world.say(role, text)
    world.rt.hooks.on_session_end(world.p)
    assert world.p.session_id is not None
    return world.p.session_id


def extract(world: World, stub: AnthropicStub, session_id: str) -> ExtractionResult:
    client = AnthropicClient(MODEL, "test-key", base_url=stub.base_url, retry_backoff_s=0.01)
    cfg = world.rt.config.ingestion
    runner = world.rt.extraction.using(extractor=StructuredLLMExtractor(client, cfg),
                                       reviewer=StructuredLLMReviewer(client, cfg))
    return runner.run(session_id)


def stored(world: World) -> dict[str, int]:
    """Table counts a failed run must leave alone (it may append events)."""
    counts = world.counts()
    counts.pop("events")
    return counts


def assert_failed_closed(world: World, result: ExtractionResult, session_id: str,
                         before: dict[str, int], stage: str, kind: str) -> dict[str, Any]:
    assert result.outcome == "failed", result
    assert stored(world) == before  # no candidate, no summary, no entity
    session = world.rt.store.get_session(session_id)
    assert session is not None and session.extracted_at is None
    assert session.extraction_started_at is None  # the claim was released for recovery
    assert world.events("extraction.run") == []
    (failed,) = world.events("extraction.failed")
    payload: dict[str, Any] = failed["payload"]
    assert (payload["session_id"], payload["stage"], payload["kind"]) == (session_id, stage, kind)
    text = json.dumps(payload)
    assert USER_SAYS not in text and PREFERS.content not in text  # no transcript or candidate text
    for candidate in CANDIDATES:
        assert world.rt.store.find_records(content=candidate.content) == []
    return payload


def test_valid_answers_extract_with_one_extract_call_and_one_batched_review(
    world: World, anthropic_stub: AnthropicStub
) -> None:
    sid = end_session(world)
    anthropic_stub.script(tool_use(EXTRACTED), tool_use(REVIEWED))

    result = extract(world, anthropic_stub, sid)

    assert result.outcome == "extracted", result
    assert result.counts["proposed"] == 2 and result.counts["review_accepted"] == 2
    assert result.counts["written"] == 2 and result.counts.get("rejected", 0) == 0
    for candidate in CANDIDATES:
        (record,) = world.rt.store.find_records(content=candidate.content)
        assert record.source_kind == candidate.source_kind and record.evidence == candidate.evidence
    (summary,) = world.rt.store.find_records(source_kind="session_summary")
    assert summary.content == SUMMARY and summary.source_ref == f"session:{sid}"
    session = world.rt.store.get_session(sid)
    assert session is not None and session.extracted_at is not None

    # Exactly two hosted calls: the extraction and ONE review for both candidates.
    extract_body, review_body = anthropic_stub.requests
    assert extract_body["model"] == MODEL and review_body["model"] == MODEL
    assert extract_body["tool_choice"] == {"type": "tool", "name": "record_extraction"}
    (tool,) = extract_body["tools"]
    assert tool["name"] == "record_extraction" and tool["input_schema"] == EXTRACTION_SCHEMA
    assert review_body["tool_choice"] == {"type": "tool", "name": "candidate_review"}
    (tool,) = review_body["tools"]
    assert tool["name"] == "candidate_review" and tool["input_schema"] == REVIEW_SCHEMA
    assert "[turn 1 · user · " in extract_body["messages"][0]["content"]
    review_text = review_body["messages"][0]["content"]
    assert "### Candidate 0" in review_text and "### Candidate 1" in review_text
    assert anthropic_stub.api_keys == ["test-key", "test-key"]

    (run,) = world.events("extraction.run")
    payload = run["payload"]
    assert (payload["extract_stage"], payload["review_stage"]) == ("model", "model")
    assert payload["extractor"] == payload["reviewer"] == f"llm:{MODEL}"
    assert (payload["extractor_prompt_version"], payload["reviewer_prompt_version"]) == (
        "extract_v1", "review_v1")


def test_extraction_timeout_fails_closed(tmp_path: Path, anthropic_stub: AnthropicStub) -> None:
    world = make_world(tmp_path, extraction_timeout_ms=200)
    try:
        sid = end_session(world)
        before = stored(world)
        # Each attempt (the first and both retries) outlasts the 200 ms timeout.
        anthropic_stub.script(*(tool_use(EXTRACTED, delay_s=3.0) for _ in range(3)))

        result = extract(world, anthropic_stub, sid)

        payload = assert_failed_closed(world, result, sid, before, stage="extract", kind="timeout")
        assert payload["persisted_stages"] == []
        assert world.rt.store.stage_row(sid, "extract") is None
        assert len(anthropic_stub.requests) == 3  # a timeout is transient: retried twice
        assert all(body["tools"][0]["name"] == "record_extraction" for body in anthropic_stub.requests)
    finally:
        world.rt.close()


def test_a_server_error_is_retried_and_the_run_then_extracts(
    world: World, anthropic_stub: AnthropicStub
) -> None:
    sid = end_session(world)
    anthropic_stub.script(error(500), tool_use(EXTRACTED), tool_use(REVIEWED))

    result = extract(world, anthropic_stub, sid)

    assert result.outcome == "extracted", result
    assert result.counts["written"] == 2
    assert len(anthropic_stub.requests) == 3
    first, retried, review = anthropic_stub.requests
    assert first == retried  # the same extraction request, sent again
    assert review["tool_choice"]["name"] == "candidate_review"
    assert len(world.events("extraction.failed")) == 0 and len(world.events("extraction.run")) == 1


def test_a_malformed_extraction_answer_fails_closed_without_a_retry(
    world: World, anthropic_stub: AnthropicStub
) -> None:
    sid = end_session(world)
    before = stored(world)
    bad = json.loads(json.dumps(EXTRACTED))
    bad["candidates"][0]["confidence"] = 1.7  # outside 0..1
    bad["candidates"][1]["type"] = "rumour"  # not a record type
    anthropic_stub.script(tool_use(bad))

    result = extract(world, anthropic_stub, sid)

    payload = assert_failed_closed(world, result, sid, before, stage="extract", kind="malformed")
    assert payload["persisted_stages"] == []
    assert len(anthropic_stub.requests) == 1  # a bad answer is never asked for again
    assert "record_extraction" in payload["message"]


def test_a_review_answer_without_the_tool_fails_closed_and_keeps_the_extract_stage(
    world: World, anthropic_stub: AnthropicStub
) -> None:
    sid = end_session(world)
    before = stored(world)
    anthropic_stub.script(tool_use(EXTRACTED), text_only())

    result = extract(world, anthropic_stub, sid)

    payload = assert_failed_closed(world, result, sid, before, stage="review", kind="malformed")
    assert payload["persisted_stages"] == ["extract"]  # a retry will not pay for extraction again
    assert len(anthropic_stub.requests) == 2

    anthropic_stub.script(tool_use(REVIEWED))
    world.clock.advance(seconds=world.rt.config.ingestion.extraction_retry_seconds)  # its backoff
    retried = extract(world, anthropic_stub, sid)
    assert retried.outcome == "extracted" and retried.counts["written"] == 2
    assert len(anthropic_stub.requests) == 3
    assert anthropic_stub.requests[-1]["tool_choice"]["name"] == "candidate_review"
