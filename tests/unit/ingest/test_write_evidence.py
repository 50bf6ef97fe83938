"""Evidence validation, through memory_write's ingestor path.

The extraction path runs the same validate_evidence; its suite joins this one when the
extraction runner lands.
"""

from __future__ import annotations

from datetime import timedelta

from retold.ingest.evidence import EVIDENCE_NOT_FOUND, EVIDENCE_NOT_PROVIDED
from retold.testing import T0, World

USER_SAYS = "Please keep every answer short and technical."
ASSISTANT_SAYS = "I think you prefer short technical answers overall."
TOOL_SAYS = "timezone lookup result: Europe/Berlin for the account"


def _transcript(world: World) -> None:
    world.say("user", USER_SAYS)
    world.say("assistant", ASSISTANT_SAYS)
    world.say("tool", TOOL_SAYS)


def _write(world: World, claimed: str, evidence: str | None, content: str = "Prefers short answers.") -> str:
    result = world.write(content=content, attribute="answer_style", source_kind=claimed, evidence=evidence)
    assert result.ok, result.note
    assert result.record_id is not None
    return result.record_id


def test_missing_quote_downgrades_to_agent_inference(world: World) -> None:
    _transcript(world)
    rid = _write(world, "user_statement", "I never said anything like this at all.")
    record = world.record(rid)
    assert record.source_kind == "agent_inference" and record.status == "provisional"
    assert record.source_ref is None
    assert world.results[-1].note == EVIDENCE_NOT_FOUND


def test_write_without_evidence_is_an_expiring_inference_with_a_note(world: World) -> None:
    rid = _write(world, "user_statement", None)
    record = world.record(rid)
    assert (record.source_kind, record.source_ref, record.evidence) == ("agent_inference", None, None)
    assert record.expires_at == T0 + timedelta(days=30)
    assert world.results[-1].note == EVIDENCE_NOT_PROVIDED


def test_user_claim_backed_by_an_assistant_turn_is_downgraded_with_a_note(world: World) -> None:
    _transcript(world)
    rid = _write(world, "user_statement", "you prefer short technical answers")
    assert world.record(rid).source_kind == "agent_inference"
    assert world.results[-1].note == "downgraded from user_statement: quote is from a assistant turn"


def test_tool_turn_supports_tool_result_but_not_user_statement(world: World) -> None:
    _transcript(world)
    as_tool = _write(world, "tool_result", "Europe/Berlin for the account", "Timezone is Europe/Berlin.")
    assert world.record(as_tool).source_kind == "tool_result"
    assert world.record(as_tool).status == "confirmed"
    as_user = world.write(content="Lives in the Berlin timezone.", attribute="home_tz",
                          source_kind="user_statement", evidence="Europe/Berlin for the account")
    assert world.record(as_user.record_id).source_kind == "tool_result"
    assert as_user.note == "downgraded from user_statement: quote is from a tool turn"


def test_caller_may_claim_a_lower_source_kind_than_the_turn_supports(world: World) -> None:
    _transcript(world)
    rid = _write(world, "agent_inference", "keep every answer short")
    record = world.record(rid)
    assert record.source_kind == "agent_inference"
    assert record.source_ref == "session:s1<turn:1>"


def test_source_ref_points_to_the_matched_turn(world: World) -> None:
    _transcript(world)
    rid = _write(world, "tool_result", "lookup result: Europe/Berlin", "Timezone is Europe/Berlin.")
    record = world.record(rid)
    assert record.source_ref == "session:s1<turn:3>"
    assert record.evidence == "lookup result: Europe/Berlin"


def test_direct_claim_whose_quote_does_not_entail_it_is_downgraded_with_the_score(world: World) -> None:
    _transcript(world)
    content = "Prefers long narrative answers."
    world.judge.entailment[(USER_SAYS, content)] = 0.12
    result = world.write(content=content, attribute="answer_style", source_kind="user_statement",
                         evidence=USER_SAYS)
    record = world.record(result.record_id)
    assert record.source_kind == "agent_inference" and record.status == "provisional"
    assert record.source_ref == "session:s1<turn:1>"  # the quote was found; it just doesn't support it
    assert result.note == "evidence does not support claim"
    (event,) = world.events("record.created")
    assert event["payload"]["entailment"] == 0.12


def test_exact_judge_keeps_the_claim_and_records_not_checked(world: World) -> None:
    from retold.ingest.equivalence import ExactJudge

    world.rt.ingestor.judge = ExactJudge()
    _transcript(world)
    rid = _write(world, "user_statement", USER_SAYS)
    assert world.record(rid).source_kind == "user_statement"
    (event,) = world.events("record.created")
    assert event["payload"]["entailment"] == "not_checked"
    assert event["payload"]["judge"] == "exact"
