"""Credentials are refused on every write path: memory_write, memory_revise (supersede,
status changes, entity merges), memory_forget, host writes, extraction candidates, review
revisions and session summaries. A refusal names the field and kind, writes nothing, and
no row of the store repeats the secret (the transcript, which the user wrote, aside)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from retold.ingest.extractor import FakeExtractor, output_to_json
from retold.ingest.reviewer import TableReviewer
from retold.models import CandidateRecord, ExtractionOutput, ReviewDecision, Scope, SessionSummary
from retold.testing import World
from retold.tools.handlers import ToolHandlers
from tests.sql import dump_lines

PASSWORD = "Tr0ub4dor&3"
API_KEY = "sk-proj-Zx9Tq4Lm7Wn2Kp5Rv8Yb3Hc6Jd1Fg0Sa4Qe7Ut2Io9Pl"
SAYS = f"I prefer short answers. My staging password is {PASSWORD} by the way."


def stored_text(world: World) -> str:
    """Every row of the store as SQL text, except the transcript the user typed."""
    world.rt.flush_search_log()
    lines = dump_lines(world.rt.store)
    return "\n".join(line for line in lines if not line.startswith('INSERT INTO "session_turns"'))


def call(world: World, tool: str, payload: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = ToolHandlers(world.rt).call(tool, world.p, payload)
    return result


def refused(result: dict[str, Any], kind: str, field: str, secret: str) -> None:
    assert result["error"]["code"] == "secret_detected", result
    assert (result["error"]["kind"], result["error"]["field"]) == (kind, field)
    assert secret not in json.dumps(result)


SECRET_WRITES = [
    ("password", "content", {"content": f"Aditya's staging password is {PASSWORD}."}),
    ("api_key", "content", {"content": f"Aditya's OpenAI key is {API_KEY}."}),
    ("password", "evidence", {"content": "Aditya has a staging account.", "evidence": SAYS,
                              "source_kind": "user_statement"}),
    ("card_number", "content", {"content": "Aditya pays with card 4111 1111 1111 1111."}),
    ("connection_string", "content", {"content": "The CRM database is postgres://app:Xk9pL2mQ@db/crm."}),
]


@pytest.mark.parametrize(("kind", "field", "fields"), SECRET_WRITES,
                         ids=[f"{k}-{f}" for k, f, _ in SECRET_WRITES])
def test_memory_write_refuses_a_credential_and_writes_nothing(
    world: World, kind: str, field: str, fields: dict[str, str],
) -> None:
    world.say("user", SAYS)
    before = world.counts()
    result = call(world, "memory_write", {"type": "semantic", "attribute": "staging_account", **fields})
    secret = next(s for s in (PASSWORD, API_KEY, "4111 1111", "Xk9pL2mQ") if s in json.dumps(fields))
    refused(result, kind, field, secret)
    assert world.counts() == before


def test_revisions_forgets_and_merges_refuse_credentials(world: World) -> None:
    world.say("user", "I prefer short answers.")
    written = call(world, "memory_write", {"type": "semantic", "content": "Aditya prefers short answers.",
                                           "attribute": "answer_style", "source_kind": "user_statement",
                                           "evidence": "I prefer short answers."})
    record_id = written["record_id"]
    store = world.rt.store
    one = store.create_entity("person", "Bob", Scope("user", "aditya"))
    other = store.create_entity("person", "Robert", Scope("user", "aditya"))
    before = world.counts()
    refused(call(world, "memory_revise", {"id": record_id, "action": "supersede", "reason": "update",
                                          "content": f"Aditya's password is {PASSWORD}."}),
            "password", "content", PASSWORD)
    refused(call(world, "memory_revise", {"id": record_id, "action": "confirm",
                                          "reason": f"confirmed with token {API_KEY}"}),
            "api_key", "reason", API_KEY)
    refused(call(world, "memory_forget", {"id": record_id, "reason": f"password: {PASSWORD}"}),
            "password", "reason", PASSWORD)
    refused(call(world, "memory_revise", {"entity_id": one.id, "merge_into": other.id,
                                          "reason": f"same person, key {API_KEY}"}),
            "api_key", "reason", API_KEY)
    assert world.counts() == before
    assert PASSWORD not in stored_text(world) and API_KEY not in stored_text(world)


def test_a_host_write_is_screened_too(world: World) -> None:
    result = world.write(origin="host", source_kind="system", attribute="vpn",
                         content=f"The VPN password is {PASSWORD}.")
    assert result.error is not None and result.error.code == "secret_detected"
    assert result.error.details == {"kind": "password", "field": "content"}


# -- extraction ----------------------------------------------------------------------------------------


def _candidate(content: str, evidence: str, attribute: str = "answer_style") -> CandidateRecord:
    return CandidateRecord(type="semantic", content=content, attribute=attribute,
                           source_kind="user_statement", evidence=evidence, evidence_turn=1,
                           entity_mentions=[])


CLEAN = _candidate("Aditya prefers short answers.", "I prefer short answers.")
LEAKY = _candidate(f"Aditya's staging password is {PASSWORD}.", f"My staging password is {PASSWORD}",
                   attribute="staging_password")


def _ended(world: World) -> str:
    world.say("user", SAYS)
    world.say("assistant", "Noted, short answers from now on.")
    world.rt.hooks.on_session_end(world.p)
    assert world.p.session_id is not None
    return world.p.session_id


def _extract(world: World, output: ExtractionOutput, reviewer: TableReviewer | None = None) -> dict[str, Any]:
    result = world.rt.session_end.using(FakeExtractor(output), reviewer or TableReviewer()).run("s1")
    assert result.outcome == "extracted", result
    payload: dict[str, Any] = world.events("extraction.run")[-1]["payload"]
    return payload


def test_extraction_withholds_candidates_and_summaries_that_hold_a_credential(world: World) -> None:
    _ended(world)
    summary = SessionSummary(f"Aditya asked for short answers and shared password: {PASSWORD}.", [], [])
    run = _extract(world, ExtractionOutput([LEAKY, CLEAN], summary))
    assert run["counts"]["written"] == 1 and run["summary"]["outcome"] == "skipped_empty"
    withheld = [e["payload"] for e in world.events("extraction.secret_withheld")]
    assert withheld == [
        {"session_id": "s1", "stage": "extract", "item": "candidate 0", "kind": "password",
         "field": "content"},
        {"session_id": "s1", "stage": "extract", "item": "summary", "kind": "password",
         "field": "content"},
    ]
    assert world.rt.store.find_records(content="Aditya prefers short answers.")
    assert PASSWORD not in stored_text(world)  # not in records, FTS, stages, events or logs


def test_a_review_revision_that_adds_a_credential_becomes_a_rejection(world: World) -> None:
    _ended(world)
    leaky_revision = ReviewDecision("revise", _candidate(f"Aditya prefers short answers; pwd={PASSWORD}",
                                                         CLEAN.evidence), "tightened")
    summary = SessionSummary("Aditya asked for short answers.", [], [])
    run = _extract(world, ExtractionOutput([CLEAN], summary), TableReviewer({CLEAN.content: leaky_revision}))
    assert run["counts"].get("written", 0) == 0 and run["counts"]["review_rejected"] == 1
    (event,) = world.events("extraction.secret_withheld")
    assert event["payload"]["stage"] == "review" and event["payload"]["kind"] == "password"
    assert PASSWORD not in stored_text(world)


def test_a_stage_stored_before_screening_is_still_refused_in_place(world: World) -> None:
    session_id = _ended(world)
    raw = ExtractionOutput([LEAKY, CLEAN], SessionSummary(f"Shared password: {PASSWORD}.", [], []))
    world.rt.store.save_stage(session_id, "extract", output_to_json(raw), "old-model", "extract-v0")
    run = _extract(world, ExtractionOutput([], SessionSummary("unused", [], [])))
    (rejection,) = [r for r in run["rejected"] if r["code"] == "secret_detected"]
    assert rejection["index"] == 0 and rejection["candidate"] is None
    assert rejection["details"] == {"kind": "password", "field": "content"}
    assert run["counts"]["written"] == 1 and run["summary"]["outcome"] == "skipped_empty"
    events = json.dumps([e["payload"] for e in world.rt.store.events()])
    assert PASSWORD not in events
    assert not world.rt.store.find_records(content=LEAKY.content)
