"""Retold memory for CrewAI agents.

:class:`CrewMemory` is one crew agent's conversation with memory. Its identity is fixed
when it is built, from the agent's role (or an explicit id) and the crew inputs
(``user_id``, and optionally ``session_id`` and ``project_id``); the model can never
name a principal through a tool argument::

    inputs = {"user_id": "aditya", "session_id": "sess_42", "topic": "billing"}
    memory = CrewMemory(rt, role="Research Agent", inputs=inputs)  # agent id research-agent
    agent = memory.agent(goal="Answer Aditya's questions.", backstory="You know Acme.",
                         llm=LLM(model="anthropic/claude-sonnet-4-6"))
    crew = Crew(agents=[agent], tasks=[Task(description="...", expected_output="...", agent=agent)])
    crew.kickoff(inputs=inputs)
    memory.end_session()  # ends the session and schedules its extraction

The pieces :meth:`CrewMemory.agent` puts together can also be used one by one:

- :meth:`CrewMemory.tools`: the memory tools the session's grants allow, as ``BaseTool``
  objects whose argument models are generated from the published JSON schemas;
- :meth:`CrewMemory.wrap_llm`: the agent's model, wrapped so that each task's description
  is recorded as the user turn before the task's first model call, and in ``host_only`` and
  ``hybrid`` modes the host-issued recall is added to the task's messages once;
- :meth:`CrewMemory.step_callback`: records each tool result and each final answer once;
- :meth:`CrewMemory.backstory`: the backstory with the session's profile block and the
  memory-use policy after it.

Each task of the crew is one exchange: its description is what the user said, the tool
results follow it, and the final answer is the reply. One ``CrewMemory`` serves one
kickoff; build a new one (with the new inputs) for the next.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from crewai import Agent
from crewai.agents.parser import AgentAction, AgentFinish, OutputParserError
from crewai.agents.parser import parse as parse_step
from crewai.llms.base_llm import BaseLLM
from crewai.tools import BaseTool
from crewai.tools.tool_types import ToolResult
from crewai.types.usage_metrics import UsageMetrics
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, create_model

from retold.adapters.base import MemorySession
from retold.runtime import Runtime
from retold.tools.export import openai_arguments
from retold.tools.schemas import ToolSchema

__all__ = ["CrewMemory", "MemoryLLM", "MemoryTool", "agent_id_for", "args_model"]

log = logging.getLogger(__name__)


def agent_id_for(role: str) -> str:
    """The agent id a crew role stands for: lower case, words joined by dashes
    (``"Research Agent"`` is ``research-agent``)."""
    slug = re.sub(r"[^a-z0-9]+", "-", role.lower()).strip("-")
    if not slug:
        raise ValueError(f"the role {role!r} names no agent id; pass agent_id")
    return slug


# -- argument models ------------------------------------------------------------------


def args_model(schema: ToolSchema) -> type[BaseModel]:
    """The pydantic model CrewAI validates a tool's arguments with, generated from its
    published JSON schema: required fields stay required, optional ones default to None
    (the handler applies the schema's own defaults when a field is left out), enums
    become ``Literal`` types and nested objects nested models.

    Unknown top-level keys are ignored rather than refused: CrewAI adds its own
    ``security_context`` key to every call's arguments.
    """
    name = "".join(part.title() for part in str(schema["name"]).split("_"))
    return _object_model(f"{name}Args", schema["input_schema"], ConfigDict(extra="ignore"))


def _object_model(name: str, node: Mapping[str, Any], config: ConfigDict) -> type[BaseModel]:
    required = set(node.get("required", ()))
    fields: dict[str, Any] = {}
    for prop, spec in node.get("properties", {}).items():
        kind = _field_type(f"{name.removesuffix('Args')}{prop.title().replace('_', '')}", spec)
        bounds = _bounds(spec)
        description = _describe(spec)
        if prop in required:
            fields[prop] = (kind, Field(description=description, **bounds))
        else:
            fields[prop] = (kind | None, Field(default=None, description=description, **bounds))
    model: type[BaseModel] = create_model(name, __config__=config, **fields)
    return model


def _field_type(name: str, spec: Mapping[str, Any]) -> Any:
    if "enum" in spec:
        return Literal[tuple(spec["enum"])]
    kind = spec.get("type")
    if kind == "array":
        return list[_field_type(name, spec.get("items", {}))]  # type: ignore[misc]
    if kind == "object" and "properties" in spec:
        # A nested object forbids what its schema does not declare, as the schema does.
        return _object_model(name, spec, ConfigDict(extra="forbid"))
    return _SCALARS.get(kind, Any)


_SCALARS: dict[Any, Any] = {"string": str, "integer": int, "number": float, "boolean": bool,
                            "object": dict[str, Any]}


def _describe(spec: Mapping[str, Any]) -> str | None:
    """A field's description; for a list of objects, with the objects' fields spelled out.

    CrewAI shows the model each argument's description and type name only, so without
    this the fields of a nested object (an entity's kind, name and role) stay unseen.
    """
    description = spec.get("description")
    items = spec.get("items", {})
    if spec.get("type") != "array" or items.get("type") != "object":
        return description
    required = set(items.get("required", ()))
    fields = []
    for prop, sub in items.get("properties", {}).items():
        kind = "|".join(map(str, sub["enum"])) if "enum" in sub else str(sub.get("type", "any"))
        fields.append(f"{prop} ({kind}{', required' if prop in required else ''})")
    shape = f"Each item is an object with {', '.join(fields)}."
    return f"{description} {shape}" if description else shape


def _bounds(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The schema's size and range limits as pydantic ``Field`` constraints."""
    names = {"minItems": "min_length", "maxItems": "max_length", "minLength": "min_length",
             "maxLength": "max_length", "minimum": "ge", "maximum": "le"}
    return {names[key]: value for key, value in spec.items() if key in names}


# -- tools ----------------------------------------------------------------------------


class MemoryTool(BaseTool):
    """One Retold memory tool for a crew agent; it runs for the principal of the
    :class:`CrewMemory` that built it."""

    _memory: CrewMemory = PrivateAttr()

    def __init__(self, schema: ToolSchema, memory: CrewMemory) -> None:
        super().__init__(name=str(schema["name"]), description=str(schema["description"]),
                         args_schema=args_model(schema))
        self._memory = memory

    def _run(self, **arguments: Any) -> str:
        return self._memory.run_tool(self.name, arguments)


# -- model wrapper --------------------------------------------------------------------


class MemoryLLM(BaseLLM):
    """A crew agent's model with the memory side of each task added: see
    :meth:`CrewMemory.wrap_llm`. Everything else goes to the wrapped model."""

    def __init__(self, inner: BaseLLM, memory: CrewMemory) -> None:
        # Set before the base initialiser, which assigns ``stop`` through the property.
        self._inner = inner
        self._memory = memory
        super().__init__(model=inner.model, temperature=inner.temperature)

    @property
    def inner(self) -> BaseLLM:
        """The wrapped model."""
        return self._inner

    @property
    def stop(self) -> list[str]:
        return self._inner.stop

    @stop.setter
    def stop(self, value: list[str]) -> None:
        # The executor sets its stop words on the agent's model; the wrapped one needs them.
        self._inner.stop = value

    def call(self, messages: Any, tools: Any = None, callbacks: Any = None,
             available_functions: Any = None, from_task: Any = None, from_agent: Any = None,
             response_model: Any = None) -> Any:
        first = self._memory.first_call(from_task)
        messages = self._memory.model_input(messages, from_task)

        def ask(shown: Any) -> Any:
            return self._inner.call(shown, tools=tools, callbacks=callbacks,
                                    available_functions=available_functions, from_task=from_task,
                                    from_agent=from_agent, response_model=response_model)

        reply = ask(messages)
        return self._memory.decided(messages, reply, ask) if first else reply

    def supports_stop_words(self) -> bool:
        return self._inner.supports_stop_words()

    def supports_function_calling(self) -> bool:
        check = getattr(self._inner, "supports_function_calling", None)
        return bool(check()) if callable(check) else False

    def get_context_window_size(self) -> int:
        return self._inner.get_context_window_size()

    def get_token_usage_summary(self) -> UsageMetrics:
        return self._inner.get_token_usage_summary()


# -- the memory side of one crew agent ------------------------------------------------


class CrewMemory:
    """One crew agent's conversation with memory, for the principal given at construction:
    the agent id (``agent_id``, else derived from ``role``), ``inputs["user_id"]``,
    ``inputs["session_id"]`` (a new session id when absent) and ``project_id`` (the
    argument, else ``inputs["project_id"]``)."""

    def __init__(self, rt: Runtime, *, role: str, inputs: Mapping[str, Any],
                 agent_id: str | None = None, project_id: str | None = None) -> None:
        user_id = inputs.get("user_id")
        if not isinstance(user_id, str) or not user_id:
            raise ValueError("the crew inputs carry no user_id; Retold needs to know whose memory this is")
        session_id = inputs.get("session_id")
        project = project_id if project_id is not None else inputs.get("project_id")
        self.role = role
        self._rt = rt
        self.session: MemorySession = rt.session(
            agent_id or agent_id_for(role), user_id,
            session_id=str(session_id) if session_id else None,
            project_id=str(project) if project else None)
        self._lock = threading.RLock()
        self._tasks: dict[str, int] = {}  # task id -> where its recalled block sits (-1: none)
        self._blocks: dict[str, str] = {}  # task id -> its recalled block
        # The text of the last memory tool result: CrewAI may append its own reminder to
        # what the model sees, and the recorded turn should be the tool's own answer.
        self._tool_text: str | None = None
        # Step objects already recorded, kept alive so an id is never reused for another.
        self._seen: dict[int, object] = {}
        self._open_result: str | None = None  # the tool result whose AgentAction is due

    # -- building blocks ----------------------------------------------------------------

    def tools(self) -> list[BaseTool]:
        """The memory tools to give the agent: those the session's grants allow now (call
        again after a grant changes); in ``host_only`` mode ``memory_search`` is left out,
        because the host searches."""
        return [MemoryTool(schema, self) for schema in self.session.tool_schemas()]

    def wrap_llm(self, llm: BaseLLM | str) -> MemoryLLM:
        """``llm`` with this session's memory side: before a task's first model call the
        task description is recorded as the user turn, and in ``host_only`` and ``hybrid``
        modes the host-issued recall, when it finds something, is added once to the task's
        messages as one message under the ``recalled memory`` header.

        With ``RETOLD_SCRIPTED_MODEL`` set, a scripted stand-in
        (:class:`retold.testing.crewai_llm.ScriptedCrewLLM`) takes the model's place and
        nothing is sent anywhere; a model named by a string is then never even built, so
        no key is asked for."""
        if self._rt.scripted_model:
            from retold.testing.crewai_llm import ScriptedCrewLLM

            named = llm if isinstance(llm, str) else str(getattr(llm, "model", type(llm).__name__))
            log.warning("RETOLD_SCRIPTED_MODEL is set: a scripted stand-in replaces %s", named)
            llm = ScriptedCrewLLM(standing_in_for=named)
        elif isinstance(llm, str):
            from crewai import LLM

            llm = LLM(model=llm)
        return MemoryLLM(llm, self)

    def backstory(self, backstory: str = "") -> str:
        """``backstory``, then the session's profile block (when it shows anything), then the
        memory-use policy for the configured trigger mode. Built once, as the agent is:
        the profile never changes during the kickoff."""
        return self.session.system_prompt(backstory)

    def step_callback(self, step: Any) -> None:
        """Record one agent step: a tool result as a ``tool`` turn, a final answer as an
        ``assistant`` turn, each once. A step that only calls a tool records nothing of
        its own.

        CrewAI reports a tool step twice (its result, then the action carrying the same
        result); the second report is skipped, as is any step object seen before.
        """
        with self._lock:
            if id(step) in self._seen:
                return
            self._seen[id(step)] = step
            if isinstance(step, ToolResult):
                self._record_tool(str(step.result))
                self._open_result = str(step.result)
            elif isinstance(step, AgentAction):
                due, self._open_result = self._open_result, None
                if step.result is not None and step.result != due:
                    self._record_tool(step.result)
            elif isinstance(step, AgentFinish):
                self._open_result = None
                if str(step.output).strip():
                    self.session.say("assistant", str(step.output))

    def agent(self, *, llm: BaseLLM | str, goal: str, backstory: str = "", tools: Sequence[BaseTool] = (),
              step_callback: Callable[[Any], Any] | None = None, **kwargs: Any) -> Agent:
        """A crew ``Agent`` with this memory: the role given at construction, the memory
        tools after ``tools``, the wrapped model, the policy in the backstory and the step
        recorder (run before ``step_callback`` when one is given). Other keyword
        arguments pass through to ``Agent``. ``llm`` may be a model name such as
        ``"anthropic/claude-sonnet-4-6"`` (built as ``crewai.LLM``).

        The tool cache is off: a cached memory result would be served without running
        the tool, so a search would not see a write made since.
        """
        callback: Callable[[Any], None] = self.step_callback
        if step_callback is not None:
            user_callback = step_callback

            def callback(step: Any) -> None:
                self.step_callback(step)
                user_callback(step)

        kwargs.setdefault("cache", False)
        return Agent(role=self.role, goal=goal, backstory=self.backstory(backstory),
                     tools=[*tools, *self.tools()], llm=self.wrap_llm(llm),
                     step_callback=callback, **kwargs)

    def end_session(self) -> None:
        """End the session and schedule its extraction; a second call does nothing."""
        with self._lock:
            self.session.end()

    # -- called by the tools and the model wrapper --------------------------------------

    def run_tool(self, name: str, arguments: Mapping[str, Any]) -> str:
        """Run one memory tool call and return the text the model sees."""
        # CrewAI passes every declared argument, None for the ones the model left out.
        # No Retold field accepts null, so dropping them restores the call as made.
        payload = openai_arguments(arguments)
        with self._lock:
            text = self.session.text(name, self.session.call(name, payload))
            self._tool_text = text
        return text

    def model_input(self, messages: Any, task: Any) -> Any:
        """The messages for one model call: on a task's first call its description is
        recorded and its recall run; the recalled block, when there is one, sits where
        it was first added, after the messages of that first call."""
        key = str(getattr(task, "id", "")) if task is not None else ""
        with self._lock:
            if key and key not in self._tasks:
                description = str(getattr(task, "description", "") or "").strip()
                if description:
                    self.session.say("user", description)
                block = self.session.recall()
                if block is not None:
                    self._blocks[key] = block
                self._tasks[key] = len(messages) if isinstance(messages, list) else -1
            block = self._blocks.get(key)
            where = self._tasks.get(key, -1)
        if block is None:
            return messages
        if isinstance(messages, str):
            return f"{messages}\n\n{block}"
        return [*messages[:where], {"role": "user", "content": block}, *messages[where:]]

    def first_call(self, task: Any) -> bool:
        """Whether the next model call is ``task``'s first (its description not yet recorded)."""
        key = str(getattr(task, "id", "")) if task is not None else ""
        with self._lock:
            return bool(key) and key not in self._tasks

    def decided(self, messages: Any, reply: Any, ask: Callable[[Any], Any]) -> Any:
        """The utility-aware path for a task's first model call: when ``reply`` is already
        a final answer, the orchestrator decides from it whether recalled records should
        change it, and ``ask`` is called once more with them appended only when it says
        so. A first reply that is an action (a tool call) is not an answer and skips."""
        draft = _finish(reply) if self.session.decides else None
        if draft is None:
            return reply

        def regenerate(block: str) -> str:
            again = ask(f"{messages}\n\n{block}" if isinstance(messages, str)
                        else [*messages, {"role": "user", "content": block}])
            if _finish(again) is None:
                raise ValueError("the regenerated reply is not a final answer")
            return str(again)

        with self._lock:
            served = self.session.decide(str(draft.output), regenerate)
        # The judge read the answer alone; the framework gets the whole text it parses.
        return served.reply if served is not None and served.regenerated else reply

    def _record_tool(self, shown: str) -> None:
        own, self._tool_text = self._tool_text, None
        self.session.say("tool", own if own is not None and shown.startswith(own) else shown)

    def __enter__(self) -> CrewMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.end_session()


def _finish(reply: Any) -> AgentFinish | None:
    """``reply`` as a final answer, or None for an action, a native tool call or text the
    parser cannot read."""
    if not isinstance(reply, str):
        return None
    try:
        step = parse_step(reply)
    except OutputParserError:
        return None
    return step if isinstance(step, AgentFinish) else None
