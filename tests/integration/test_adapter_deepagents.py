"""The Deep Agents adapter: a real ``create_deep_agent`` agent driven by a scripted chat
model (no key, no network) through the shared adapter contract and the trigger modes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.optional import need

need("deepagents")

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402

from retold.adapters.base import RECALLED_HEADER  # noqa: E402
from retold.adapters.deepagents import RECALL_TOOL, RetoldDeepAgents  # noqa: E402
from retold.models import Scope  # noqa: E402
from retold.policy.prompt import policy_text  # noqa: E402
from retold.runtime import Runtime  # noqa: E402
from retold.testing.langchain_chat import ScriptedChatModel  # noqa: E402
from tests.adapter_contract import (  # noqa: E402
    AGENT_ID,
    CONVERSATION,
    QUESTION,
    USER_ID,
    UTILITY_SCRIPT,
    UTILITY_SERVED,
    Exchange,
    ToolCall,
    assert_contract,
    assert_utility_contract,
    contract_runtime,
    drive_session,
    seed_vim,
    semantic_records,
    utility_runtime,
)

SYSTEM = "You are Aditya's research assistant."
# Names the user, so the host-issued search passes the calibrated auto gate on an entity match.


@pytest.fixture
def rt(tmp_path: Path) -> Iterator[Runtime]:
    made = contract_runtime(tmp_path)
    yield made
    made.close()


def _config(thread_id: str = "thread-1", user_id: str = USER_ID) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id, "agent_id": AGENT_ID, "user_id": user_id}}


class Harness:
    """One deep agent with Retold memory, a checkpointer and a scripted model."""

    def __init__(self, rt: Runtime, script: Sequence[Exchange], thread_id: str = "thread-1") -> None:
        self.rt = rt
        self.model = ScriptedChatModel(script=list(script))
        self.checkpointer = InMemorySaver()
        self.config = _config(thread_id)
        self.restart()

    def restart(self) -> None:
        """A new host process: a fresh adapter over the same store and checkpointer."""
        self.memory = RetoldDeepAgents(self.rt)
        self.agent = self.memory.create_agent(self.model, system_prompt=SYSTEM,
                                              checkpointer=self.checkpointer)

    def say(self, text: str) -> dict[str, Any]:
        result: dict[str, Any] = self.agent.invoke(
            {"messages": [{"role": "user", "content": text}]}, self.config)
        return result

    def auto_searches(self) -> list[dict[str, Any]]:
        assert self.rt.flush_search_log()
        return [row for row in self.rt.store.search_log_rows() if row["trigger"] == "host"]


def _recalled_pairs(messages: Sequence[BaseMessage]) -> list[tuple[int, AIMessage, ToolMessage]]:
    pairs = []
    for i, m in enumerate(messages):
        if isinstance(m, AIMessage) and any(c["name"] == RECALL_TOOL for c in m.tool_calls):
            result = messages[i + 1]
            assert isinstance(result, ToolMessage) and result.tool_call_id == m.tool_calls[0]["id"]
            pairs.append((i, m, result))
    return pairs


# -- the shared contract ---------------------------------------------------------------


def test_the_scripted_conversation_meets_the_adapter_contract(rt: Runtime, tmp_path: Path) -> None:
    h = Harness(rt, CONVERSATION)
    for exchange in CONVERSATION:
        final = h.say(exchange.user)
        assert final["messages"][-1].text == exchange.reply
    h.memory.end_session(h.config)
    assert_contract(rt, AGENT_ID, USER_ID, "thread-1")
    # The framework handed the whole history to the model on every call.
    assert len(h.model.seen) == sum(len(e.calls) + 1 for e in CONVERSATION)
    # Field by field the same records as the same script played without a framework.
    reference = contract_runtime(tmp_path / "reference")
    drive_session(reference.session(AGENT_ID, USER_ID, session_id="reference"))
    assert semantic_records(rt) == semantic_records(reference)
    reference.close()


def test_the_principal_comes_from_the_run_config_never_from_tool_input(rt: Runtime) -> None:
    memory = RetoldDeepAgents(rt)
    write = next(t for t in memory.tools() if t.name == "memory_write")
    rt.host.grant(AGENT_ID, Scope("user", "maria"), read=True, write=True)
    config = _config("thread-maria", user_id="maria")
    memory.session(config).say("user", "I work from Lisbon.")
    text = write.invoke({"type": "semantic", "content": "Maria works from Lisbon.",
                         "attribute": "location", "source_kind": "user_statement",
                         "evidence": "I work from Lisbon"}, config=config)
    record = rt.store.get_record(json.loads(text)["record_id"])
    assert record is not None and record.scope == Scope("user", "maria")
    refused = json.loads(write.invoke({"type": "semantic", "content": "x", "user_id": "aditya"},
                                      config=config))
    assert refused["error"]["code"] == "invalid_input"
    with pytest.raises(ValueError, match="user_id"):
        write.invoke({"type": "semantic", "content": "x"},
                     config={"configurable": {"thread_id": "t", "agent_id": AGENT_ID}})
    with pytest.raises(ValueError, match="belongs to another"):
        memory.session(_config("thread-maria", user_id=USER_ID))


def test_end_session_ends_the_thread_and_a_later_run_starts_a_new_session(rt: Runtime) -> None:
    script = [Exchange("Hello, can you help me plan a trip?", reply="Of course."),
              Exchange("Back again with another question.", reply="Welcome back.")]
    h = Harness(rt, script)
    h.say(script[0].user)
    h.memory.end_session(h.config)
    first = rt.store.get_session("thread-1")
    assert first is not None and first.ended_at is not None
    h.say(script[1].user)
    assert [(t.role, t.content) for t in rt.store.turns("thread-1")] == [
        ("user", script[0].user), ("assistant", script[0].reply)]
    assert [(t.role, t.content) for t in rt.store.turns("thread-1~2")] == [
        ("user", script[1].user), ("assistant", script[1].reply)]


def test_a_restarted_host_does_not_record_the_replayed_history_again(rt: Runtime) -> None:
    script = [Exchange("Hello, can you help me plan a trip?", reply="Of course."),
              Exchange("Back again with another question.", reply="Welcome back.")]
    h = Harness(rt, script)
    h.say(script[0].user)
    h.restart()
    h.say(script[1].user)
    assert [(t.role, t.content) for t in rt.store.turns("thread-1")] == [
        (role, text) for e in script for role, text in (("user", e.user), ("assistant", e.reply))]
    h.restart()
    h.memory.end_session(h.config)  # a thread this process never ran still ends
    ended = rt.store.get_session("thread-1")
    assert ended is not None and ended.ended_at is not None


# -- trigger modes ---------------------------------------------------------------------


def test_auto_mode_registers_no_memory_search(tmp_path: Path) -> None:
    rt = contract_runtime(tmp_path, "host_only")
    h = Harness(rt, [Exchange("Which editor should the setup script configure?", reply="vim")])
    assert "memory_search" not in [t.name for t in h.memory.tools()]
    h.say("Which editor should the setup script configure?")
    (bound,) = h.model.bound
    assert "memory_search" not in bound and {"memory_write", "memory_get"} <= set(bound)
    rt.close()


def test_one_host_search_per_new_user_turn_and_none_for_assistant_or_tool_turns(tmp_path: Path) -> None:
    rt = contract_runtime(tmp_path, "host_only")
    seed_vim(rt)
    question = QUESTION
    script = [
        Exchange(question, calls=(ToolCall("call_get", "memory_get", {"ids": ["unknown"]}),),
                 reply="It should configure vim."),
        Exchange("And which shell plugins should Aditya install with it?", reply="The vim ones."),
    ]
    h = Harness(rt, script)
    h.say(script[0].user)
    assert len(h.model.seen) == 2  # a tool step and the reply: still one search
    assert len(h.auto_searches()) == 1
    h.say(script[1].user)
    assert [json.loads(r["request"])["queries"] for r in h.auto_searches()] == [
        [question], [script[1].user]]
    rt.close()


def test_a_short_user_turn_is_skipped_with_a_trigger_skipped_event(tmp_path: Path) -> None:
    rt = contract_runtime(tmp_path, "host_only", host_min_query_chars=12)
    h = Harness(rt, [Exchange("thanks!", reply="You're welcome.")])
    h.say("thanks!")
    (event,) = rt.store.events(kind="trigger.skipped")
    assert event["payload"] == {"session_id": "thread-1", "chars": 7, "min_chars": 12}
    assert h.auto_searches() == []
    rt.close()


def test_the_host_search_is_logged_with_trigger_host_and_uses_host_k(tmp_path: Path) -> None:
    rt = contract_runtime(tmp_path, "host_only", host_k=2)
    seed_vim(rt)
    question = QUESTION
    h = Harness(rt, [Exchange(question, reply="vim")])
    h.say(question)
    (row,) = h.auto_searches()
    assert row["session_id"] == "thread-1" and row["agent_id"] == AGENT_ID
    assert json.loads(row["request"])["k"] == 2
    assert rt.store.search_log_row(row["id"]) == row
    rt.close()


@pytest.mark.parametrize("mode", ["host_only", "hybrid"])
def test_a_recalled_block_is_one_tool_call_pair_under_the_recalled_memory_header(
        tmp_path: Path, mode: str) -> None:
    rt = contract_runtime(tmp_path, mode)
    seed_vim(rt)
    question = QUESTION
    script = [Exchange(question, calls=(ToolCall("call_get", "memory_get", {"ids": ["unknown"]}),),
                       reply="It should configure vim."),
              Exchange("Thanks, and what about the terminal font size?", reply="No idea.")]
    h = Harness(rt, script)
    h.say(question)
    first, after_tool = h.model.seen
    (pair,) = _recalled_pairs(first)
    index, call, result = pair
    assert isinstance(first[index - 1], HumanMessage) and first[index - 1].text == question
    assert index + 2 == len(first)  # appended after the new user turn
    assert str(result.text).splitlines()[0] == RECALLED_HEADER
    assert "Aditya edits code in vim." in result.text
    # Later calls see the same pair in the same place: the input only grows at its end.
    assert after_tool[: len(first)] == first
    h.say(script[1].user)  # nothing relevant is stored for it: no second pair
    assert len(_recalled_pairs(h.model.seen[-1])) == 1
    assert h.model.seen[-1][: len(after_tool)] == after_tool
    # Only what the model saw: never a recorded turn, never in the agent's state.
    turns = rt.store.turns("thread-1")
    assert all(RECALLED_HEADER not in t.content for t in turns)
    state = h.agent.get_state(h.config).values["messages"]
    assert not _recalled_pairs(state) and all(getattr(m, "name", None) != RECALL_TOOL for m in state)
    rt.close()


def test_an_empty_recall_appends_nothing(tmp_path: Path) -> None:
    rt = contract_runtime(tmp_path, "host_only")
    question = "What is the capital of the largest crater on the moon?"
    h = Harness(rt, [Exchange(question, reply="There is none.")])
    h.say(question)
    (seen,) = h.model.seen
    assert [type(m).__name__ for m in seen] == ["SystemMessage", "HumanMessage"]
    assert len(h.auto_searches()) == 1  # searched, found nothing, showed nothing
    rt.close()


@pytest.mark.parametrize("mode", ["tool_only", "host_only", "hybrid"])
def test_the_system_prompt_prefix_is_byte_identical_across_turns(tmp_path: Path, mode: str) -> None:
    rt = contract_runtime(tmp_path, mode)
    seed_vim(rt)
    script = [Exchange(QUESTION,
                       calls=(ToolCall("call_get", "memory_get", {"ids": ["unknown"]}),), reply="vim"),
              Exchange("Please keep every answer short and technical.", reply="Noted.")]
    h = Harness(rt, script)
    for exchange in script:
        h.say(exchange.user)
    systems = [seen[0] for seen in h.model.seen]
    assert len(systems) == 3
    encoded = {json.dumps(s.content, sort_keys=True).encode() for s in systems}
    assert len(encoded) == 1
    text = str(systems[0].text)
    assert text.startswith(SYSTEM) and text.count(policy_text(mode)) == 1  # type: ignore[arg-type]
    assert len(rt.store.events(kind="session.policy")) == 1  # the version, logged once
    rt.close()


def test_the_profile_block_is_in_the_system_prompt_and_never_changes(rt: Runtime) -> None:
    seed_vim(rt)  # an earlier session: the user's editor, a user statement, so ambient
    said = "I'm strictly vegetarian, so keep that in mind."
    script = [Exchange(said, calls=(ToolCall("call_write", "memory_write", {
        "type": "semantic", "content": "Aditya is vegetarian.", "attribute": "diet",
        "source_kind": "user_statement", "evidence": "I'm strictly vegetarian"}),), reply="Noted."),
        Exchange("And what should I cook tonight?", reply="A dal.")]
    h = Harness(rt, script)
    for exchange in script:
        h.say(exchange.user)
    texts = {str(seen[0].text) for seen in h.model.seen}
    assert len(texts) == 1  # the vegetarian fact, written mid-session, waits for the next one
    (text,) = texts
    block = h.memory.session(h.config).profile
    assert block is not None and "Aditya edits code in vim." in block.text
    assert text == f"{SYSTEM}\n\n{block.text}\n\n{h.memory.session(h.config).policy.text}"
    assert "vegetarian" not in text
    assert rt.store.profile_block("thread-1") == block


def test_an_async_run_meets_the_same_contract(rt: Runtime) -> None:
    h = Harness(rt, CONVERSATION)

    async def converse() -> None:
        for exchange in CONVERSATION:
            await h.agent.ainvoke({"messages": [{"role": "user", "content": exchange.user}]}, h.config)

    asyncio.run(converse())
    h.memory.end_session(h.config)
    assert_contract(rt, AGENT_ID, USER_ID, "thread-1")


# -- host-issued memory decided by need --------------------------------------------------


@pytest.mark.parametrize("run", ["sync", "async"])
def test_the_utility_path_meets_the_shared_contract(tmp_path: Path, run: str) -> None:
    rt = utility_runtime(tmp_path)
    h = Harness(rt, UTILITY_SCRIPT)
    served = []
    for exchange in UTILITY_SCRIPT:
        if run == "sync":
            final = h.say(exchange.user)
        else:
            final = asyncio.run(h.agent.ainvoke({"messages": [{"role": "user", "content": exchange.user}]},
                                                h.config))
        served.append(final["messages"][-1].text)
    h.memory.end_session(h.config)
    assert served == UTILITY_SERVED
    assert_utility_contract(rt, "thread-1")
    # The regeneration saw the admitted record in one recalled pair after the question;
    # later calls keep it there, so the model input still only grows at its end.
    regenerated = next(seen for seen in h.model.seen if _recalled_pairs(seen))
    ((_, _, block),) = _recalled_pairs(regenerated)
    assert "Aditya edits code in vim." in block.text and "fills a gap" in block.text
    assert h.model.seen[-1][: len(regenerated)] == regenerated
    rt.close()
