"""Sensitivity classes decided by the extractor's label: the extraction prompt offers the
tenant's ``extractor_label`` classes, a candidate may name one, and the record it becomes
is put in that class (where no earlier class claims it first). Only extraction labels a
record; a label the pack does not declare is dropped, never failing the run. The record
keeps its label beside its class, so ``retold pack apply`` after a pack change and an
export moved to another tenant classify by it again. Runs on SQLite and PostgreSQL.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from retold.cli import main
from retold.hosted import CompletionClient, FakeCompletionClient
from retold.ingest import extractor as extraction_schema
from retold.ingest.extractor import FakeExtractor, ReplayExtractor, StructuredLLMExtractor
from retold.ingest.reviewer import StructuredLLMReviewer, TableReviewer
from retold.ingest.write_request import WriteRequest
from retold.models import (
    CandidateRecord,
    EntityMention,
    ExtractionOutput,
    ReviewDecision,
    Scope,
    SessionSummary,
)
from retold.pack_apply import apply_pack
from retold.store import open_store
from retold.testing import World, make_world
from retold.testing.anthropic_stub import AnthropicStub
from retold.testing.openai_stub import OpenAIStub
from tests.providers import stub_answer
from tests.sql import execute, fts_ids, rows

Worlds = Callable[..., World]

LABELLED = """
default:
  governance:
    sensitivity_classes:
      - none
      - {name: phi, decided_by: extractor_label}
      - {name: finance_detail, decided_by: extractor_label}
"""
UNLABELLED = """
default:
  governance:
    sensitivity_classes: [none]
"""
# A pattern class listed before the label class: it claims what it matches first.
PATTERN_FIRST = """
default:
  governance:
    sensitivity_classes:
      - none
      - {name: meds, decided_by: pattern, pattern: 'metformin'}
      - {name: phi, decided_by: extractor_label}
