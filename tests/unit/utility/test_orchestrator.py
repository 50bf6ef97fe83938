"""Host-issued memory decided by need: every way a turn can end, and failing closed.

Each test drives ``MemorySession.respond`` on a real store with the scripted planner and
judge at the model boundary, and a host model that is a plain function recording what it
was asked.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from retold.hosted import HostedError
from retold.ingest.session import InProcessScheduler
from retold.models import SearchRequest
from retold.policy.prompt import RECALLED_HEADER
from retold.retrieve.replay import replay
from retold.runtime import Runtime, build_runtime
from retold.testing import AGENT, Gap, ScriptedJudge, ScriptedPlanner, World

VIM = "Aditya edits code in vim with his own key bindings."
EDITOR_GAP = {"editor": [Gap("which editor the user uses", "editor vim code")]}


class HostModel:
    """The host's model: a draft without memory, a different reply once memory is shown."""

    def __init__(self, *, regenerate: Any = "Use your vim bindings: press gg=G.") -> None:
        self.asked: list[str | None] = []
        self._regenerate = regenerate

    def __call__(self, recalled: str | None) -> str:
        self.asked.append(recalled)
        if recalled is None:
            return "Most editors reformat with a menu command."
        if isinstance(self._regenerate, BaseException):
            raise self._regenerate
        if callable(self._regenerate):
            return str(self._regenerate())
        return str(self._regenerate)


@pytest.fixture
def runtimes(world: World) -> Iterator[list[Runtime]]:
    built: list[Runtime] = []
    yield built
    for rt in built:
        rt.close()


def utility_runtime(world: World, runtimes: list[Runtime], planner: ScriptedPlanner | None,
                    judge: ScriptedJudge | None, mode: str = "hybrid", gate: dict[str, Any] | None = None,
                    **utility: Any) -> Runtime:
    """A runtime over the world's store with the orchestrator on."""
    config = world.rt.config.replace({"retrieval": {"trigger": {"mode": mode}, "gate": gate or {}},
                                      "utility": {"enabled": True, **utility}})
    rt = build_runtime(config, clock=world.clock, embedder=world.embedder, judge=world.judge,
                       scheduler=InProcessScheduler(), environ={}, planner=planner, admission=judge)
    runtimes.append(rt)
    return rt


def ask(rt: Runtime, model: HostModel,
        text: str = "How do I reformat this file in my editor?") -> tuple[str, Any]:
    s = rt.session(AGENT, "aditya", session_id="chat")
    s.say("user", text)
    reply = s.respond(model)
    return reply, s


def test_an_ordinary_turn_has_no_gap_searches_nothing_and_serves_the_draft(
        world: World, runtimes: list[Runtime]) -> None:
    world.write(content=VIM, attribute="editor")
    rt = utility_runtime(world, runtimes, ScriptedPlanner(EDITOR_GAP), ScriptedJudge({"vim": "fills"}))
    model = HostModel()
    reply, s = ask(rt, model, "What is the capital of France?")
    assert reply == "Most editors reformat with a menu command." and model.asked == [None]
    decision = s.last_decision
    assert decision.disposition == "no_gap" and decision.searches == []
    rt.flush_search_log()
    assert rt.store.search_log_rows() == []
    assert [d["disposition"] for d in rt.store.turn_decisions("chat")] == ["no_gap"]
    # The served reply is the session's assistant turn.
    assert [t.content for t in rt.store.turns("chat")][-1] == reply


