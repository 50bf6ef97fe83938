"""Session extraction through the real provider SDKs (hosted models, no tool-call loop).

``StructuredLLMExtractor`` and ``StructuredLLMReviewer`` drive ``AnthropicClient`` and
``OpenAIClient`` (the official SDKs) against their loopback API stubs, inside the
extraction runner on a real store file. Every test runs once per provider: success,
retries and failing closed must look the same whichever provider serves the models. The
stub's request log counts the hosted calls a session costs: one extract call and one
batched review call, never more.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from retold.hosted import AnthropicClient, CompletionClient, OpenAIClient
from retold.ingest.extractor import EXTRACTION_SCHEMA, StructuredLLMExtractor, output_to_json
from retold.ingest.reviewer import REVIEW_SCHEMA, StructuredLLMReviewer
from retold.ingest.session_end import ExtractionResult
from retold.models import CandidateRecord, ExtractionOutput, SessionSummary
from retold.testing import World, make_world
from retold.testing import anthropic_stub as claude
from retold.testing import openai_stub as oai
from retold.testing.anthropic_stub import AnthropicStub
from retold.testing.openai_stub import OpenAIStub

pytestmark = pytest.mark.hosted

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


@dataclass
class Provider:
    """One provider's stub, client and scripted answers, in the terms the tests use."""

    name: str
    model: str
    stub: AnthropicStub | OpenAIStub

    def client(self) -> CompletionClient:
        if isinstance(self.stub, AnthropicStub):
            return AnthropicClient(self.model, "test-key", base_url=self.stub.base_url, retry_backoff_s=0.01)
        return OpenAIClient(self.model, "test-key", base_url=self.stub.base_url, retry_backoff_s=0.01)

    def ok(self, obj: Any, delay_s: float = 0.0) -> Any:
        """The structured answer ``obj``, in the form this provider's request asked for."""
        if isinstance(self.stub, AnthropicStub):
            return claude.tool_use(obj, delay_s=delay_s)
        return oai.answer(obj, delay_s=delay_s)

    def server_error(self) -> Any:
        return claude.error(500) if isinstance(self.stub, AnthropicStub) else oai.error(500)

    def prose(self) -> Any:
        """An answer in plain text instead of the structured object."""
        return claude.text_only() if isinstance(self.stub, AnthropicStub) else oai.reply("Looks fine to me.")

    def asked_for(self, body: dict[str, Any]) -> str:
        """The answer a request asked for: the forced tool, or the strict response format."""
        if isinstance(self.stub, AnthropicStub):
            return str(body["tool_choice"]["name"])
        if "response_format" in body:
            return str(body["response_format"]["json_schema"]["name"])
        return str(body["tool_choice"]["function"]["name"])


@pytest.fixture(params=["anthropic", "openai"])
def provider(request: pytest.FixtureRequest) -> Provider:
    if request.param == "anthropic":
        stub: AnthropicStub | OpenAIStub = request.getfixturevalue("anthropic_stub")
        return Provider("anthropic", "claude-haiku-4-5-20251001", stub)
    return Provider("openai", "gpt-4o-mini", request.getfixturevalue("openai_stub"))


def end_session(world: World) -> str:
    for role, text in (("user", USER_SAYS), ("assistant", ASSISTANT_SAYS), ("tool", TOOL_SAYS)):
        world.say(role, text)
    world.rt.hooks.on_session_end(world.p)
    assert world.p.session_id is not None
    return world.p.session_id


def extract(world: World, provider: Provider, session_id: str) -> ExtractionResult:
    client = provider.client()
    cfg = world.rt.config.ingestion
    runner = world.rt.session_end.using(extractor=StructuredLLMExtractor(client, cfg),
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
    world: World, provider: Provider
) -> None:
    sid = end_session(world)
    provider.stub.script(provider.ok(EXTRACTED), provider.ok(REVIEWED))

    result = extract(world, provider, sid)

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
    extract_body, review_body = provider.stub.requests
    assert extract_body["model"] == review_body["model"] == provider.model
    assert provider.asked_for(extract_body) == "record_extraction"
    assert provider.asked_for(review_body) == "candidate_review"
    assert provider.stub.api_keys == ["test-key", "test-key"]

    (run,) = world.events("extraction.run")
    payload = run["payload"]
    assert (payload["extract_stage"], payload["review_stage"]) == ("model", "model")
    assert payload["extractor"] == payload["reviewer"] == f"llm:{provider.model}"
    assert (payload["extractor_prompt_version"], payload["reviewer_prompt_version"]) == (
        "extract_v1", "review_v1")
    # What each stage cost, from the usage the provider reported with each answer.
    one_call = {"calls": 1, "input_tokens": 42, "output_tokens": 17}
    assert payload["hosted"] == {"extract": one_call, "review": one_call}


