"""The CrewAI adapter: a real Crew (one Agent, one Task per user message) driven by a
scripted model (no key, no network) through the shared adapter contract and the trigger
modes."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.optional import need

# Before CrewAI is imported: no telemetry, no first-run tracing prompt (it waits 20 s for
# an answer), and the files a kickoff writes (its task-output database, its user file) go
# to a scratch folder rather than the home directory's data folder.
for _key, _value in (("CREWAI_DISABLE_TELEMETRY", "true"), ("OTEL_SDK_DISABLED", "true"),
                     ("CREWAI_TRACING_ENABLED", "false"), ("CREWAI_TESTING", "true"),
                     ("XDG_DATA_HOME", os.path.join(tempfile.gettempdir(), "retold-crewai-data"))):
    os.environ.setdefault(_key, _value)

need("crewai")

from crewai import Agent, Crew, Task  # noqa: E402
from crewai.agents.parser import AgentAction, AgentFinish  # noqa: E402
from crewai.tools.tool_types import ToolResult  # noqa: E402
from pydantic import ValidationError  # noqa: E402

from retold.adapters.base import RECALLED_HEADER  # noqa: E402
from retold.adapters.crewai import CrewMemory, MemoryLLM, agent_id_for, args_model  # noqa: E402
from retold.models import Scope  # noqa: E402
from retold.policy.prompt import policy_text  # noqa: E402
from retold.runtime import Runtime  # noqa: E402
from retold.testing.crewai_llm import ScriptedCrewLLM  # noqa: E402
from retold.tools.schemas import tool_schemas  # noqa: E402
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

ROLE = "Research Agent"  # its agent id is research-agent, the contract's AGENT_ID
SESSION = "crew-run-1"
INPUTS = {"user_id": USER_ID, "session_id": SESSION}


@pytest.fixture
def rt(tmp_path: Path) -> Iterator[Runtime]:
    made = contract_runtime(tmp_path)
    yield made
    made.close()


class Harness:
    """One crew agent with Retold memory and a scripted model, one task per exchange."""

    def __init__(self, rt: Runtime, script: Sequence[Exchange], inputs: dict[str, Any] | None = None) -> None:
        self.rt = rt
        self.script = list(script)
        self.inputs = dict(inputs or INPUTS)
        self.llm = ScriptedCrewLLM(script)
        self.memory = CrewMemory(rt, role=ROLE, inputs=self.inputs)
        self.agent = self.memory.agent(llm=self.llm, goal="Help Aditya.",
                                       backstory="You are Aditya's research assistant.")

    def kickoff(self) -> str:
        tasks = [Task(description=e.user, expected_output="A short reply.", agent=self.agent)
                 for e in self.script]
        crew = Crew(agents=[self.agent], tasks=tasks, tracing=False)
        return str(crew.kickoff(inputs=self.inputs).raw)

    def auto_searches(self) -> list[dict[str, Any]]:
        return [row for row in _logged(self.rt) if row["trigger"] == "host"]


def _recalled(messages: Sequence[dict[str, Any]]) -> list[int]:
    return [i for i, m in enumerate(messages) if str(m["content"]).startswith(RECALLED_HEADER)]


# -- the shared contract ---------------------------------------------------------------


def test_the_scripted_conversation_meets_the_adapter_contract(rt: Runtime, tmp_path: Path) -> None:
    h = Harness(rt, CONVERSATION)
    assert h.kickoff() == CONVERSATION[-1].reply
    h.memory.end_session()
    assert_contract(rt, AGENT_ID, USER_ID, SESSION)
    assert len(h.llm.seen) == sum(len(e.calls) + 1 for e in CONVERSATION)
    # Field by field the same records as the same script played without a framework.
    reference = contract_runtime(tmp_path / "reference")
    drive_session(reference.session(AGENT_ID, USER_ID, session_id="reference"))
    assert semantic_records(rt) == semantic_records(reference)
    reference.close()


def test_the_quoted_task_description_confirms_the_write(rt: Runtime) -> None:
    first = CONVERSATION[0]
    h = Harness(rt, [first])
    h.kickoff()
    (record,) = rt.store.find_records(scopes=[Scope("user", USER_ID)])
    assert (record.status, record.source_kind) == ("confirmed", "user_statement")
    assert record.evidence == first.calls[0].args["evidence"]
    assert record.source_ref is not None and record.source_ref.endswith("<turn:1>")
    assert [t.role for t in rt.store.turns(SESSION)] == ["user", "tool", "assistant"]


# -- identity, tools, steps, policy ----------------------------------------------------


def test_the_principal_comes_from_the_crew_inputs_never_from_tool_input(rt: Runtime) -> None:
    rt.host.grant(AGENT_ID, Scope("user", "maria"), read=True, write=True)
    memory = CrewMemory(rt, role=ROLE, inputs={"user_id": "maria", "session_id": "maria-1"})
    assert memory.session.principal.agent_id == agent_id_for(ROLE) == AGENT_ID
    memory.session.say("user", "I work from Lisbon.")
    write = next(t for t in memory.tools() if t.name == "memory_write").to_structured_tool()
    text = write.invoke({"type": "semantic", "content": "Maria works from Lisbon.",
                         "attribute": "location", "source_kind": "user_statement",
                         "evidence": "I work from Lisbon", "user_id": USER_ID})
    record = rt.store.get_record(json.loads(text)["record_id"])
    assert record is not None and record.scope == Scope("user", "maria")
    assert record.status == "confirmed"
    explicit = CrewMemory(rt, role="Anything at all", agent_id=AGENT_ID, inputs={"user_id": USER_ID})
    assert explicit.session.principal.agent_id == AGENT_ID
    assert explicit.session.principal.session_id  # a new one, when the inputs carry none
    with pytest.raises(ValueError, match="user_id"):
        CrewMemory(rt, role=ROLE, inputs={"session_id": "s"})


def test_the_argument_models_are_generated_from_the_published_schemas(rt: Runtime) -> None:
    for schema in tool_schemas(["personal"]):
        published = schema["input_schema"]
        generated = args_model(schema).model_json_schema()
        assert set(generated["properties"]) == set(published["properties"]), schema["name"]
        assert set(generated.get("required", ())) == set(published.get("required", ())), schema["name"]
    write = args_model(tool_schemas(["personal"])[2])
    ok = write.model_validate({"type": "semantic", "content": "x", "entities": [
        {"kind": "person", "name": "Aditya", "role": "about"}], "tags": ["a"]})
    assert ok.model_dump(exclude_none=True) == {
        "type": "semantic", "content": "x", "tags": ["a"],
        "entities": [{"kind": "person", "name": "Aditya", "role": "about"}]}
    for bad in ({"type": "opinion", "content": "x"},  # not in the enum
                {"type": "semantic"},  # content is required
                {"type": "semantic", "content": "x", "write_target": "org"},  # not this session's
                {"type": "semantic", "content": "x", "entities": [{"kind": "person", "name": "A"}]},
                {"type": "semantic", "content": "x", "tags": "a"}):
        with pytest.raises(ValidationError):
            write.model_validate(bad)
    search = args_model(tool_schemas(None)[0])
    with pytest.raises(ValidationError):
        search.model_validate({"queries": []})  # one to three phrases
    # Fields the model left out are not sent: the handler applies the schema's defaults.
    memory = CrewMemory(rt, role=ROLE, inputs=INPUTS)
    tool = next(t for t in memory.tools() if t.name == "memory_search").to_structured_tool()
    answer = tool.invoke({"queries": ["answer style"]})
    assert "error" not in answer  # a null k or include_history would be refused as invalid_input
    (row,) = _logged(rt)
    assert row["trigger"] == "tool" and json.loads(row["request"])["include_history"] is False


def test_each_step_is_recorded_once_however_often_it_is_reported(rt: Runtime) -> None:
    memory = CrewMemory(rt, role=ROLE, inputs=INPUTS)
    memory.session.say("user", "Please look up my editor.")
    result = ToolResult(result='{"records":[]}')
    action = AgentAction(thought="", tool="memory_get", tool_input="{}", text="", result=result.result)
    finish = AgentFinish(thought="", output="I found nothing.", text="")
    for step in (result, action, result, action, finish, finish):
        memory.step_callback(step)
    memory.step_callback(AgentAction(thought="", tool="other", tool_input="{}", text="", result="42"))
    memory.step_callback(AgentFinish(thought="", output="I found nothing.", text=""))  # a new step
    assert [(t.role, t.content) for t in rt.store.turns(SESSION)] == [
        ("user", "Please look up my editor."), ("tool", '{"records":[]}'),
        ("assistant", "I found nothing."), ("tool", "42"), ("assistant", "I found nothing.")]


def test_the_tool_turn_is_the_tools_own_answer_not_crewais_reminder(rt: Runtime) -> None:
    memory = CrewMemory(rt, role=ROLE, inputs=INPUTS)
    get = next(t for t in memory.tools() if t.name == "memory_get").to_structured_tool()
    text = get.invoke({"ids": ["unknown"]})
    memory.step_callback(ToolResult(result=f"{text}\n\nTool Name: memory_get ..."))
    (turn,) = rt.store.turns(SESSION)
    assert (turn.role, turn.content) == ("tool", text)


@pytest.mark.parametrize("mode", ["tool_only", "host_only", "hybrid"])
def test_the_policy_goes_into_the_backstory(tmp_path: Path, mode: str) -> None:
    rt = contract_runtime(tmp_path, mode)
    h = Harness(rt, [Exchange("Please keep every answer short and technical.", reply="Noted.")])
    assert h.agent.backstory.startswith("You are Aditya's research assistant.")
    assert h.agent.backstory.endswith(policy_text(mode))  # type: ignore[arg-type]
    assert isinstance(h.agent.llm, MemoryLLM) and h.agent.llm.inner is h.llm
    h.kickoff()
    assert policy_text(mode) in h.llm.seen[0][0]["content"]  # type: ignore[arg-type]
    (event,) = rt.store.events(kind="session.policy")
    assert event["payload"]["mode"] == mode
    rt.close()


def test_the_profile_block_goes_into_the_backstory(rt: Runtime) -> None:
    seed_vim(rt)  # an earlier session: the user's editor, a user statement, so ambient
    h = Harness(rt, [Exchange("Please keep every answer short and technical.", reply="Noted.")])
    block = h.memory.session.profile
    assert block is not None and "Aditya edits code in vim." in block.text
    assert h.agent.backstory == (f"You are Aditya's research assistant.\n\n{block.text}\n\n"
                                 f"{h.memory.session.policy.text}")
    h.kickoff()
    assert block.text in h.llm.seen[0][0]["content"]
    assert rt.store.profile_block(SESSION) == block


def test_end_session_ends_the_session_once(rt: Runtime) -> None:
    h = Harness(rt, [Exchange("Hello, can you help me plan a trip?", reply="Of course.")])
    with h.memory:
        h.kickoff()
        assert rt.store.get_session(SESSION).ended_at is None  # type: ignore[union-attr]
    ended = rt.store.get_session(SESSION)
    assert ended is not None and ended.ended_at is not None
    h.memory.end_session()  # a second call does nothing
    assert rt.store.get_session(SESSION) == ended


# -- trigger modes ---------------------------------------------------------------------


def test_auto_mode_registers_no_memory_search(tmp_path: Path) -> None:
    rt = contract_runtime(tmp_path, "host_only")
    h = Harness(rt, [Exchange("Which editor should the setup script configure?", reply="vim")])
    names = [t.name for t in h.agent.tools or []]
    assert "memory_search" not in names and {"memory_write", "memory_get"} <= set(names)
    h.kickoff()
    system = h.llm.seen[0][0]["content"]
    assert "Tool Name: memory_write" in system and "Tool Name: memory_search" not in system
    assert "entities" in system and "role (about|mentions, required)" in system  # nested fields shown
    rt.close()


def test_one_host_search_per_new_user_turn_and_none_for_tool_steps(tmp_path: Path) -> None:
    rt = contract_runtime(tmp_path, "host_only")
    seed_vim(rt)
    script = [
        Exchange(QUESTION, calls=(ToolCall("call_get", "memory_get", {"ids": ["unknown"]}),),
                 reply="It should configure vim."),
        Exchange("And which shell plugins should Aditya install with it?", reply="The vim ones."),
    ]
    h = Harness(rt, script)
    h.kickoff()
    assert len(h.llm.seen) == 3  # a tool step and a reply, then a reply: two user turns
    assert [json.loads(r["request"])["queries"] for r in h.auto_searches()] == [
        [QUESTION], [script[1].user]]
    rt.close()


def test_a_short_user_turn_is_skipped_with_a_trigger_skipped_event(tmp_path: Path) -> None:
    rt = contract_runtime(tmp_path, "host_only", host_min_query_chars=12)
    h = Harness(rt, [Exchange("thanks!", reply="You're welcome.")])
    h.kickoff()
    (event,) = rt.store.events(kind="trigger.skipped")
    assert event["payload"] == {"session_id": SESSION, "chars": 7, "min_chars": 12}
    assert h.auto_searches() == []
    rt.close()


def test_the_host_search_is_logged_with_trigger_host_and_uses_host_k(tmp_path: Path) -> None:
    rt = contract_runtime(tmp_path, "host_only", host_k=2)
    seed_vim(rt)
    h = Harness(rt, [Exchange(QUESTION, reply="vim")])
    h.kickoff()
    (row,) = h.auto_searches()
    assert (row["session_id"], row["agent_id"], row["user_id"]) == (SESSION, AGENT_ID, USER_ID)
    assert json.loads(row["request"])["k"] == 2
    assert [r["trigger"] for r in _logged(rt)] == ["host"]
    rt.close()


@pytest.mark.parametrize("mode", ["host_only", "hybrid"])
def test_a_recalled_block_is_added_once_under_the_recalled_memory_header(tmp_path: Path, mode: str) -> None:
    rt = contract_runtime(tmp_path, mode)
    seed_vim(rt)
    script = [Exchange(QUESTION, calls=(ToolCall("call_get", "memory_get", {"ids": ["unknown"]}),),
                       reply="It should configure vim."),
              Exchange("Thanks, and what about the terminal font size?", reply="No idea.")]
    h = Harness(rt, script)
    h.kickoff()
    first, after_tool, second_task = h.llm.seen
    (index,) = _recalled(first)
    assert index == len(first) - 1 and first[index]["role"] == "user"  # after the task prompt
    assert QUESTION in first[index - 1]["content"]
    block = first[index]["content"]
    assert block.splitlines()[0] == RECALLED_HEADER and "Aditya edits code in vim." in block
    # The next step sees the same block in the same place, then the tool step after it.
    assert after_tool[: len(first)] == first and len(after_tool) == len(first) + 1
    assert _recalled(second_task) == []  # nothing relevant is stored for the second task
    # Only what the model saw: never a recorded turn.
    assert all(RECALLED_HEADER not in t.content for t in rt.store.turns(SESSION))
    rt.close()


def test_an_empty_recall_adds_nothing(tmp_path: Path) -> None:
    rt = contract_runtime(tmp_path, "host_only")
    question = "What is the capital of the largest crater on the moon?"
    h = Harness(rt, [Exchange(question, reply="There is none.")])
    h.kickoff()
    (seen,) = h.llm.seen
    assert [m["role"] for m in seen] == ["system", "user"]
    assert len(h.auto_searches()) == 1  # searched, found nothing, showed nothing
    rt.close()


def test_tool_only_mode_recalls_nothing(rt: Runtime) -> None:
    seed_vim(rt)
    h = Harness(rt, [Exchange(QUESTION, reply="vim")])
    h.kickoff()
    assert _recalled(h.llm.seen[0]) == [] and _logged(rt) == []


def test_the_crew_agent_is_a_plain_crewai_agent(rt: Runtime) -> None:
    h = Harness(rt, [])
    assert isinstance(h.agent, Agent) and h.agent.role == ROLE and h.agent.cache is False


def _logged(rt: Runtime) -> list[dict[str, Any]]:
    """Every logged search, after this process's queued log rows are written."""
    assert rt.flush_search_log()
    return rt.store.search_log_rows()


# -- host-issued memory decided by need --------------------------------------------------


def test_the_utility_path_meets_the_shared_contract(tmp_path: Path) -> None:
    rt = utility_runtime(tmp_path)
    h = Harness(rt, UTILITY_SCRIPT)
    assert h.kickoff() == UTILITY_SERVED[-1]
    h.memory.end_session()
    assert_utility_contract(rt, SESSION)
    # The regeneration was the task's first call again, with the admitted record appended.
    regenerated = [seen for seen in h.llm.seen if _recalled(seen)]
    assert len(regenerated) == 1
    block = regenerated[0][_recalled(regenerated[0])[0]]["content"]
    assert "Aditya edits code in vim." in block and "fills a gap" in block
    rt.close()