def test_admitted_records_are_shadowed_until_the_bundle_has_a_recorded_pass(world: World,
                                                                          runtimes: list[Runtime]) -> None:
    written = world.write(content=VIM, attribute="editor")
    rt = utility_runtime(world, runtimes, ScriptedPlanner(EDITOR_GAP), ScriptedJudge({"vim": "fills"}))
    model = HostModel()
    reply, s = ask(rt, model)
    assert s.last_decision.disposition == "shadow"
    assert s.last_decision.admitted == [written.record_id]
    assert reply.startswith("Most editors") and model.asked == [None]  # the draft, one model call

    orchestrator = rt.orchestrator
    assert orchestrator is not None
    rt.store.record_bundle_result(orchestrator.bundle, orchestrator.components, passed=True,
                                  evidence="utility_bench: pollution 0/20", by="ops")
    model = HostModel()
    reply, s = ask(rt, model)
    assert reply == "Use your vim bindings: press gg=G."
    assert s.last_decision.disposition == "regenerated"
    assert model.asked[0] is None and model.asked[1] is not None
    block = model.asked[1]
    assert block.startswith(RECALLED_HEADER) and VIM in block and "fills a gap" in block
    stored = rt.store.turn_decisions("chat")[0]
    assert stored["disposition"] == "regenerated"
    assert [v["record_id"] for v in stored["verdicts"]] == [written.record_id]
    assert stored["gaps"][0]["query"] == "editor vim code" and len(stored["searches"]) == 1
    rt.flush_search_log()
    logged = rt.store.search_log_row(stored["searches"][0])
    assert logged is not None and logged["trigger"] == "host"

    # A failure recorded later takes the permission back.
    rt.store.record_bundle_result(orchestrator.bundle, orchestrator.components, passed=False,
                                  evidence="rollback check breached", by="ops")
    model = HostModel()
    ask(rt, model)
    assert model.asked == [None]


def test_gap_searches_read_their_list_recall_first_and_are_logged_as_host(
        world: World, runtimes: list[Runtime]) -> None:
    world.write(content=VIM, attribute="editor")
    # A host-issued threshold nothing reaches: shown unasked, nothing would be.
    strict = {"answer_at": {"host": 1.0, "tool": 0.5}}
    rt = utility_runtime(world, runtimes, ScriptedPlanner(EDITOR_GAP), ScriptedJudge({"vim": "fills"}),
                         gate=strict)
    p = rt.session(AGENT, "aditya", session_id="probe").principal
    unasked = rt.tools.search(p, SearchRequest(queries=["editor vim code"], trigger="host"))
    assert unasked["results"] == []
    _, s = ask(rt, HostModel())
    assert s.last_decision.disposition == "shadow" and s.last_decision.candidates
    rt.flush_search_log()
    row = rt.store.search_log_row(s.last_decision.searches[0])
    assert row is not None and row["trigger"] == "host" and json.loads(row["request"])["judged"] is True
    assert json.loads(row["decision"])["threshold"] == 0.5
    # Replayed, it reads as it was read: recall first.
    assert replay(row, rt.config.retrieval.gate).decision.threshold == 0.5


def test_a_candidate_the_draft_does_not_need_is_not_admitted(world: World, runtimes: list[Runtime]) -> None:
    world.write(content=VIM, attribute="editor")
    judge = ScriptedJudge({})
    rt = utility_runtime(world, runtimes, ScriptedPlanner(EDITOR_GAP), judge)
    model = HostModel()
    reply, s = ask(rt, model)
    assert s.last_decision.disposition == "none_admitted" and reply.startswith("Most editors")
    assert judge.calls[0].draft == reply  # the judge saw the draft it was judging against
    assert s.last_decision.candidates and s.last_decision.admitted == []


def test_a_gap_whose_search_finds_nothing_ends_without_asking_the_judge(world: World,
                                                                        runtimes: list[Runtime]) -> None:
    judge = ScriptedJudge({"vim": "fills"})
    rt = utility_runtime(world, runtimes, ScriptedPlanner(EDITOR_GAP), judge)
    _, s = ask(rt, HostModel())
    assert s.last_decision.disposition == "no_candidates" and judge.calls == []


def test_a_short_turn_is_skipped_without_a_hosted_call(world: World, runtimes: list[Runtime]) -> None:
    planner = ScriptedPlanner(EDITOR_GAP)
    rt = utility_runtime(world, runtimes, planner, ScriptedJudge())
    _, s = ask(rt, HostModel(), "ok")
    assert s.last_decision.disposition == "skipped" and planner.calls == []


