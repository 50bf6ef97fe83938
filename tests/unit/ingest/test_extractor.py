"""StructuredLLMExtractor, ReplayExtractor and the JSON form of ExtractionOutput."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from retold.config import IngestionConfig
from retold.hosted import FakeCompletionClient, HostedError
from retold.hosted.strict import strict_form
from retold.ingest.extractor import (
    EXTRACT_LABEL_PROMPT_VERSION,
    EXTRACT_PROMPT_VERSION,
    EXTRACTION_SCHEMA,
    ExtractionOutputError,
    ReplayExtractor,
    StructuredLLMExtractor,
    candidate_to_json,
    extraction_schema,
    load_prompt,
    output_from_json,
    output_to_json,
)
from retold.ingest.reviewer import REVIEW_PROMPT_VERSION
from retold.models import EntityMention, ExtractionContext, Principal, Turn

T0 = datetime(2026, 9, 3, 12, 0, tzinfo=UTC)
PRINCIPAL = Principal("research-agent", "aditya", "s1")


def transcript() -> list[Turn]:
    return [
        Turn("s1", 1, "user", "Keep answers concise. I'm moving to Berlin next month.", T0),
        Turn("s1", 2, "assistant", "Understood, concise it is.", T0.replace(minute=1)),
        Turn("s1", 3, "user", "We picked Postgres over MySQL for the billing service.", T0.replace(minute=2)),
    ]


def context() -> ExtractionContext:
    return ExtractionContext(
        principal=PRINCIPAL,
        known_entities=[("ent_aditya", "person", "Aditya"), ("ent_billing", "project", "billing")],
        existing_subjects=["ent_aditya/explanation_style"],
        prompt_version=EXTRACT_PROMPT_VERSION,
    )


def candidate_json(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "type": "semantic",
        "content": "Aditya prefers concise answers.",
        "attribute": "explanation_style",
        "source_kind": "user_statement",
        "evidence": "Keep answers concise.",
        "evidence_turn": 1,
        "entity_mentions": [{"kind": "person", "text": "Aditya", "role": "about", "entity_id": "ent_aditya"}],
        "event_at": None,
        "valid_from": None,
        "valid_until": None,
        "review_at": None,
        "confidence": 0.9,
    }
    base.update(fields)
    return base


def answer(candidates: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "candidates": [candidate_json()] if candidates is None else candidates,
        "summary": {
            "content": "Aditya set up the billing service. Postgres was chosen. Answers stay concise.",
            "decisions": ["Use Postgres for the billing service."],
            "entity_mentions": [{"kind": "project", "text": "billing service", "role": "about"}],
        },
    }


def test_one_call_with_versioned_prompt_numbered_transcript_schema_and_config() -> None:
    cfg = IngestionConfig(
        extraction_timeout_ms=12345, hosted_max_output_tokens=777, extraction_max_candidates=7
    )
    client = FakeCompletionClient(answers=[answer()])
    extractor = StructuredLLMExtractor(client, cfg)

    extractor.extract(transcript(), context())

    assert len(client.calls) == 1
    request = client.calls[0]
    assert request.system == load_prompt(EXTRACT_PROMPT_VERSION)
    assert request.schema == EXTRACTION_SCHEMA
    assert request.timeout_ms == 12345
    assert request.max_output_tokens == 777
    assert len(request.messages) == 1 and request.messages[0].role == "user"
    text = request.messages[0].content
    assert "[turn 1 · user · 2026-09-03T12:00Z] Keep answers concise." in text
    assert "[turn 2 · assistant · 2026-09-03T12:01Z] Understood, concise it is." in text
    assert "[turn 3 · user · 2026-09-03T12:02Z] We picked Postgres" in text
    assert "ent_aditya · person · Aditya" in text
    assert "ent_aditya/explanation_style" in text
    assert "Maximum candidates: 7." in text
    assert f"{cfg.summary_max_chars} characters" in text
    assert extractor.name == "llm:fake-model"
    assert extractor.prompt_version == "extract_v1"
    assert extractor.replayed is False


def test_a_pack_with_label_classes_gets_the_label_prompt_and_a_strict_nullable_field() -> None:
    client = FakeCompletionClient(answers=[answer([candidate_json(sensitivity="phi"),
                                                   candidate_json(sensitivity="not_a_class"),
                                                   candidate_json(sensitivity=None)])])
    extractor = StructuredLLMExtractor(client, IngestionConfig(), labels=("phi", "finance_detail"))

    out = extractor.extract(transcript(), context())

    (request,) = client.calls
    assert extractor.prompt_version == EXTRACT_LABEL_PROMPT_VERSION == "extract_v2"
    assert request.system == load_prompt("extract_v2") and "`sensitivity`" in request.system
    assert "Sensitivity labels: phi, finance_detail." in request.messages[0].content
    # Every property required, the label nullable: strict mode takes the schema unchanged.
    items = request.schema["properties"]["candidates"]["items"]
    assert "sensitivity" in items["required"]
    assert items["properties"]["sensitivity"]["type"] == ["string", "null"]
    strict = strict_form(request.schema)
    assert strict is not None and "sensitivity" in strict["properties"]["candidates"]["items"]["required"]
    # A label outside the pack's classes is dropped, not a malformed answer.
    assert [c.sensitivity for c in out.candidates] == ["phi", None, None]
    assert candidate_to_json(out.candidates[0])["sensitivity"] == "phi"
    assert "sensitivity" not in candidate_to_json(out.candidates[1])


def test_without_label_classes_nothing_new_is_asked_and_old_answers_read_unlabelled() -> None:
    client = FakeCompletionClient(answers=[answer()])
    extractor = StructuredLLMExtractor(client, IngestionConfig(), labels=())
    out = extractor.extract(transcript(), context())
    (request,) = client.calls
    assert extraction_schema(()) is EXTRACTION_SCHEMA and request.schema is EXTRACTION_SCHEMA
    assert "sensitivity" not in json.dumps(request.schema)
    assert "ensitivity" not in request.system + request.messages[0].content
    assert out.candidates[0].sensitivity is None  # an answer without the field: no label
    # The label schema accepts a recorded answer too, and refuses an answer that omits it.
    labelled = extraction_schema(("phi",))
    jsonschema.validate(answer([candidate_json(sensitivity="phi")]), labelled)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(answer(), labelled)


def test_parses_dates_entity_mentions_and_summary() -> None:
    episode = candidate_json(
        type="episodic",
        content="The billing service team chose Postgres over MySQL.",
        attribute=None,
        evidence="We picked Postgres over MySQL for the billing service.",
        evidence_turn=3,
        entity_mentions=[
            {"kind": "project", "text": "billing service", "role": "about"},
            {"kind": "product", "text": "Postgres", "role": "mentions", "entity_id": None},
        ],
        event_at="2026-09-03T12:02:00Z",
        valid_from="2026-10-01T00:00:00+02:00",
        review_at="2026-10-01",
        confidence=1,
    )
    client = FakeCompletionClient(answers=[answer([candidate_json(), episode])])

    out = StructuredLLMExtractor(client, IngestionConfig()).extract(transcript(), context())

    first, second = out.candidates
    assert first.entity_mentions == [EntityMention("person", "Aditya", "about", "ent_aditya")]
    assert first.event_at is None and first.confidence == 0.9
    assert second.type == "episodic" and second.attribute is None and second.evidence_turn == 3
    assert second.event_at == datetime(2026, 9, 3, 12, 2, tzinfo=UTC)
    assert second.valid_from == datetime(2026, 9, 30, 22, 0, tzinfo=UTC)
    assert second.valid_from is not None and second.valid_from.tzinfo is not None
    assert second.review_at == datetime(2026, 10, 1, tzinfo=UTC)
    assert second.entity_mentions[1] == EntityMention("product", "Postgres", "mentions", None)
    assert isinstance(second.confidence, float)
    assert out.summary.decisions == ["Use Postgres for the billing service."]
    assert out.summary.entity_mentions == [EntityMention("project", "billing service", "about")]


def test_candidates_are_capped_at_extraction_max_candidates_in_model_order() -> None:
    many = [candidate_json(content=f"Fact number {i}.") for i in range(5)]
    client = FakeCompletionClient(answers=[answer(many)])

    out = StructuredLLMExtractor(client, IngestionConfig(extraction_max_candidates=3)).extract(
        transcript(), context()
    )

    assert [c.content for c in out.candidates] == ["Fact number 0.", "Fact number 1.", "Fact number 2."]


def test_summary_is_kept_within_summary_max_chars() -> None:
    long = answer([])
    long["summary"]["content"] = "One sentence here. " * 20
    client = FakeCompletionClient(answers=[long])

    out = StructuredLLMExtractor(client, IngestionConfig(summary_max_chars=100)).extract(
        transcript(), context()
    )

    assert len(out.summary.content) <= 100
    assert out.summary.content.endswith("here.")


@pytest.mark.parametrize(
    "mutate",
    [
        lambda a: a["candidates"][0].pop("evidence_turn"),
        lambda a: a["candidates"][0].update(evidence_turn=0),
        lambda a: a["candidates"][0].update(source_kind="session_summary"),
        lambda a: a["candidates"][0].update(event_at="next friday"),
        lambda a: a["candidates"][0].update(confidence=1.5),
        lambda a: a["candidates"][0].update(surprise="field"),
        lambda a: a["candidates"][0]["entity_mentions"][0].update(role="owner"),
        lambda a: a["summary"].pop("decisions"),
        lambda a: a.pop("summary"),
    ],
    ids=[
        "missing-evidence-turn",
        "turn-zero",
        "reserved-source-kind",
        "bad-date",
        "confidence-range",
        "unknown-field",
        "bad-mention-role",
        "summary-missing-decisions",
        "no-summary",
    ],
)
def test_an_answer_that_cannot_be_parsed_is_malformed(mutate: Any) -> None:
    bad = answer()
    mutate(bad)  # a hand-made answer: FakeCompletionClient does not validate
    client = FakeCompletionClient(answers=[bad])

    with pytest.raises(HostedError) as caught:
        StructuredLLMExtractor(client, IngestionConfig()).extract(transcript(), context())

    assert caught.value.kind == "malformed"


def test_client_failures_pass_through() -> None:
    client = FakeCompletionClient(answers=[HostedError("timeout", "too slow")])

    with pytest.raises(HostedError) as caught:
        StructuredLLMExtractor(client, IngestionConfig()).extract(transcript(), context())

    assert caught.value.kind == "timeout"


def test_schema_is_valid_and_accepts_a_model_answer() -> None:
    jsonschema.Draft202012Validator.check_schema(EXTRACTION_SCHEMA)
    jsonschema.validate(answer(), EXTRACTION_SCHEMA)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(answer([candidate_json(extra=1)]), EXTRACTION_SCHEMA)


def test_json_round_trip() -> None:
    data = answer([candidate_json(), candidate_json(event_at="2026-09-03T12:02:00Z", attribute=None)])
    out = output_from_json(data)

    again = output_from_json(json.loads(json.dumps(output_to_json(out))))

    assert again == out
    jsonschema.validate(output_to_json(out), EXTRACTION_SCHEMA)


def test_replay_extractor_serves_the_recorded_output(tmp_path: Path) -> None:
    path = tmp_path / "session-42.json"
    path.write_text(json.dumps(answer()), "utf-8")

    replay = ReplayExtractor(path)
    first = replay.extract(transcript(), context())
    first.candidates.clear()  # callers may change what they get
    second = replay.extract([], context())

    assert replay.name == "replay:session-42.json"
    assert replay.replayed is True
    assert len(second.candidates) == 1
    assert output_to_json(second) == output_to_json(output_from_json(answer()))


def test_replay_extractor_refuses_a_bad_file_when_built(tmp_path: Path) -> None:
    broken = copy.deepcopy(answer())
    del broken["candidates"][0]["evidence"]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(broken), "utf-8")

    with pytest.raises(ExtractionOutputError, match="evidence"):
        ReplayExtractor(path)
    with pytest.raises(ExtractionOutputError):
        ReplayExtractor(tmp_path / "missing.json")


def test_prompt_files_exist_and_match_the_version_constants() -> None:
    prompts = resources.files("retold.ingest") / "prompts"
    names = {entry.name for entry in prompts.iterdir()}

    assert f"{EXTRACT_PROMPT_VERSION}.md" in names
    assert f"{EXTRACT_LABEL_PROMPT_VERSION}.md" in names
    assert f"{REVIEW_PROMPT_VERSION}.md" in names
    extract = load_prompt(EXTRACT_PROMPT_VERSION)
    # Contract points the prompt must carry.
    for phrase in ("One fact per candidate", "verbatim", "evidence_turn", "user_statement", "at most"):
        assert phrase in extract
    assert "revise" in load_prompt(REVIEW_PROMPT_VERSION)
