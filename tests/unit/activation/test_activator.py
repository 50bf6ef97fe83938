"""Activation after writes land: memory_write's result, extraction, fail-closed, and the
record leaving the profile when it is superseded, forgotten, expired or erased."""

from __future__ import annotations

from typing import Any

from retold.activation.activator import Activator
from retold.activation.policy import ActivationDecision, ActivationFacts, ActivationPolicy
from retold.config.activation import ActivationConfig
from retold.ingest.extractor import FakeExtractor
from retold.ingest.reviewer import TableReviewer
from retold.models import CandidateRecord, ExtractionOutput, Principal, SessionSummary
from retold.testing import AGENT, World

SAYS = "Please always answer me in British English, whatever the topic."
PREFERENCE = {"type": "semantic", "content": "Aditya wants answers in British English.",
              "attribute": "answer_language", "source_kind": "user_statement",
              "evidence": "always answer me in British English"}


def write(world: World, **fields: Any) -> dict[str, Any]:
    payload = {k: v for k, v in {**PREFERENCE, **fields}.items() if v is not None}
    return world.rt.tools.call("memory_write", world.p, payload)


def profile_ids(world: World, session_id: str) -> tuple[str, ...]:
    principal = Principal(AGENT, "aditya", session_id)
    world.rt.hooks.on_session_start(principal)
    return world.rt.profiles.for_session(principal).record_ids


class BrokenPolicy(ActivationPolicy):
    def decide(self, facts: ActivationFacts) -> ActivationDecision:
        raise RuntimeError("policy bug")


def test_memory_write_reports_the_activation_and_audits_it(world: World) -> None:
    world.say("user", SAYS)
    result = write(world)
    assert result["activation"] == "ambient"
    assert result["activation_reason"] == "a communication fact the user stated about themselves"
    [event] = world.events("record.activation")
    assert event["record_id"] == result["record_id"] and event["actor"] == AGENT
    assert event["payload"] | {"origin": "tool"} == event["payload"]
    assert event["payload"]["rule"] == "eligible" and event["payload"]["previous"] is None
    assert profile_ids(world, "s2") == (result["record_id"],)


def test_an_inference_is_reported_conditional_and_stays_out(world: World) -> None:
    result = write(world, source_kind="agent_inference", evidence=None)
    assert result["activation"] == "conditional"
    assert "inference" in result["activation_reason"]
    assert profile_ids(world, "s2") == ()


def test_a_policy_failure_leaves_the_write_standing_and_conditional(world: World) -> None:
    world.say("user", SAYS)
    world.rt.__dict__["activator"] = Activator(world.rt.store, BrokenPolicy(ActivationConfig()), world.clock)
    result = write(world)
    assert result["outcome"] == "created" and result["status"] == "confirmed"
    assert result["activation"] == "conditional"
    assert world.record(result["record_id"]).content == PREFERENCE["content"]
    [skipped] = world.events("record.activation_skipped")
    assert skipped["record_id"] == result["record_id"]
    assert skipped["payload"] == {"origin": "tool", "error": "RuntimeError", "activation": "conditional"}
    assert world.rt.store.activation_of(result["record_id"]).activation == "conditional"  # type: ignore[union-attr]
    assert profile_ids(world, "s2") == ()


def test_extraction_judges_each_record_after_its_commit(world: World) -> None:
    world.say("user", SAYS)
    world.say("assistant", "Understood, and I will suggest tea with every break.")
    world.rt.hooks.on_session_end(world.p)
    candidates = [
        CandidateRecord("semantic", "Aditya wants answers in British English.", "answer_language",
                        "user_statement", "always answer me in British English", 1, []),
        CandidateRecord("semantic", "Aditya probably likes tea.", "drink", "agent_inference",
                        "I will suggest tea with every break", 2, []),
    ]
    summary = SessionSummary("Answers in British English.", [], [])
    extractor = FakeExtractor(ExtractionOutput(candidates, summary))
    result = world.rt.session_end.using(extractor, TableReviewer()).run("s1")
    assert result.outcome == "extracted"
    events = world.events("record.activation")
    assert [(e["payload"]["activation"], e["actor"], e["payload"]["origin"]) for e in events] == [
        ("ambient", "extractor", "extraction"), ("conditional", "extractor", "extraction")]
    # Each activation event comes after the run's own event: the policy ran after the commit.
    run = world.events("extraction.run")[-1]
    assert all(e["id"] > run["id"] for e in events)
    assert len(profile_ids(world, "s2")) == 1


def test_supersession_removes_the_old_fact_and_the_successor_is_judged_afresh(world: World) -> None:
    world.say("user", SAYS)
    first = write(world)
    world.clock.advance(minutes=5)
    world.say("user", "Change of plan: for this report only, use American English.")
    second = write(world, content="For this report only, Aditya wants American English.",
                   evidence="for this report only, use American English")
    assert second["outcome"] == f"superseded:{first['record_id']}"
    assert second["activation"] == "conditional" and "task" in second["activation_reason"]
    assert profile_ids(world, "s2") == ()  # neither the superseded fact nor its task-bound successor


def test_forget_expire_and_erase_remove_a_fact_from_the_next_profile(world: World) -> None:
    world.say("user", SAYS)
    world.say("user", "I'm strictly vegetarian, and I use vim for everything.")
    ids = [write(world)["record_id"],
           write(world, content="Aditya is vegetarian.", attribute="diet",
                 evidence="I'm strictly vegetarian")["record_id"],
           write(world, content="Aditya uses vim.", attribute="editor",
                 evidence="I use vim for everything")["record_id"]]
    assert profile_ids(world, "s2") == tuple(ids)
    tools = world.rt.tools
    assert tools.call("memory_forget", world.p, {"id": ids[0], "reason": "user asked"})["status"] == "deleted"
    assert tools.call("memory_revise", world.p, {"id": ids[1], "action": "expire",
                                                 "reason": "no longer true"})["status"] == "expired"
    assert profile_ids(world, "s3") == (ids[2],)
    world.rt.operations.erase_record(ids[2], actor="admin", reason="request")
    assert profile_ids(world, "s4") == ()
    # A block that showed an erased record keeps its ids and size, never its text.
    assert world.rt.store.profile_block("s3").text == ""  # type: ignore[union-attr]
    assert world.rt.store.profile_block("s2").text == ""  # type: ignore[union-attr]
    assert world.rt.store.activation_of(ids[2]) is None


def test_a_persons_decision_is_not_judged_again(world: World) -> None:
    world.say("user", SAYS)
    result = write(world)
    world.rt.activator.set_manually(result["record_id"], "conditional", resolver="ops", reason="too broad")
    world.say("user", "Again: always answer me in British English.")
    again = write(world, evidence="Again: always answer me in British English")
    assert again["outcome"] == "reinforced" and again["record_id"] == result["record_id"]
    assert again["activation"] == "conditional" and again["activation_reason"] == "too broad"