@pytest.mark.parametrize("failure", ["planner", "judge", "regeneration", "empty regeneration"])
def test_any_failure_serves_the_draft_and_names_the_stage(world: World, runtimes: list[Runtime],
                                                         failure: str) -> None:
    world.write(content=VIM, attribute="editor")
    broken = HostedError("malformed", "answer does not match the schema")
    planner = ScriptedPlanner({"editor": broken} if failure == "planner" else EDITOR_GAP)
    judge = ScriptedJudge({"vim": "fills"}, error=broken if failure == "judge" else None)
    rt = utility_runtime(world, runtimes, planner, judge)
    orchestrator = rt.orchestrator
    assert orchestrator is not None
    rt.store.record_bundle_result(orchestrator.bundle, orchestrator.components, passed=True,
                                  evidence="test", by="ops")
    regenerate: Any = {"regeneration": RuntimeError("model overloaded"),
                       "empty regeneration": "  "}.get(failure, "with memory")
    reply, s = ask(rt, HostModel(regenerate=regenerate))
    assert reply == "Most editors reformat with a menu command."
    stage = {"judge": "admission", "empty regeneration": "regeneration"}.get(failure, failure)
    assert s.last_decision.disposition == "failed" and s.last_decision.failed_stage == stage
    assert rt.store.turn_decisions("chat")[0]["failed_stage"] == stage


def test_no_hosted_model_fails_closed_on_every_turn(world: World, runtimes: list[Runtime]) -> None:
    rt = utility_runtime(world, runtimes, None, None)  # no key in the world's environment
    reply, s = ask(rt, HostModel())
    assert reply.startswith("Most editors")
    decision = s.last_decision
    assert decision.disposition == "failed" and decision.failed_stage == "planner"
    assert "not_configured" in (decision.error or "")


def test_the_whole_decision_is_bounded_by_its_timeout(world: World, runtimes: list[Runtime]) -> None:
    world.write(content=VIM, attribute="editor")
    rt = utility_runtime(world, runtimes, ScriptedPlanner(EDITOR_GAP), ScriptedJudge({"vim": "fills"}),
                         timeout_ms=300)
    orchestrator = rt.orchestrator
    assert orchestrator is not None
    rt.store.record_bundle_result(orchestrator.bundle, orchestrator.components, passed=True,
                                  evidence="test", by="ops")
    started = time.perf_counter()
    reply, s = ask(rt, HostModel(regenerate=lambda: time.sleep(3) or "late reply"))
    waited = time.perf_counter() - started
    assert reply.startswith("Most editors") and waited < 2.5
    assert s.last_decision.failed_stage == "regeneration" and "timeout" in (s.last_decision.error or "")

    slow = utility_runtime(world, runtimes, ScriptedPlanner(EDITOR_GAP, delay_s=0.5), ScriptedJudge(),
                           timeout_ms=300)
    _, s = ask(slow, HostModel())
    assert s.last_decision.disposition == "failed" and s.last_decision.failed_stage == "planner"


def test_tool_only_answers_once_with_no_decision(world: World, runtimes: list[Runtime]) -> None:
    rt = utility_runtime(world, runtimes, ScriptedPlanner(EDITOR_GAP), ScriptedJudge(), mode="tool_only")
    assert rt.orchestrator is None
    model = HostModel()
    _, s = ask(rt, model)
    assert model.asked == [None] and s.last_decision is None
    assert rt.store.turn_decisions() == []


def test_erasure_and_retention_remove_turn_decisions(world: World, runtimes: list[Runtime]) -> None:
    rt = utility_runtime(world, runtimes, ScriptedPlanner(EDITOR_GAP), ScriptedJudge())
    ask(rt, HostModel())
    other = rt.session(AGENT, "aditya", session_id="second")
    other.say("user", "Which editor should I set up on the new laptop?")
    other.respond(HostModel())
    assert len(rt.store.turn_decisions()) == 2
    erased = rt.store.erase_session("chat", "ops", "asked to")
    assert erased.counts["turn_decisions"] == 1
    assert [d["session_id"] for d in rt.store.turn_decisions()] == ["second"]
    world.clock.advance(timedelta(days=rt.config.retention.search_log_days + 1))
    assert rt.operations.retain().turn_decisions_deleted == 1
    assert rt.store.turn_decisions() == []
    ask(rt, HostModel())
    assert rt.store.erase_user("aditya", "ops", "asked to").counts["turn_decisions"] == 1
    assert rt.store.row_counts()["turn_decisions"] == 0
