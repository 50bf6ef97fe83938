"""The per-session profile block: what it shows, in which order, within its cap, to whom,
and that one session always sees the same bytes."""

from __future__ import annotations

from typing import Any

from retold.config.activation import ActivationConfig
from retold.models import Principal, Scope
from retold.retrieve.profile import PROFILE_HEADER, ProfileAssembler, text_tokens
from retold.testing import AGENT, World

FACTS = (  # (what the user says, the record's content, attribute)
    ("I use neovim and nothing else, thanks.", "Aditya uses neovim.", "editor"),
    ("I'm strictly vegetarian, no fish either.", "Aditya is vegetarian and eats no fish.", "diet"),
    ("Please always answer me in British English.", "Aditya wants answers in British English.",
     "answer_language"),
)


def seed(world: World, facts: tuple[tuple[str, str, str], ...] = FACTS) -> list[str]:
    ids = []
    for said, content, attribute in facts:
        world.say("user", said)
        result = world.rt.tools.call("memory_write", world.p, {
            "type": "semantic", "content": content, "attribute": attribute,
            "source_kind": "user_statement", "evidence": said})
        assert result["activation"] == "ambient", result
        ids.append(result["record_id"])
    return ids


def open_session(world: World, session_id: str, agent: str = AGENT, user: str = "aditya") -> Principal:
    principal = Principal(agent, user, session_id)
    world.rt.hooks.on_session_start(principal)
    return principal


def test_the_block_shows_ambient_facts_in_category_order_with_ids(world: World) -> None:
    editor, diet, language = seed(world)
    block = world.rt.profiles.for_session(open_session(world, "s2"))
    # communication, then diet, then tools: the configured promotable order, not write order
    assert block.record_ids == (language, diet, editor)
    lines = block.text.splitlines()
    assert lines[0] == PROFILE_HEADER
    assert lines[1] == f"- [{language.replace('-', '')[-8:]}] Aditya wants answers in British English."
    assert block.tokens == text_tokens(block.text) and block.omitted == 0


def test_the_block_is_byte_identical_for_the_whole_session(world: World) -> None:
    seed(world, FACTS[:1])
    session = world.rt.session(AGENT, "aditya", session_id="s2")
    first = session.system_prompt("You help Aditya.")
    session.say("user", "I'm strictly vegetarian, no fish either.")
    session.write("Aditya is vegetarian and eats no fish.", attribute="diet", source_kind="user_statement",
                  evidence="I'm strictly vegetarian, no fish either.")
    session.say("assistant", "Noted.")
    assert session.system_prompt("You help Aditya.").encode() == first.encode()
    # Another process serving the same session reads the stored block, not a new one.
    other = world.rt.session(AGENT, "aditya", session_id="s2")
    assert other.system_prompt("You help Aditya.") == first
    assert len(world.events("session.profile")) == 1
    # The next session sees the fact written during this one.
    assert len(world.rt.profiles.for_session(open_session(world, "s3")).record_ids) == 2


def test_the_cap_leaves_records_out_and_counts_them(world: World) -> None:
    seed(world)
    config = ActivationConfig(profile_max_tokens=68)
    block = ProfileAssembler(world.rt.store, config, world.clock).assemble(open_session(world, "s2"))
    assert 0 < len(block.record_ids) < 3 and block.omitted == 3 - len(block.record_ids)
    assert f"({block.omitted} more not shown" in block.text
    assert block.tokens == text_tokens(block.text) <= 68  # footer and inventory included


def test_the_inventory_counts_other_memories_without_their_text(world: World) -> None:
    seed(world, FACTS[:1])
    world.say("user", "My salary went up to ninety thousand this year, by the way.")
    world.rt.tools.call("memory_write", world.p, {
        "type": "semantic", "content": "Aditya earns ninety thousand a year.", "attribute": "salary",
        "source_kind": "user_statement", "evidence": "My salary went up to ninety thousand"})
    block = world.rt.profiles.for_session(open_session(world, "s2"))
    assert dict(block.inventory) == {"finance": 1}
    assert block.text.splitlines()[-1] == "Other memories you can search for, by kind: finance 1."
    assert "ninety" not in block.text


def test_a_non_member_never_sees_another_scopes_ambient_facts(world: World) -> None:
    seed(world)
    world.rt.host.grant(AGENT, Scope("user", "maya"), read=True, write=True)
    maya = world.rt.profiles.for_session(open_session(world, "m1", user="maya"))
    stranger = world.rt.profiles.for_session(open_session(world, "x1", agent="other-agent"))
    assert maya.record_ids == () and maya.text == ""
    assert stranger.record_ids == () and stranger.text == ""


def test_a_standing_project_instruction_reaches_every_member_of_the_project(world: World) -> None:
    apollo = Scope("project", "apollo")
    world.rt.host.grant(AGENT, apollo, read=True, write=True)
    member = Principal(AGENT, "aditya", "s1", "apollo")
    said = "For Apollo, deploys always go through the staging cluster first."
    world.say("user", said, member)
    result: dict[str, Any] = world.rt.tools.call("memory_write", member, {
        "type": "procedural", "content": "Apollo deploys go through the staging cluster first.",
        "attribute": "deploy_process", "source_kind": "user_statement", "evidence": said,
        "write_target": "current_project",
        "entities": [{"kind": "project", "name": "Apollo", "role": "about"}]})
    assert result["activation"] == "ambient", result
    world.rt.host.grant("other-agent", Scope("user", "maya"), read=True, write=True)
    colleague = world.rt.profiles.for_session(open_session(world, "m1", agent="other-agent", user="maya"))
    assert colleague.record_ids == ()  # no grant on the project
    world.rt.host.grant("other-agent", apollo, read=True, write=False)
    outside = world.rt.profiles.for_session(open_session(world, "m2", agent="other-agent", user="maya"))
    assert outside.record_ids == ()  # a grant, but maya does not belong to the project
    world.rt.host.add_member(apollo, "maya")
    assert world.rt.profiles.for_session(open_session(world, "m3", agent="other-agent", user="maya")
                                         ).record_ids == (result["record_id"],)


def test_history_leaves_the_inventory_as_it_leaves_the_block(world: World) -> None:
    editor, diet, language = seed(world)
    world.say("user", "My salary went up to ninety thousand this year, by the way.")
    salary = world.rt.tools.call("memory_write", world.p, {
        "type": "semantic", "content": "Aditya earns ninety thousand a year.", "attribute": "salary",
        "source_kind": "user_statement", "evidence": "My salary went up to ninety thousand"})["record_id"]
    config = ActivationConfig(profile_max_tokens=68)  # room for one line: the rest is counted
    assembler = ProfileAssembler(world.rt.store, config, world.clock)
    before = assembler.assemble(open_session(world, "s2"))
    assert before.record_ids == (language,)
    assert dict(before.inventory) == {"diet": 1, "finance": 1, "tools": 1}
    for record_id in (diet, salary):
        world.rt.tools.call("memory_forget", world.p, {"id": record_id, "reason": "asked"})
    world.rt.tools.call("memory_revise", world.p, {"id": editor, "action": "expire", "reason": "changed"})
    after = assembler.assemble(open_session(world, "s3"))
    assert after.record_ids == (language,) and after.inventory == () and after.omitted == 0
