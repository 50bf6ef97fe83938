"""The scripted conversation every agent-framework adapter must get right, and the store
state it must leave behind.

The script is framework-neutral data: what the user says, the tool calls a scripted
model makes (in order, with their arguments), and the reply that closes each exchange.
An adapter test drives its framework with a fake model that plays these calls, ends
the session, and then calls :func:`assert_contract`. Because every adapter goes through
the same ``MemorySession``, two adapters that pass leave records that compare equal
field by field through :func:`semantic_records` (:func:`drive_session` produces the
reference without any framework).

The conversation: the user states an answer-style preference and the model saves it
with a verbatim quote; the user mentions their editor and the model saves that too; the
user corrects the preference and the model supersedes the first record; the model
searches; the user asks to forget the editor and the model forgets it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from retold.adapters.base import MemorySession
from retold.config import read_config
from retold.hosted import HostedError
from retold.models import Scope
from retold.policy.prompt import RECALLED_HEADER
from retold.runtime import Runtime, build_runtime
from retold.testing import (
    T0,
    TEST_GATE,
    FakeEmbedder,
    FakeJudge,
    Gap,
    InProcessScheduler,
    ManualClock,
    ScriptedJudge,
    ScriptedPlanner,
)
from retold.testing.scripted import Exchange, FromResult, ToolCall, resolve

__all__ = [
    "AGENT_ID",
    "CONVERSATION",
    "EXPECTED_RECORDS",
    "USER_ID",
    "UTILITY_SCRIPT",
    "UTILITY_SERVED",
    "Exchange",
    "FromResult",
    "ToolCall",
    "assert_contract",
    "assert_utility_contract",
    "drive_utility",
    "drive_session",
    "expected_turns",
    "resolve",
    "semantic_records",
    "utility_runtime",
]

AGENT_ID = "research-agent"
USER_ID = "aditya"


STYLE_QUOTE = "keep every answer short and technical"
EDITOR_QUOTE = "my editor is vim"
CORRECTION_QUOTE = "I now prefer detailed answers with examples"

CONVERSATION: tuple[Exchange, ...] = (
    Exchange(
        user="Please keep every answer short and technical.",
        calls=(ToolCall("call_write_style", "memory_write", {
            "type": "semantic", "content": "Aditya prefers short technical answers.",
            "attribute": "answer_style", "source_kind": "user_statement", "evidence": STYLE_QUOTE,
        }),),
        reply="Noted: short and technical from now on.",
    ),
    Exchange(
        user="Also, my editor is vim, in case setup scripts need it.",
        calls=(ToolCall("call_write_editor", "memory_write", {
            "type": "semantic", "content": "Aditya edits code in vim.", "attribute": "editor",
            "source_kind": "user_statement", "evidence": EDITOR_QUOTE,
        }),),
        reply="Got it, vim it is.",
    ),
    Exchange(
        user="Correction: I now prefer detailed answers with examples.",
        calls=(ToolCall("call_supersede_style", "memory_revise", {
            "id": FromResult("call_write_style", "record_id"), "action": "supersede",
            "content": "Aditya prefers detailed answers with examples.",
            "source_kind": "user_statement", "evidence": CORRECTION_QUOTE,
            "reason": "The user corrected their answer style.",
        }),),
        reply="Updated: detailed answers with examples.",
    ),
    Exchange(
        user="What do you remember about how I like my answers?",
        calls=(ToolCall("call_search_style", "memory_search", {
            "queries": ["Aditya answer style preference"],
        }),),
        reply="You prefer detailed answers with examples.",
    ),
    Exchange(
        user="Please forget that I use vim.",
        calls=(ToolCall("call_forget_editor", "memory_forget", {
            "id": FromResult("call_write_editor", "record_id"),
            "reason": "The user asked to forget their editor.",
        }),),
        reply="Done, I no longer remember your editor.",
    ),
)



def contract_runtime(tmp_path: Path, mode: str = "tool_only", **trigger: Any) -> Runtime:
    """A runtime over a store under ``tmp_path`` with fakes at the model boundaries, the
    contract's agent granted the user's scope and the user provisioned; ``mode`` and
    ``trigger`` set ``retrieval.trigger``."""
    config = read_config(overrides={
        "store": {"path": str(tmp_path / "memory.sqlite")},
        "embedding": {"model": "fake"},
        "retrieval": {"gate": TEST_GATE, "trigger": {"mode": mode, **trigger}},
    })
    # Ended sessions are recorded, not published: the contract is about the adapter.
    rt = build_runtime(config, clock=ManualClock(T0), embedder=FakeEmbedder(), judge=FakeJudge(),
                       scheduler=InProcessScheduler(), environ={})
    rt.host.grant(AGENT_ID, Scope("user", USER_ID), read=True, write=True)
    rt.host.provision_user(USER_ID, aliases=["Aditya"])
    return rt


def expected_turns() -> list[tuple[str, str | None]]:
    """The recorded turns, in order: each user message, one tool turn per call (None:
    its text depends on record ids) and the reply. A model step that only calls a tool
    has no text and records no assistant turn."""
    turns: list[tuple[str, str | None]] = []
    for exchange in CONVERSATION:
        turns.append(("user", exchange.user))
        turns += [("tool", None) for _ in exchange.calls]
        turns.append(("assistant", exchange.reply))
    return turns


def drive_session(session: MemorySession) -> None:
    """Play the script through a bare ``MemorySession``: the reference an adapter's
    store state is compared with."""
    results: dict[str, str] = {}
    for exchange in CONVERSATION:
        session.say("user", exchange.user)
        for call in exchange.calls:
            result = session.call(call.name, resolve(call.args, results))
            results[call.id] = session.text(call.name, result)
            session.say("tool", results[call.id])
        session.say("assistant", exchange.reply)
    session.end()


def semantic_records(rt: Runtime, user_id: str = USER_ID) -> list[dict[str, Any]]:
    """The user's semantic records in store order, in a form two runs can compare: ids
    and timestamps left out, the subject named by its entity's canonical name, the
    superseded record by its content and the source by its turn number."""
    records = rt.store.find_records(scopes=[Scope("user", user_id)])
    content_of = {r.id: r.content for r in records}
    out: list[dict[str, Any]] = []
    for r in records:
        if r.type != "semantic":
            continue
        entity = rt.store.get_entity(r.subject_entity_id) if r.subject_entity_id else None
        subject = f"{entity.canonical}/{r.attribute}" if entity else r.subject
        turn = r.source_ref.rsplit("<turn:", 1)[-1].rstrip(">") if r.source_ref else None
        out.append({
            "content": r.content, "attribute": r.attribute, "status": r.status,
            "source_kind": r.source_kind, "evidence": r.evidence, "subject": subject,
            "supersedes": content_of.get(r.supersedes_id) if r.supersedes_id else None,
            "source_turn": int(turn) if turn else None, "creator": r.creator_agent_id,
        })
    return out


EXPECTED_RECORDS: list[dict[str, Any]] = [
    {"content": "Aditya prefers short technical answers.", "attribute": "answer_style",
     "status": "superseded", "source_kind": "user_statement", "evidence": STYLE_QUOTE,
     "subject": "aditya/answer_style", "supersedes": None, "source_turn": 1, "creator": AGENT_ID},
    {"content": "Aditya edits code in vim.", "attribute": "editor", "status": "deleted",
     "source_kind": "user_statement", "evidence": EDITOR_QUOTE, "subject": "aditya/editor",
     "supersedes": None, "source_turn": 4, "creator": AGENT_ID},
    {"content": "Aditya prefers detailed answers with examples.", "attribute": "answer_style",
     "status": "confirmed", "source_kind": "user_statement", "evidence": CORRECTION_QUOTE,
     "subject": "aditya/answer_style", "supersedes": "Aditya prefers short technical answers.",
     "source_turn": 7, "creator": AGENT_ID},
]


def assert_contract(rt: Runtime, agent_id: str, user_id: str, session_id: str) -> None:
    """Check what the scripted conversation left in the store for this principal."""
    _assert_turns(rt, session_id)
    records = semantic_records(rt, user_id)
    assert records == [dict(r, creator=agent_id) for r in EXPECTED_RECORDS], records
    _assert_events(rt, agent_id, user_id)
    assert rt.flush_search_log()
    searches = [row for row in rt.store.search_log_rows() if row["session_id"] == session_id]
    assert [(row["trigger"], row["agent_id"], row["user_id"]) for row in searches] == [
        ("tool", agent_id, user_id)]
    assert json.loads(searches[0]["request"])["queries"] == ["Aditya answer style preference"]
    session = rt.store.get_session(session_id)
    assert session is not None and session.ended_at is not None, "the session was not ended"


def _assert_turns(rt: Runtime, session_id: str) -> None:
    turns = rt.store.turns(session_id)
    expected = expected_turns()
    got = [(t.role, t.content) for t in turns]
    # Every turn once and in order, however often the framework replayed the history.
    assert [n.turn for n in turns] == list(range(1, len(turns) + 1))
    assert [role for role, _ in got] == [role for role, _ in expected], got
    calls = [call for exchange in CONVERSATION for call in exchange.calls]
    tool_texts = [content for role, content in got if role == "tool"]
    for (role, content), (_, want) in zip(got, expected, strict=True):
        if want is not None:
            assert (role, content) == (role, want)
    for call, text in zip(calls, tool_texts, strict=True):
        assert text, f"{call.id}: empty tool turn"
        if call.name == "memory_search":
            assert "Aditya prefers detailed answers with examples." in text
            assert "short technical answers" not in text  # superseded: not served
        else:
            assert "error" not in json.loads(text), f"{call.id}: {text}"


def _assert_events(rt: Runtime, agent_id: str, user_id: str) -> None:
    ids = {r.content: r.id for r in rt.store.find_records(scopes=[Scope("user", user_id)])}
    old, editor = ids["Aditya prefers short technical answers."], ids["Aditya edits code in vim."]
    new = ids["Aditya prefers detailed answers with examples."]
    kinds = ("record.created", "record.superseded", "record.forgotten")
    seen = [(e["kind"], e["record_id"], e["actor"]) for e in rt.store.events() if e["kind"] in kinds]
    assert seen == [
        ("record.created", old, agent_id), ("record.created", editor, agent_id),
        ("record.superseded", old, agent_id), ("record.created", new, agent_id),
        ("record.forgotten", editor, agent_id),
    ], seen
    (superseded,) = rt.store.events(record_id=old, kind="record.superseded")
    assert superseded["payload"]["by"] == new
    assert superseded["payload"]["reason"] == "The user corrected their answer style."
    (forgotten,) = rt.store.events(record_id=editor, kind="record.forgotten")
    assert forgotten["payload"]["reason"] == "The user asked to forget their editor."



VIM = "I always edit code in vim."
VIM_FACT = "Aditya edits code in vim."
QUESTION = "Which editor does Aditya use for the setup script?"


def seed_vim(rt: Runtime) -> None:
    """One earlier session that stored the user's editor, the answer to ``QUESTION``.

    The fake embedder knows no meaning, so it is told that the question is about this fact:
    the record shares only the user's name with the question, and a name alone does not
    get a record past the gate.
    """
    embedder = rt.embedder
    assert isinstance(embedder, FakeEmbedder)
    embedder.make_similar(QUESTION, VIM_FACT, 0.9)
    with rt.session(AGENT_ID, USER_ID, session_id="earlier") as s:
        s.say("user", VIM)
        s.write(VIM_FACT, attribute="editor", source_kind="user_statement", evidence=VIM)


# -- host-issued memory decided by need (utility.enabled, hybrid) ----------------------

ORDINARY = "What is the capital of France?"
BROKEN = "Please check this broken deploy config for me."
LOOKUP = "Look up memory abc123 and tell me what it says."
UTILITY_SCRIPT: tuple[Exchange, ...] = (
    # No gap: answered from the turn alone, nothing searched.
    Exchange(ORDINARY, reply="Paris."),
    # A gap the stored editor fills: the draft is made again with it.
    Exchange(QUESTION, reply="Any editor will do; the script can ask.",
             with_memory="It should configure vim, the editor Aditya uses."),
    # The planner fails: the draft is served.
    Exchange(BROKEN, reply="The config looks fine."),
    # The first model step calls a tool: not an answer yet, so no decision for this turn.
    Exchange(LOOKUP, calls=(ToolCall("call_lookup", "memory_get", {"ids": ["abc123"]}),),
             reply="There is no such memory."),
)
# The reply each turn serves, in order.
UTILITY_SERVED = ["Paris.", "It should configure vim, the editor Aditya uses.", "The config looks fine.",
                  "There is no such memory."]


def utility_runtime(tmp_path: Path) -> Runtime:
    """The contract runtime in ``hybrid`` with the orchestrator on, the scripted planner
    and judge, the user's editor stored and this bundle's pass recorded."""
    config = read_config(overrides={
        "store": {"path": str(tmp_path / "memory.sqlite")},
        "embedding": {"model": "fake"},
        "retrieval": {"gate": TEST_GATE, "trigger": {"mode": "hybrid"}},
        "utility": {"enabled": True},
    })
    planner = ScriptedPlanner({
        "editor": [Gap("which editor the user uses", QUESTION, "tools")],
        "broken": HostedError("timeout", "the planner did not answer in time"),
        "abc123": [Gap("the memory the user names", "abc123")],
    })
    rt = build_runtime(config, clock=ManualClock(T0), embedder=FakeEmbedder(), judge=FakeJudge(),
                       scheduler=InProcessScheduler(), environ={}, planner=planner,
                       admission=ScriptedJudge({"vim": "fills"}))
    rt.host.grant(AGENT_ID, Scope("user", USER_ID), read=True, write=True)
    rt.host.provision_user(USER_ID, aliases=["Aditya"])
    seed_vim(rt)
    orchestrator = rt.orchestrator
    assert orchestrator is not None
    rt.store.record_bundle_result(orchestrator.bundle, orchestrator.components, passed=True,
                                  evidence="the adapter contract", by="tests")
    return rt


def drive_utility(session: MemorySession) -> list[str]:
    """Play the utility script through a bare ``MemorySession``: ``respond`` for each
    turn, and for the turn whose first step calls a tool, the call and then the reply."""
    served = []
    for exchange in UTILITY_SCRIPT:
        session.say("user", exchange.user)
        if exchange.calls:
            for call in exchange.calls:
                session.say("tool", session.text(call.name, session.call(call.name, dict(call.args))))
            session.say("assistant", exchange.reply)
            served.append(exchange.reply)
            continue

        def model(recalled: str | None, exchange: Exchange = exchange) -> str:
            return exchange.with_memory if recalled and exchange.with_memory else exchange.reply

        served.append(session.respond(model))
    session.end()
    return served


def assert_utility_contract(rt: Runtime, session_id: str) -> None:
    """One decision per user turn that was answered without a tool step first, with the
    disposition the script calls for, and the served replies recorded as the turns."""
    decisions = list(reversed(rt.store.turn_decisions(session_id)))
    assert [(d["disposition"], d["failed_stage"]) for d in decisions] == [
        ("no_gap", None), ("regenerated", None), ("failed", "planner")], decisions
    regenerated = decisions[1]
    assert regenerated["gaps"][0]["query"] == QUESTION and len(regenerated["searches"]) == 1
    vim = [r.id for r in rt.store.find_records(scopes=[Scope("user", USER_ID)]) if r.content == VIM_FACT]
    assert [v["record_id"] for v in regenerated["verdicts"] if v["effect"] == "fills"] == vim
    assistant = [t.content for t in rt.store.turns(session_id) if t.role == "assistant"]
    assert assistant == UTILITY_SERVED
    assert all(RECALLED_HEADER not in t.content for t in rt.store.turns(session_id))
