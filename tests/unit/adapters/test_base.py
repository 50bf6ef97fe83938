"""MemorySession: the short path for a host with no framework, and what adapters share."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from retold.adapters.base import RECALLED_HEADER, MemorySession, Message
from retold.models import Principal, Scope
from retold.retrieve.profile import ProfileAssembler
from retold.store import open_store
from retold.testing import ADITYA, AGENT, World
from tests.adapter_contract import (
    AGENT_ID,
    USER_ID,
    UTILITY_SERVED,
    assert_utility_contract,
    drive_utility,
    utility_runtime,
)
from tests.conditions import write_lock_held

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
    assert world.rt.flush_search_log()
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


# -- trigger modes ---------------------------------------------------------------------


def _session(world: World, mode: str, **trigger: Any) -> MemorySession:
    cfg = world.rt.config
    config = replace(cfg, retrieval=replace(cfg.retrieval, trigger=replace(
        cfg.retrieval.trigger, mode=mode, **trigger)))
    principal = Principal(AGENT, "aditya", f"sess-{mode}", None)
    return MemorySession(world.rt.tools, world.rt.hooks, world.rt.store, config, principal)


def _remember_vim(world: World) -> None:
    world.say("user", "I always edit code in vim.")
    world.write(content="Aditya edits code in vim.", attribute="editor", source_kind="user_statement",
                evidence="I always edit code in vim.")


def test_tool_only_mode_never_issues_a_host_search(world: World) -> None:
    _remember_vim(world)
    s = _session(world, "tool_only")
    s.say("user", "Which editor should the setup script configure?")
    assert s.recall() is None
    assert "memory_search" in [t["name"] for t in s.tool_schemas()]


def test_auto_mode_does_not_offer_memory_search(world: World) -> None:
    names = [t["name"] for t in _session(world, "host_only").tool_schemas()]
    assert "memory_search" not in names and "memory_write" in names
    assert "memory_search" in [t["name"] for t in _session(world, "hybrid").tool_schemas()]


def test_one_host_search_per_new_user_turn_and_none_for_other_turns(world: World) -> None:
    _remember_vim(world)
    s = _session(world, "hybrid")
    s.say("user", "Set up my editor: does Aditya edit code in vim?")
    block = s.recall()
    assert block is not None and block.splitlines()[0] == RECALLED_HEADER
    assert "vim" in block
    assert s.recall() is None  # the same user turn is never searched twice
    s.say("assistant", "I will configure vim for you.")
    s.say("tool", "setup finished")
    assert s.recall() is None  # assistant and tool turns issue no search
    assert world.rt.flush_search_log()
    logged = [row for row in world.rt.store.search_log_rows() if row["trigger"] == "host"]
    assert len(logged) == 1


def test_the_host_search_is_logged_as_host_with_host_k(world: World) -> None:
    _remember_vim(world)
    s = _session(world, "host_only", host_k=2)
    s.say("user", "Set up my editor: does Aditya edit code in vim?")
    assert s.recall() is not None
    assert world.rt.flush_search_log()
    (row,) = [r for r in world.rt.store.search_log_rows() if r["trigger"] == "host"]
    assert json.loads(row["request"])["k"] == 2
    assert row["session_id"] == "sess-host_only"


def test_a_short_user_turn_is_skipped_with_an_event(world: World) -> None:
    s = _session(world, "host_only", host_min_query_chars=12)
    s.say("user", "thanks!")
    assert s.recall() is None
    (event,) = world.events("trigger.skipped")
    assert event["payload"] == {"session_id": "sess-host_only", "chars": 7, "min_chars": 12}
    assert world.rt.flush_search_log()
    assert [r for r in world.rt.store.search_log_rows() if r["trigger"] == "host"] == []


def test_an_empty_host_search_shows_nothing(world: World) -> None:
    s = _session(world, "host_only")
    s.say("user", "What is the capital of the moon's largest crater?")
    assert s.recall() is None
    assert world.rt.flush_search_log()
    assert len([r for r in world.rt.store.search_log_rows() if r["trigger"] == "host"]) == 1


def test_the_policy_prefix_is_byte_identical_across_turns(world: World) -> None:
    s = _session(world, "hybrid")
    first = s.policy.text.encode()
    s.say("user", "Hello there, remember me?")
    s.recall()
    assert s.policy.text.encode() == first
    assert RECALLED_HEADER in s.policy.text.lower()


# -- the profile block --------------------------------------------------------------------


def _state_vim(world: World) -> None:
    """An earlier session where the user stated their editor through memory_write."""
    world.say("user", "I always edit code in vim.")
    written = world.rt.tools.call("memory_write", world.p, {
        "type": "semantic", "content": "Aditya edits code in vim.", "attribute": "editor",
        "source_kind": "user_statement", "evidence": "I always edit code in vim."})
    assert written["activation"] == "ambient", written


def test_the_profile_survives_an_idle_split_unchanged(world: World) -> None:
    _state_vim(world)
    s = world.rt.session(AGENT, "aditya", session_id="s2")
    first = s.system_prompt("You help Aditya.")
    assert s.profile is not None and "Aditya edits code in vim." in s.profile.text
    world.clock.advance(hours=3)  # past the idle timeout: the next turn starts s2~2
    s.say("user", "Back again.")
    assert s.principal.session_id != "s2"
    assert s.system_prompt("You help Aditya.") == first


def test_a_locked_store_still_gives_the_session_its_profile(world: World) -> None:
    _state_vim(world)
    impatient = open_store(world.target, busy_timeout_seconds=0.2, clock=world.clock)
    profiles = ProfileAssembler(impatient, world.rt.config.activation, world.clock)
    s = MemorySession(world.rt.tools, world.rt.hooks, world.rt.store, world.rt.config,
                      Principal(AGENT, "aditya", "s2"), profiles=profiles)
    with write_lock_held(world.target):
        block = s.profile
    assert block is not None and "Aditya edits code in vim." in block.text
    assert world.rt.store.profile_block("s2") is None  # shown, but not stored: untraced
    impatient.close()


def test_respond_meets_the_utility_contract(tmp_path: Path) -> None:
    rt = utility_runtime(tmp_path)
    served = drive_utility(rt.session(AGENT_ID, USER_ID, session_id="bare"))
    assert served == UTILITY_SERVED
    assert_utility_contract(rt, "bare")
    rt.close()
