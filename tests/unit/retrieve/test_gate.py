"""The gate: one answer-or-abstain decision per search, then the tail cut, nothing else."""

from __future__ import annotations

import math

import pytest

from retold.config import GateConfig, PerTrigger, SignalWeights
from retold.models import Candidate, QueryShape
from retold.retrieve.gate import answer_score, decide, gate
from retold.retrieve.signals import Signals, measure

GATE = GateConfig(weights=SignalWeights(beyond_names=10.0, asked_coverage=2.0, unknown_name=-6.0, lead=4.0),
                  bias=-5.0, answer_at=PerTrigger(tool=0.3, host=0.8),
                  tail_fraction=PerTrigger(tool=0.25, host=0.5))
CLOSE = Signals(dense=0.7, beyond_names=0.6, asked_coverage=0.5, unknown_name=0.0, lead=0.1)
FAR = Signals(dense=0.3, beyond_names=0.2, asked_coverage=0.0, unknown_name=0.0, lead=0.01)


def candidates(*scores: float) -> list[Candidate]:
    return [Candidate(f"r{i}", fused_score=s, score=s, fused_rank=i) for i, s in enumerate(scores, 1)]


KINDS = {f"r{i}": "user_statement" for i in range(1, 10)}


def test_the_score_is_the_logistic_of_the_weighted_signals() -> None:
    # 10 * 0.6 + 2 * 0.5 + 4 * 0.1 - 5 = 2.4; the plain cosine does not count.
    assert answer_score(CLOSE, GATE) == pytest.approx(1 / (1 + math.exp(-2.4)))
    assert answer_score(Signals(dense=0.99, beyond_names=0.6, asked_coverage=0.5, lead=0.1), GATE) == \
        answer_score(CLOSE, GATE)
    # An unknown name weighs against answering, whatever else is close.
    unknown = Signals(beyond_names=0.6, asked_coverage=0.5, unknown_name=1.0, lead=0.1)
    assert answer_score(unknown, GATE) < 0.05


def test_each_trigger_answers_on_its_own_threshold() -> None:
    middling = Signals(beyond_names=0.5, asked_coverage=0.5, lead=0.05)  # 10*0.5 + 1 + 0.2 - 5 = 1.2: 0.77
    assert decide(middling, GATE, "tool").answered
    assert not decide(middling, GATE, "host").answered
    assert decide(middling, GATE, "host").threshold == 0.8
    assert not decide(FAR, GATE, "tool").answered


def test_a_deferred_decision_always_answers_and_says_the_cross_encoder_judges() -> None:
    deferred = decide(FAR, GATE, "tool", deferred=True)
    assert deferred.answered and deferred.reason() == "relevance is left to the cross-encoder"
    result = gate(candidates(1.0, 0.01), deferred, KINDS, GATE.tail_fraction.tool)
    assert [c.record_id for c in result.kept] == ["r1", "r2"]  # no tail cut either


def test_an_abstaining_search_keeps_nothing_and_says_why() -> None:
    decision = decide(FAR, GATE, "tool")
    result = gate(candidates(1.0, 0.9), decision, KINDS, GATE.tail_fraction.tool)
    assert result.kept == [] and result.empty_reason == decision.reason()
    reason = decision.reason()
    assert reason.startswith("nothing stored answers this: score 0.05 < 0.30 (tool search); "
                             "best dense score 0.30")
    assert "0.20 beyond the question's names" in reason and "0% of the asked words" in reason
    unknown = decide(Signals(unknown_name=1.0), GATE, "tool").reason()
    assert unknown.endswith("the question names something no readable record carries")


def test_the_tail_cut_drops_only_what_falls_below_its_share_of_the_top_and_keeps_the_order() -> None:
    decision = decide(CLOSE, GATE, "tool")
    result = gate(candidates(2.0, 1.9, 0.6, 0.49, 0.2), decision, KINDS, GATE.tail_fraction.tool)
    assert [c.record_id for c in result.kept] == ["r1", "r2", "r3"]
    assert result.cut == [("r4", "tail: score 0.490 < 0.500 (0.25 x top 2.000)"),
                          ("r5", "tail: score 0.200 < 0.500 (0.25 x top 2.000)")]
    assert result.kept[2].gate_reason == "kept: score 0.600 >= 0.500 (0.25 x top 2.000)"
    assert result.empty_reason is None


def test_a_host_issued_search_never_takes_a_session_summary() -> None:
    decision = decide(Signals(beyond_names=0.9, asked_coverage=1.0, lead=0.3), GATE, "host")
    assert decision.answered
    kinds = {"r1": "session_summary", "r2": "user_statement", "r3": "agent_inference"}
    result = gate(candidates(2.0, 1.5, 0.5), decision, kinds, GATE.tail_fraction.host)
    # The summary goes first, and the tail is measured from the best record left.
    assert [c.record_id for c in result.kept] == ["r2"]
    assert ("r1", "a session_summary (host-issued search)") in result.cut
    only = gate(candidates(2.0), decision, {"r1": "session_summary"}, GATE.tail_fraction.host)
    assert only.kept == [] and only.empty_reason is not None and "session summary" in only.empty_reason
    tool = gate(candidates(2.0, 1.5), decide(CLOSE, GATE, "tool"), kinds, GATE.tail_fraction.tool)
    assert [c.record_id for c in tool.kept] == ["r1", "r2"]


def test_no_candidate_at_all_says_so() -> None:
    result = gate([], decide(FAR, GATE, "tool"), {}, 0.25)
    assert result.kept == [] and result.empty_reason == "no candidate from any channel among readable records"


def test_signals_read_the_fused_candidates() -> None:
    from retold.models import GeneratorHit, LexicalMatch, LexicalTerm

    def term(value: str, name: bool = False) -> LexicalTerm:
        return LexicalTerm(value, False, name, name)

    a = Candidate("a", dense=GeneratorHit(1, 0.8), beyond_names=0.5,
                  lexical_terms=LexicalMatch((term("oskar", True), term("allergic")), 3, 1))
    b = Candidate("b", dense=GeneratorHit(2, 0.7), beyond_names=0.2,
                  lexical_terms=LexicalMatch((term("allergic"), term("food")), 3, 1))  # lacks the name
    signals = measure([a, b], QueryShape(asks=True, name_groups=(("oskar",),)))
    assert signals == Signals(dense=0.8, beyond_names=0.5, asked_coverage=0.5, unknown_name=0.0, lead=0.3)
    # Without names nothing is projected out: the plain cosines count, and every record.
    plain = measure([Candidate("a", dense=GeneratorHit(1, 0.6)), Candidate("b", dense=GeneratorHit(2, 0.5))],
                    QueryShape(asks=True, unknown_names=("zebedee",)))
    assert plain == Signals(dense=0.6, beyond_names=0.6, asked_coverage=0.0, unknown_name=1.0,
                            lead=pytest.approx(0.1))
