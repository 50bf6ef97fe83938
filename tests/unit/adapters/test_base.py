"""MemorySession: the short path for a host with no framework, and what adapters share."""

from __future__ import annotations

from datetime import timedelta

import pytest

from retold.adapters.base import Message
from retold.models import Scope
from retold.testing import ADITYA, AGENT, World

QUOTE = "keep every answer short and technical"


def test_a_session_records_writes_searches_and_ends_in_a_few_lines(world: World) -> None:
    with world.rt.session(AGENT, "aditya") as s:
        s.say("user", "Please keep every answer short and technical.")
        written = s.write("Aditya prefers short technical answers.", attribute="answer_style",
                          source_kind="user_statement", evidence=QUOTE)
        found = s.search("what answer style does Aditya prefer")
        session_id = s.principal.session_id
    assert written["status"] == "confirmed"  # the quote was found in the recorded turn
    assert [r["id"] for r in found["results"]] == [written["record_id"]]
    assert "short technical answers" in s.text("memory_search", found)
    assert session_id is not None
    row = world.rt.store.get_session(session_id)
    assert row is not None and row.ended_at is not None  # ended on exit: extraction scheduled


def test_an_unrecorded_quote_makes_the_write_an_inference(world: World) -> None:
    with world.rt.session(AGENT, "aditya") as s:
        written = s.write("Aditya prefers tea.", attribute="drink", source_kind="user_statement",
                          evidence="I prefer tea")
    assert written["status"] == "provisional" and written["note"]


def test_replayed_history_is_recorded_once_and_in_order(world: World) -> None:
    history = [("user", "Hi, I am Aditya."), ("assistant", "Hello Aditya."), ("user", "I use vim.")]
    s = world.rt.session(AGENT, "aditya")
    assert s.sync(history[:2]) == 2
    assert s.sync(history) == 1  # the framework replays the whole history every call
    assert s.sync([Message(r, c) for r, c in history]) == 0  # type: ignore[arg-type]
    turns = world.rt.store.turns(s.principal.session_id or "")
    assert [(t.role, t.content) for t in turns] == history
    with pytest.raises(ValueError, match="does not continue"):
        s.sync([("user", "a different conversation")])


def test_the_search_context_is_the_current_turn_cut_to_the_configured_length(world: World) -> None:
    s = world.rt.session(AGENT, "aditya")
    assert s.context() == ""
    s.say("user", "Old question.")
    s.say("assistant", "Old answer.")
    s.say("user", "Which editor do I use?")
    s.say("tool", "search results")
    s.say("assistant", "You use vim.")
    assert s.context() == "user: Which editor do I use?\nassistant: You use vim."
    s.say("user", "x" * 5000)
    limit = world.rt.config.retrieval.rewrite.max_context_chars
    assert len(s.context()) == limit and s.context().endswith("x")
    found = s.search("editor")
    logged = world.rt.store.search_log_row(found["search_id"])
    assert logged is not None and logged["context"] and "x" in logged["context"]


def test_the_session_follows_an_idle_split(world: World) -> None:
    s = world.rt.session(AGENT, "aditya", session_id="long-chat")
    s.say("user", "First message.")
    world.clock.advance(timedelta(days=2))
    s.say("user", "Back after two days.")
    assert s.principal.session_id != "long-chat"
    assert [t.content for t in world.rt.store.turns(s.principal.session_id or "")] == ["Back after two days."]


def test_tools_follow_the_current_grants_in_each_provider_format(world: World) -> None:
    s = world.rt.session(AGENT, "aditya")
    assert "memory_write" in [t["name"] for t in s.tools("anthropic")]
    world.rt.host.revoke(AGENT, ADITYA)
    assert "memory_write" not in [t["name"] for t in s.tools("anthropic")]
    assert "memory_write" not in [t["function"]["name"] for t in s.tools("openai")]
    world.rt.host.grant(AGENT, Scope("user", "aditya"), read=True, write=True)
    assert "memory_write" in [t["function"]["name"] for t in s.tools("openai")]


def test_the_policy_version_is_recorded_on_the_session_once(world: World) -> None:
    s = world.rt.session(AGENT, "aditya")
    first, again = s.policy, s.policy
    assert "memory_search" in first.text and again.version == first.version
    events = world.events("session.policy")
    assert len(events) == 1
    assert events[0]["payload"] == {"session_id": s.principal.session_id, "mode": "tool_only",
                                    "version": s.policy.version}


def test_ending_twice_schedules_once(world: World) -> None:
    scheduled: list[str] = []
    world.rt.hooks.scheduler = type("Recorder", (), {"schedule": lambda self, sid: scheduled.append(sid)})()
    s = world.rt.session(AGENT, "aditya")
    s.say("user", "Hello.")
    s.end()
    s.end()
    assert scheduled == [s.principal.session_id]
