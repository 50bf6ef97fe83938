"""The hosted planner and judge through the real Anthropic SDK and a loopback stub: what
they send, what they accept, and that a bad or late answer fails the turn closed."""

from __future__ import annotations

from pathlib import Path

import pytest

from retold.hosted import AnthropicClient, HostedError
from retold.ingest.session import InProcessScheduler
from retold.runtime import build_runtime
from retold.testing import AGENT, World
from retold.testing.anthropic_stub import AnthropicStub, tool_use
from retold.utility.admission import ADMISSION_PROMPT_VERSION, AdmissionInput, HostedAdmissionJudge, Shown
from retold.utility.decision import Gap
from retold.utility.planner import PLANNER_PROMPT_VERSION, HostedGapPlanner, PlannerInput

MODEL = "claude-haiku-4-5-20251001"
TURN = "Suggest a dinner recipe I could cook tonight."


def _client(stub: AnthropicStub) -> AnthropicClient:
    client = AnthropicClient(MODEL, "test-key", base_url=stub.base_url, max_retries=0)
    client.prepare()
    return client


def test_the_planner_sends_the_turn_and_profile_and_reads_gaps(anthropic_stub: AnthropicStub) -> None:
    anthropic_stub.script(tool_use({"gaps": [
        {"need": "what the user does not eat", "query": "diet restrictions", "category": "diet"},
        {"need": "allergies", "query": "food allergies", "category": "health"},
        {"need": "cooking skill", "query": "cooking level", "category": ""}]}))
    planner = HostedGapPlanner(_client(anthropic_stub), 512)
    gaps = planner.plan(PlannerInput(TURN, "user: hi", "Maya answers in English.", 2), 10_000)
    assert gaps == [Gap("what the user does not eat", "diet restrictions", "diet"),
                    Gap("allergies", "food allergies", "health")]  # cut to max_gaps
    (sent,) = anthropic_stub.requests
    shown = sent["messages"][0]["content"]
    shown = shown if isinstance(shown, str) else shown[0]["text"]
    assert TURN in shown and "Maya answers in English." in shown and "user: hi" in shown
    assert "at most 2 gaps" in str(sent["system"])
    assert planner.version == f"{MODEL}/{PLANNER_PROMPT_VERSION}"


def test_a_gap_without_a_query_is_malformed(anthropic_stub: AnthropicStub) -> None:
    anthropic_stub.script(tool_use({"gaps": [{"need": "diet", "category": "diet"}]}))
    with pytest.raises(HostedError) as caught:
        HostedGapPlanner(_client(anthropic_stub), 512).plan(PlannerInput(TURN, "", "", 3), 10_000)
    assert caught.value.kind == "malformed"


def test_the_judge_keeps_candidate_order_and_refuses_an_invented_id(anthropic_stub: AnthropicStub) -> None:
    shown = [Shown("r1", "Maya is vegetarian."), Shown("r2", "Maya likes jazz.")]
    asked = AdmissionInput(TURN, "Try a salmon teriyaki.", [Gap("diet", "diet")], shown)
    anthropic_stub.script(tool_use({"verdicts": [
        {"id": "r1", "effect": "contradicts", "reason": "salmon is fish"}]}))
    judge = HostedAdmissionJudge(_client(anthropic_stub), 512)
    verdicts = judge.judge(asked, 10_000)
    assert [(v.record_id, v.effect) for v in verdicts] == [("r1", "contradicts"), ("r2", "not_needed")]
    assert "Try a salmon teriyaki." in str(anthropic_stub.requests[0]["messages"])
    assert judge.version == f"{MODEL}/{ADMISSION_PROMPT_VERSION}"
    anthropic_stub.script(tool_use({"verdicts": [{"id": "r9", "effect": "fills", "reason": "made up"}]}))
    with pytest.raises(HostedError) as caught:
        judge.judge(asked, 10_000)
    assert caught.value.kind == "malformed"


@pytest.mark.parametrize("answer", ["malformed", "late"])
def test_a_bad_or_late_planner_answer_serves_the_draft(world: World, tmp_path: Path,
                                                      anthropic_stub: AnthropicStub, answer: str) -> None:
    config = world.rt.config.replace({"retrieval": {"trigger": {"mode": "hybrid"}},
                                      "utility": {"enabled": True, "timeout_ms": 400}})
    client = _client(anthropic_stub)
    rt = build_runtime(config, clock=world.clock, embedder=world.embedder, judge=world.judge,
                       scheduler=InProcessScheduler(), environ={},
                       planner=HostedGapPlanner(client, 512), admission=HostedAdmissionJudge(client, 512))
    anthropic_stub.script(tool_use({"gaps": "none"}) if answer == "malformed"
                          else tool_use({"gaps": []}, delay_s=2.0))
    with rt.session(AGENT, "aditya", session_id="chat") as s:
        s.say("user", TURN)
        assert s.respond(lambda recalled: "the draft") == "the draft"
        decision = s.last_decision
    assert decision is not None and decision.disposition == "failed" and decision.failed_stage == "planner"
    assert ("malformed" if answer == "malformed" else "timeout") in (decision.error or "")
    assert decision.timings_ms["total"] < 1500
    rt.close()


def test_a_decided_turn_counts_its_hosted_calls_and_tokens(world: World,
                                                           anthropic_stub: AnthropicStub) -> None:
    config = world.rt.config.replace({"retrieval": {"trigger": {"mode": "hybrid"}},
                                      "utility": {"enabled": True}})
    client = _client(anthropic_stub)
    rt = build_runtime(config, clock=world.clock, embedder=world.embedder, judge=world.judge,
                       scheduler=InProcessScheduler(), environ={},
                       planner=HostedGapPlanner(client, 512), admission=HostedAdmissionJudge(client, 512))
    anthropic_stub.script(tool_use({"gaps": []}))
    with rt.session(AGENT, "aditya", session_id="chat") as s:
        s.say("user", TURN)
        s.respond(lambda recalled: "the draft")
    (stored,) = rt.store.turn_decisions("chat")
    # The stub reports 42 input and 17 output tokens an answer.
    assert (stored["disposition"], stored["hosted_calls"], stored["hosted_tokens"]) == ("no_gap", 1, 59)
    rt.close()