"""
SAID = "I was diagnosed with type 2 diabetes last spring, so I take metformin every morning."
QUOTE = "I was diagnosed with type 2 diabetes last spring"
FACT = "Aditya was diagnosed with type 2 diabetes."


@pytest.fixture
def tenant(tmp_path: Path, store_target: str) -> Iterator[Worlds]:
    """``tenant(pack_yaml, name="default")``: tenant ``name`` on the test store under that
    pack, a file of its own (one world per tenant and test)."""
    opened: list[World] = []

    def make(pack_yaml: str, name: str = "default") -> World:
        path = tmp_path / f"{name}-packs.yaml"
        path.write_text(pack_yaml, encoding="utf-8")
        world = make_world(tmp_path, store=store_target, pack=path, tenant=name)
        opened.append(world)
        return world

    yield make
    for world in opened:
        world.rt.close()


def _ended(world: World) -> str:
    world.say("user", SAID)
    world.say("assistant", "Thanks, I will keep that in mind.")
    world.rt.hooks.on_session_end(world.p)
    assert world.p.session_id is not None
    return world.p.session_id


def _answer(label: object, *, content: str = FACT, with_field: bool = True) -> dict[str, Any]:
    """One extraction answer in its JSON form, its candidate labelled ``label``."""
    candidate = extraction_schema.candidate_to_json(CandidateRecord(
        type="semantic", content=content, attribute="diagnosis", source_kind="user_statement",
        evidence=QUOTE, evidence_turn=1, entity_mentions=[EntityMention("person", "Aditya", "about")],
        confidence=0.9))
    if with_field:
        candidate["sensitivity"] = label
    return {"candidates": [candidate],
            "summary": {"content": "Aditya shared a diagnosis.", "decisions": [], "entity_mentions": []}}


def _replayed(tmp_path: Path, answer: dict[str, Any]) -> ReplayExtractor:
    path = tmp_path / "recorded.json"
    path.write_text(json.dumps(answer), encoding="utf-8")
    return ReplayExtractor(path)


def _written(world: World, session_id: str, extractor: Any, reviewer: Any = None) -> str:
    """Run the session end with ``extractor``; the sensitivity class of the one record."""
    result = world.rt.session_end.using(extractor, reviewer or TableReviewer()).run(session_id)
    assert result.outcome == "extracted" and result.counts["written"] == 1, result
    (record,) = world.rt.store.find_records(content=FACT)
    return record.sensitivity


def test_a_phi_label_puts_the_record_in_phi_and_pack_apply_keeps_it(tenant: Worlds, tmp_path: Path) -> None:
    world = tenant(LABELLED)
    session_id = _ended(world)
    assert _written(world, session_id, _replayed(tmp_path, _answer("phi"))) == "phi"
    # The persisted stage keeps the label, so a resumed or forced run classifies the same.
    stage = world.rt.store.stage_row(session_id, "extract")
    assert stage is not None and stage.output["candidates"][0]["sensitivity"] == "phi"

    # Re-applying the pack classifies the record again; the extractor's label still decides.
    applied = apply_pack(world.rt.store, world.embedder, world.rt.sensitivity, apply=True)
    assert applied.records >= 1 and applied.changed_class == 0
    (record,) = world.rt.store.find_records(content=FACT)
    assert record.sensitivity == "phi"


def test_a_review_revision_keeps_the_extractors_label(tenant: Worlds) -> None:
    world = tenant(LABELLED)
    session_id = _ended(world)
    labelled = CandidateRecord(
        type="semantic", content="Aditya has type 2 diabetes and was diagnosed last spring.",
        attribute="diagnosis", source_kind="user_statement", evidence=QUOTE, evidence_turn=1,
        entity_mentions=[EntityMention("person", "Aditya", "about")], confidence=0.9, sensitivity="phi")
    narrowed = CandidateRecord(  # what a reviewer answers: its schema has no label
        type="semantic", content=FACT, attribute="diagnosis", source_kind="user_statement",
        evidence=QUOTE, evidence_turn=1, entity_mentions=[EntityMention("person", "Aditya", "about")],
        confidence=0.9)
    reviewer = TableReviewer({labelled.content: ReviewDecision("revise", narrowed, "narrower")})
    output = ExtractionOutput([labelled], SessionSummary("Aditya shared a diagnosis.", [], []))
    assert _written(world, session_id, FakeExtractor(output), reviewer) == "phi"


def test_without_the_class_in_the_pack_the_same_label_claims_nothing(tenant: Worlds, tmp_path: Path) -> None:
    world = tenant(UNLABELLED)
    session_id = _ended(world)
    assert _written(world, session_id, _replayed(tmp_path, _answer("phi"))) == "none"
    stage = world.rt.store.stage_row(session_id, "extract")
    assert stage is not None and "sensitivity" not in stage.output["candidates"][0]


def test_an_earlier_class_in_the_pack_claims_first(tenant: Worlds, tmp_path: Path) -> None:
    world = tenant(PATTERN_FIRST)
    world.say("user", SAID)
    world.say("assistant", "Noted.")
    world.rt.hooks.on_session_end(world.p)
    assert world.p.session_id is not None
    answer = _answer("phi", content="Aditya takes metformin every morning.")
    answer["candidates"][0]["evidence"] = "I take metformin every morning"
    result = world.rt.session_end.using(_replayed(tmp_path, answer), TableReviewer()).run(world.p.session_id)
    assert result.counts["written"] == 1, result
    (record,) = world.rt.store.find_records(content="Aditya takes metformin every morning.")
    assert record.sensitivity == "meds"


@pytest.mark.parametrize("label", ["secret_class", "PHI", 7, ["phi"]])
def test_a_label_the_pack_does_not_declare_is_dropped_and_the_record_written(
        tenant: Worlds, tmp_path: Path, label: object) -> None:
    world = tenant(LABELLED)
    session_id = _ended(world)
    assert _written(world, session_id, _replayed(tmp_path, _answer(label))) == "none"
    stage = world.rt.store.stage_row(session_id, "extract")
    assert stage is not None and "sensitivity" not in stage.output["candidates"][0]


def test_a_hosted_answer_with_an_unknown_label_still_extracts(tenant: Worlds) -> None:
    world = tenant(LABELLED)
    session_id = _ended(world)
    cfg = world.rt.config.ingestion
    client = FakeCompletionClient([_answer("made_up"), {"decisions": [
        {"index": 0, "action": "accept", "reason": "stated", "revision": None}]}])
    labels = world.rt.sensitivity.labels
    assert labels == ("phi", "finance_detail")
    assert _written(world, session_id, StructuredLLMExtractor(client, cfg, labels=labels),
                    StructuredLLMReviewer(client, cfg)) == "none"


def test_an_old_recording_without_the_field_writes_no_label(tenant: Worlds, tmp_path: Path) -> None:
    world = tenant(LABELLED)
    session_id = _ended(world)
    replay = _replayed(tmp_path, _answer(None, with_field=False))
    assert _written(world, session_id, replay) == "none"
    (read,) = extraction_schema.output_from_json(_answer(None, with_field=False)).candidates
    assert read.sensitivity is None


def test_only_an_extraction_write_may_carry_a_label(tenant: Worlds) -> None:
    world = tenant(LABELLED)
    world.say("user", SAID)
    request = WriteRequest(type="semantic", content=FACT, attribute="diagnosis", sensitivity_label="phi")
    by_tool = world.rt.ingestor.write(world.p, request, origin="tool")
    by_host = world.rt.ingestor.write(world.p, WriteRequest(
        type="semantic", content="Aditya takes metformin.", attribute="medication", sensitivity_label="phi"),
        origin="host")
    by_extraction = world.rt.ingestor.write(world.p, WriteRequest(
        type="semantic", content="Aditya sees a diabetologist.", attribute="doctor", sensitivity_label="phi"),
        origin="extraction")
    assert [world.record(r.record_id).sensitivity for r in (by_tool, by_host, by_extraction)] == [
        "none", "none", "phi"]
    # The memory_write tool offers no such field: a model that sends one is refused.
    refused = world.rt.tools.call("memory_write", world.p, {
        "type": "semantic", "content": "Aditya's blood type is A+.", "attribute": "blood_type",
        "write_target": "personal", "sensitivity": "phi"})
    assert refused.get("error", {}).get("code") == "invalid_input", refused


# -- the label kept: pack apply, export and import, the migration --------------------------------

# The pack in PATTERN_FIRST without its pattern class, and one whose pattern class comes
# after a label class that is not phi.
MEDS = "Aditya takes metformin every morning."
DRUGS_LAST = """
default:
  governance:
    sensitivity_classes:
      - none
      - {name: finance_detail, decided_by: extractor_label}
      - {name: drugs, decided_by: pattern, pattern: 'metformin'}