def test_anthropic_is_asked_through_one_forced_tool_per_call(
    world: World, anthropic_stub: AnthropicStub
) -> None:
    sid = end_session(world)
    anthropic_stub.script(claude.tool_use(EXTRACTED), claude.tool_use(REVIEWED))
    extract(world, Provider("anthropic", "claude-haiku-4-5-20251001", anthropic_stub), sid)

    extract_body, review_body = anthropic_stub.requests
    assert extract_body["tool_choice"] == {"type": "tool", "name": "record_extraction"}
    (tool,) = extract_body["tools"]
    assert tool["name"] == "record_extraction" and tool["input_schema"] == EXTRACTION_SCHEMA
    assert review_body["tool_choice"] == {"type": "tool", "name": "candidate_review"}
    (tool,) = review_body["tools"]
    assert tool["name"] == "candidate_review" and tool["input_schema"] == REVIEW_SCHEMA
    assert "[turn 1 · user · " in extract_body["messages"][0]["content"]
    review_text = review_body["messages"][0]["content"]
    assert "### Candidate 0" in review_text and "### Candidate 1" in review_text


def test_openai_extraction_is_strict_json_and_review_a_forced_tool(
    world: World, openai_stub: OpenAIStub
) -> None:
    sid = end_session(world)
    openai_stub.script(oai.answer(EXTRACTED), oai.answer(REVIEWED))
    extract(world, Provider("openai", "gpt-4o-mini", openai_stub), sid)

    extract_body, review_body = openai_stub.requests
    # The extraction schema fits strict mode: the server itself holds the answer to it.
    assert extract_body["response_format"]["json_schema"]["strict"] is True
    assert "tools" not in extract_body
    system, user = extract_body["messages"]
    assert system["role"] == "system" and "[turn 1 · user · " in user["content"]
    # A review revision is an open object, which strict mode cannot express.
    assert "response_format" not in review_body
    (tool,) = review_body["tools"]
    assert tool["function"]["parameters"] == REVIEW_SCHEMA
    review_text = review_body["messages"][1]["content"]
    assert "### Candidate 0" in review_text and "### Candidate 1" in review_text


def test_extraction_timeout_fails_closed(tmp_path: Path, provider: Provider) -> None:
    world = make_world(tmp_path, extraction_timeout_ms=200)
    try:
        sid = end_session(world)
        before = stored(world)
        # Each attempt (the first and both retries) outlasts the 200 ms timeout.
        provider.stub.script(*(provider.ok(EXTRACTED, delay_s=3.0) for _ in range(3)))

        result = extract(world, provider, sid)

        payload = assert_failed_closed(world, result, sid, before, stage="extract", kind="timeout")
        assert payload["persisted_stages"] == []
        assert world.rt.store.stage_row(sid, "extract") is None
        assert len(provider.stub.requests) == 3  # a timeout is transient: retried twice
        assert all(provider.asked_for(body) == "record_extraction" for body in provider.stub.requests)
    finally:
        world.rt.close()


def test_a_server_error_is_retried_and_the_run_then_extracts(world: World, provider: Provider) -> None:
    sid = end_session(world)
    provider.stub.script(provider.server_error(), provider.ok(EXTRACTED), provider.ok(REVIEWED))

    result = extract(world, provider, sid)

    assert result.outcome == "extracted", result
    assert result.counts["written"] == 2
    assert len(provider.stub.requests) == 3
    first, retried, review = provider.stub.requests
    assert first == retried  # the same extraction request, sent again
    assert provider.asked_for(review) == "candidate_review"
    assert len(world.events("extraction.failed")) == 0 and len(world.events("extraction.run")) == 1


def test_a_provider_that_keeps_failing_fails_closed(world: World, provider: Provider) -> None:
    sid = end_session(world)
    before = stored(world)
    provider.stub.script(*(provider.server_error() for _ in range(3)))

    result = extract(world, provider, sid)

    payload = assert_failed_closed(world, result, sid, before, stage="extract", kind="provider")
    assert "HTTP 500" in payload["message"] and "after 3 attempts" in payload["message"]
    assert len(provider.stub.requests) == 3


def test_a_malformed_extraction_answer_fails_closed_without_a_retry(world: World, provider: Provider) -> None:
    sid = end_session(world)
    before = stored(world)
    bad = json.loads(json.dumps(EXTRACTED))
    bad["candidates"][0]["confidence"] = 1.7  # outside 0..1
    bad["candidates"][1]["type"] = "rumour"  # not a record type
    provider.stub.script(provider.ok(bad))

    result = extract(world, provider, sid)

    payload = assert_failed_closed(world, result, sid, before, stage="extract", kind="malformed")
    assert payload["persisted_stages"] == []
    assert len(provider.stub.requests) == 1  # a bad answer is never asked for again
    assert "record_extraction" in payload["message"]


def test_a_review_answer_without_the_tool_fails_closed_and_keeps_the_extract_stage(
    world: World, provider: Provider
) -> None:
    sid = end_session(world)
    before = stored(world)
    provider.stub.script(provider.ok(EXTRACTED), provider.prose())

    result = extract(world, provider, sid)

    payload = assert_failed_closed(world, result, sid, before, stage="review", kind="malformed")
    assert payload["persisted_stages"] == ["extract"]  # a retry will not pay for extraction again
    assert len(provider.stub.requests) == 2

    provider.stub.script(provider.ok(REVIEWED))
    world.clock.advance(seconds=world.rt.config.ingestion.extraction_retry_seconds)  # its backoff
    retried = extract(world, provider, sid)
    assert retried.outcome == "extracted" and retried.counts["written"] == 2
    assert len(provider.stub.requests) == 3
    assert provider.asked_for(provider.stub.requests[-1]) == "candidate_review"