"""


@pytest.fixture
def quiet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A working folder with no config file and no RETOLD_* variables, for the command."""
    for name in ("RETOLD_CONFIG", "RETOLD_TENANT", "RETOLD_STORE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)


def _pack_apply(world: World, pack_yaml: str, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """``retold pack apply --yes`` for the world's tenant once its pack file reads
    ``pack_yaml``; the counts it prints."""
    pack = Path(world.rt.config.tenancy.pack or "")
    pack.write_text(pack_yaml, encoding="utf-8")
    config = pack.with_name(f"{pack.stem}-config.yaml")
    family = world.embedder  # the store's embedding family, so the command opens it
    config.write_text(f"embedding: {{model: fake, version: {family.version}, dims: {family.dims}}}\n"
                      f"tenancy: {{pack: {pack}}}\n", encoding="utf-8")
    code = main(["pack", "apply", "--tenant", world.rt.tenant, "--store", world.target, "--config",
                 str(config), "--yes", "--json"])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    counts: dict[str, Any] = json.loads(printed.out)
    return counts


def _labelled(world: World, content: str, attribute: str = "medication") -> str:
    """A record extraction wrote with the label ``phi``."""
    result = world.write(origin="extraction", content=content, attribute=attribute, sensitivity_label="phi")
    assert result.record_id is not None, result
    return result.record_id


def _class(world: World, record_id: str) -> tuple[str, str | None]:
    record = world.record(record_id)
    return record.sensitivity, record.sensitivity_label


def test_a_label_an_earlier_class_outranked_decides_once_pack_apply_drops_that_class(
        tenant: Worlds, quiet: None, capsys: pytest.CaptureFixture[str]) -> None:
    world = tenant(PATTERN_FIRST + "    redact_before_embedding: [meds]\n")
    labelled = _labelled(world, MEDS)
    unlabelled = world.write(content="Aditya buys metformin monthly.", attribute="pharmacy").record_id
    assert world.record(labelled).redacted_content == "Aditya takes [meds] every morning."
    assert [_class(world, r) for r in (labelled, unlabelled)] == [("meds", "phi"), ("meds", None)]

    # The pack drops meds: the kept label decides, and the text no longer masked is indexed
    # and embedded again; the record nobody labelled falls to none.
    applied = _pack_apply(world, LABELLED, capsys)
    assert (applied["changed_class"], applied["unmasked"], applied["reembedded"]) == (2, 2, 2)
    assert [_class(world, r) for r in (labelled, unlabelled)] == [("phi", "phi"), ("none", None)]
    assert world.record(labelled).redacted_content is None
    assert fts_ids(world.rt.store, "metformin") == {labelled, unlabelled}

    # Without phi the next class that claims it does, without that one none; the label stays
    # and decides again once a pack declares phi.
    assert _pack_apply(world, DRUGS_LAST, capsys)["changed_class"] == 2
    assert _class(world, labelled) == ("drugs", "phi")
    assert _pack_apply(world, UNLABELLED, capsys)["changed_class"] == 2
    assert _class(world, labelled) == ("none", "phi")
    assert _pack_apply(world, LABELLED, capsys)["changed_class"] == 1
    assert [_class(world, r) for r in (labelled, unlabelled)] == [("phi", "phi"), ("none", None)]


def _exported(world: World) -> list[str]:
    out = io.StringIO()
    world.rt.operations.export(Scope("user", "aditya"), out)
    return out.getvalue().splitlines()


def _record_lines(lines: list[str]) -> list[dict[str, Any]]:
    return [line for line in map(json.loads, lines) if line["line"] == "record"]


def test_an_import_keeps_the_label_and_the_importing_pack_decides_by_it(
        tenant: Worlds, quiet: None, capsys: pytest.CaptureFixture[str]) -> None:
    home = tenant(LABELLED)
    record_id = _labelled(home, FACT, attribute="diagnosis")
    lines = _exported(home)
    assert [r["sensitivity_label"] for r in _record_lines(lines)] == ["phi"]

    same = tenant(LABELLED, "beta")
    landed = same.rt.operations.import_lines(lines, same.p, from_tenant="default")
    assert landed.created == 1 and landed.failed == [], landed
    assert _class(same, record_id) == ("phi", "phi")

    # A pack without the class keeps the label as data; it decides once the pack has it.
    other = tenant(UNLABELLED, "gamma")
    assert other.rt.operations.import_lines(lines, other.p, from_tenant="default").created == 1
    assert _class(other, record_id) == ("none", "phi")
    assert _pack_apply(other, LABELLED, capsys)["changed_class"] == 1
    assert _class(other, record_id) == ("phi", "phi")


def test_an_export_from_before_labels_travelled_imports_unlabelled(tenant: Worlds) -> None:
    home = tenant(LABELLED)
    record_id = _labelled(home, FACT, attribute="diagnosis")
    header, *body = _exported(home)
    old = [header, *(json.dumps({k: v for k, v in json.loads(line).items() if k != "sensitivity_label"})
                     for line in body)]
    there = tenant(LABELLED, "beta")
    landed = there.rt.operations.import_lines(old, there.p, from_tenant="default")
    assert landed.created == 1 and landed.failed == [], landed
    assert _class(there, record_id) == ("none", None)

    # A label no pack could declare fails its line, reported with why.
    bad = [header, *(line.replace('"sensitivity_label":"phi"', '"sensitivity_label":"PHI!"')
                     for line in body)]
    third = tenant(LABELLED, "gamma")
    refused = third.rt.operations.import_lines(bad, third.p, from_tenant="default")
    assert refused.created == 0 and len(refused.failed) == 1
    assert "sensitivity_label 'PHI!'" in refused.failed[0].reason


def test_a_store_from_before_labels_migrates_with_its_rows_and_their_classes(
        tenant: Worlds, quiet: None, capsys: pytest.CaptureFixture[str]) -> None:
    world = tenant(LABELLED)
    labelled = _labelled(world, FACT, attribute="diagnosis")
    world.write(content="Aditya lives in Berlin.", attribute="city")
    world.rt.close()
    # The store as schema 23 left it: each record's class, no label beside it.
    execute(world.target, "ALTER TABLE records DROP COLUMN sensitivity_label")
    execute(world.target, "DELETE FROM schema_migrations WHERE version = 24")
    before = rows(world.target, "SELECT id, content, sensitivity FROM records ORDER BY id")
    assert len(before) == 2 and ("phi" in {row[2] for row in before})

    store = open_store(world.target)
    try:
        assert store.migration_report is not None and store.migration_report.applied == (24,)
    finally:
        store.close()
    after = rows(world.target, "SELECT id, content, sensitivity, sensitivity_label FROM records ORDER BY id")
    assert after == [(*row, None) for row in before]

    # Re-applying the pack takes no record out of the class its label decided then.
    assert _pack_apply(world, LABELLED, capsys)["changed_class"] == 0
    assert rows(world.target, "SELECT sensitivity FROM records WHERE id = ?", labelled) == [("phi",)]


# -- what a real provider SDK sends ---------------------------------------------------------------


def _answer_schema(stub: AnthropicStub | OpenAIStub, body: dict[str, Any]) -> dict[str, Any]:
    """The answer schema an extraction request body carries (strict where OpenAI takes it)."""
    if isinstance(stub, AnthropicStub):
        (tool,) = body["tools"]
        schema: dict[str, Any] = tool["input_schema"]
        return schema
    assert body["response_format"]["json_schema"]["strict"] is True  # still strict with the label
    strict: dict[str, Any] = body["response_format"]["json_schema"]["schema"]
    return strict


@pytest.mark.hosted
@pytest.mark.parametrize("pack", [LABELLED, UNLABELLED], ids=["labelled", "unlabelled"])
def test_the_prompt_offers_the_pack_labels_and_only_then_asks_for_one(
        tenant: Worlds, provider: tuple[CompletionClient, AnthropicStub | OpenAIStub], pack: str) -> None:
    """The request a real SDK sends: the class names and the schema's field with the
    pack's label classes, neither without them; strict mode holds either way."""
    world, (client, stub) = tenant(pack), provider
    assert world.rt.sensitivity.labels == (("phi", "finance_detail") if pack is LABELLED else ())
    session_id = _ended(world)
    answer = _answer("phi", with_field=pack is LABELLED)
    stub.script(stub_answer(stub, answer), stub_answer(stub, {"decisions": [
        {"index": 0, "action": "accept", "reason": "stated", "revision": None}]}))
    # The runtime's own extractor and reviewer for this tenant, on the SDK client.
    world.rt.hosted_client = lambda model, **_: client  # type: ignore[method-assign]

    result = world.rt.session_end.run(session_id)

    assert result.outcome == "extracted" and result.counts["written"] == 1, result
    extract_body = stub.requests[0]
    sent = json.dumps(extract_body, ensure_ascii=False)
    candidate = _answer_schema(stub, extract_body)["properties"]["candidates"]["items"]
    (record,) = world.rt.store.find_records(content=FACT)
    run = world.events("extraction.run")[-1]["payload"]
    if pack is LABELLED:
        assert "Sensitivity labels: phi, finance_detail." in sent
        assert "sensitivity" in candidate["properties"] and "sensitivity" in candidate["required"]
        assert candidate["properties"]["sensitivity"]["type"] == ["string", "null"]
        assert run["extractor_prompt_version"] == "extract_v2"
        assert record.sensitivity == "phi"
    else:
        assert "Sensitivity labels" not in sent and "finance_detail" not in sent
        assert "sensitivity" not in candidate["properties"]
        assert run["extractor_prompt_version"] == "extract_v1"
        assert record.sensitivity == "none"
