"""Retold memory for LangChain Deep Agents (the ``deepagents`` package).

:class:`RetoldDeepAgents` gives a deep agent the five memory tools and one middleware.
The principal comes from the run config, never from the model: ``configurable`` carries
``agent_id``, ``user_id``, ``thread_id`` (the session id) and optionally ``project_id``::

    memory = RetoldDeepAgents(rt)
    agent = memory.create_agent("anthropic:claude-sonnet-4-6", system_prompt="You help Aditya.")
    config = {"configurable": {"thread_id": "t-42", "agent_id": "research-agent",
                               "user_id": "aditya"}}
    agent.invoke({"messages": [{"role": "user", "content": "Keep answers short."}]}, config)
    memory.end_session(config)  # ends the session and schedules its extraction

The middleware keeps one ``MemorySession`` per thread. Before each model call it records
the conversation's new human, AI and tool messages (the framework replays the whole
history; ``MemorySession.sync`` records each message once), runs the host-issued recall
in ``host_only`` and ``hybrid`` modes, offers the memory tools the current grants allow, and
adds the session's profile block and the memory-use policy to the end of the system
prompt. After the run it records the
final reply. What it adds to the model input (the policy, recalled memory) never becomes
a recorded turn.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.config import get_config
from langgraph.runtime import Runtime as GraphRuntime

from retold.adapters.base import MemorySession, Message, registered_schemas
from retold.models import Principal
from retold.runtime import Runtime
from retold.tools.schemas import TOOL_NAMES, ToolSchema

__all__ = ["RECALL_TOOL", "RetoldDeepAgents", "RetoldMemoryMiddleware", "transcript"]

log = logging.getLogger(__name__)

# The pseudo-tool whose call and result carry recalled memory to the model. It is not a
# registered tool: the pair exists only in the model's input.
RECALL_TOOL = "recalled_memory"
# Marks the tools this adapter built, so the middleware swaps only those for the current
# session's schemas and leaves every other tool alone.
_MARK = "retold_memory_tool"

def transcript(messages: Iterable[AnyMessage]) -> list[Message]:
    """The conversation as Retold records it: human messages as ``user``, AI messages as
    ``assistant`` (their text; a step that only calls tools has none and records
    nothing) and tool messages as ``tool`` (the result text)."""
    out: list[Message] = []
    for message in messages:
        text = str(message.text)
        if not text.strip():
            continue
        if isinstance(message, HumanMessage):
            out.append(Message("user", text))
        elif isinstance(message, AIMessage):
            out.append(Message("assistant", text))
        elif isinstance(message, ToolMessage):
            out.append(Message("tool", text))
    return out


@dataclass
class _Thread:
    """The memory side of one conversation thread."""

    session: MemorySession
    owner: tuple[str, str, str | None]  # agent, user and project the thread belongs to
    offset: int = 0  # transcript messages recorded by earlier, ended sessions of the thread
    recorded: int = 0  # transcript messages recorded so far, offset included
    # Recalled blocks stay where they first appeared (after the user message they were
    # recalled for) on every later call, so the model input only ever grows at its end.
    recalled: list[tuple[str, AIMessage, ToolMessage]] = field(default_factory=list)
    # Turns an earlier process stored for this thread, matched once against the replayed
    # history so a restarted host does not record them a second time.
    stored: list[Message] | None = None
    diverged: bool = False
    lock: threading.RLock = field(default_factory=threading.RLock)

    def record(self, messages: Sequence[AnyMessage]) -> None:
        """Record the messages of the state that are not recorded yet."""
        if self.diverged:
            return
        history = transcript(messages)
        if self.stored is not None:
            if history[: len(self.stored)] == self.stored:
                self.offset = self.recorded = len(self.stored)
            self.stored = None
        try:
            self.recorded += self.session.sync(history[self.offset:])
        except ValueError:
            # A rewritten history (a state edit, a run without a checkpointer that passes
            # only the newest message) cannot be matched to recorded turns; recording
            # stops for this thread rather than failing the agent.
            self.diverged = True
            log.warning("thread %s: the message history no longer continues the recorded "
                        "conversation; run the agent with a checkpointer (or pass the whole "
                        "history) so turns can be recorded", self.session.principal.session_id)

    def recall(self, messages: Sequence[AnyMessage]) -> None:
        """Run the host-issued search for a new user turn and keep its block."""
        block = self.session.recall()
        if block is not None:
            self.keep(messages, self.pair(block))

    def pair(self, block: str) -> tuple[AIMessage, ToolMessage]:
        """``block`` as the pseudo-tool's call and result."""
        call_id = f"{RECALL_TOOL}_{len(self.recalled) + 1}"
        call = AIMessage(content="", tool_calls=[
            {"name": RECALL_TOOL, "args": {}, "id": call_id, "type": "tool_call"}])
        return call, ToolMessage(content=block, tool_call_id=call_id, name=RECALL_TOOL)

    def keep(self, messages: Sequence[AnyMessage], pair: tuple[AIMessage, ToolMessage]) -> None:
        """Show ``pair`` after the newest user message on this and every later call."""
        anchor = next((m.id for m in reversed(messages) if isinstance(m, HumanMessage)), None)
        if anchor is not None:
            self.recalled.append((anchor, *pair))

    def model_input(self, messages: Sequence[AnyMessage]) -> list[AnyMessage]:
        """``messages`` with each recalled pair right after the user message it belongs to;
        a pair whose message is no longer in view (summarised away) is left out."""
        pairs: dict[str, list[AnyMessage]] = {}
        for anchor, call, result in self.recalled:
            pairs.setdefault(anchor, []).extend((call, result))
        out: list[AnyMessage] = []
        for message in messages:
            out.append(message)
            if message.id is not None and isinstance(message, HumanMessage):
                out.extend(pairs.get(message.id, ()))
        return out


class RetoldDeepAgents:
    """Retold memory for deep agents built on one runtime: tools, middleware, agent
    construction and the end of each thread's session."""

    def __init__(self, rt: Runtime) -> None:
        self._rt = rt
        self._threads: dict[str, _Thread] = {}
        self._ended: dict[str, tuple[tuple[str, str, str | None], int]] = {}
        self._lock = threading.Lock()

    # -- sessions ---------------------------------------------------------------------

    def session(self, config: RunnableConfig | Mapping[str, Any]) -> MemorySession:
        """The thread's session, opened on first use."""
        return self._thread(config).session

    def end_session(self, config: RunnableConfig | Mapping[str, Any]) -> None:
        """End the thread's session and schedule its extraction. A later run on the same
        thread continues in a new session with only the messages that follow."""
        thread_id, owner = _principal_parts(config)
        with self._lock:
            thread = self._threads.get(thread_id)
            if thread is not None:
                _same_owner(thread_id, thread.owner, owner)
                del self._threads[thread_id]
                self._ended[thread_id] = (owner, thread.recorded)
        if thread is not None:
            with thread.lock:
                thread.session.end()
            return
        # A thread this process never ran (the host restarted): end its stored session.
        row = self._rt.store.get_session(thread_id)
        if row is not None:
            _same_owner(thread_id, (row.agent_id, row.user_id, row.project_id), owner)
            self._rt.hooks.on_session_end(Principal(*owner[:2], thread_id, owner[2]))

    def _thread(self, config: RunnableConfig | Mapping[str, Any]) -> _Thread:
        thread_id, owner = _principal_parts(config)
        with self._lock:
            thread = self._threads.get(thread_id)
            if thread is None:
                thread = self._open(thread_id, owner)
                self._threads[thread_id] = thread
        _same_owner(thread_id, thread.owner, owner)
        return thread

    def _open(self, thread_id: str, owner: tuple[str, str, str | None]) -> _Thread:
        stored: list[Message] | None = None
        if thread_id in self._ended:
            # Ended here earlier: the next session takes only the messages that follow.
            previous_owner, offset = self._ended.pop(thread_id)
            _same_owner(thread_id, previous_owner, owner)
        else:
            offset = 0
            row = self._rt.store.get_session(thread_id)
            if row is not None:
                _same_owner(thread_id, (row.agent_id, row.user_id, row.project_id), owner)
                stored = [Message(t.role, t.content) for t in self._rt.store.turns(thread_id)] or None
        agent_id, user_id, project_id = owner
        session = self._rt.session(agent_id, user_id, session_id=thread_id, project_id=project_id)
        return _Thread(session, owner, offset=offset, recorded=offset, stored=stored)

    # -- tools and middleware ---------------------------------------------------------

    def tools(self) -> list[BaseTool]:
        """The memory tools to register with the agent. Each model call then sees the
        ones the session's grants allow, with its ``write_target`` choices; in ``host_only``
        mode the host searches, so ``memory_search`` is not registered."""
        schemas = registered_schemas(self._rt.config.retrieval.trigger.mode)
        return [self._tool(schema) for schema in schemas]

    def middleware(self) -> RetoldMemoryMiddleware:
        """The middleware that records turns, recalls memory and adds the policy."""
        return RetoldMemoryMiddleware(self)

    def create_agent(self, model: Any, *, tools: Sequence[Any] = (),
                     middleware: Sequence[Any] = (), **kwargs: Any) -> Any:
        """``deepagents.create_deep_agent`` with the memory tools and middleware added;
        every other argument (``system_prompt``, ``checkpointer``, ...) passes through.
        With ``RETOLD_SCRIPTED_MODEL`` set, ``model`` is replaced by a scripted stand-in
        (:class:`retold.testing.langchain_chat.ScriptedChatModel`) and never called."""
        # Imported here so the tools and middleware also serve LangChain's own
        # ``create_agent`` where deepagents is not installed.
        from deepagents import create_deep_agent

        if self._rt.scripted_model:
            from retold.testing.langchain_chat import ScriptedChatModel

            log.warning("RETOLD_SCRIPTED_MODEL is set: a scripted stand-in replaces %s", model)
            named = model if isinstance(model, str) else type(model).__name__
            model = ScriptedChatModel(standing_in_for=named)
        return create_deep_agent(model=model, tools=[*tools, *self.tools()],
                                 middleware=[*middleware, self.middleware()], **kwargs)

    def _tool(self, schema: ToolSchema) -> StructuredTool:
        name = str(schema["name"])

        def run(run_config: RunnableConfig, **payload: Any) -> str:
            thread = self._thread(run_config)
            with thread.lock:
                return thread.session.text(name, thread.session.call(name, payload))

        return StructuredTool(name=name, description=str(schema["description"]),
                              args_schema=schema["input_schema"], func=run,
                              metadata={_MARK: True})

    def _current_tools(self, session: MemorySession, tools: Sequence[Any]) -> list[Any]:
        """``tools`` with this adapter's tools replaced by the session's current schemas
        in place (order kept) and the ones it may not use now left out."""
        current = {s["name"]: s for s in session.tool_schemas()}
        out: list[Any] = []
        for tool in tools:
            if isinstance(tool, BaseTool) and (tool.metadata or {}).get(_MARK) and tool.name in TOOL_NAMES:
                if tool.name in current:
                    out.append(self._tool(current[tool.name]))
            else:
                out.append(tool)
        return out


class RetoldMemoryMiddleware(AgentMiddleware[AgentState[Any], Any]):
    """Records the conversation, recalls memory and adds the policy around each model
    call of a deep agent. Build it with :meth:`RetoldDeepAgents.middleware`."""

    def __init__(self, adapter: RetoldDeepAgents) -> None:
        super().__init__()
        self._adapter = adapter

    def wrap_model_call(self, request: ModelRequest[Any],
                        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]]) -> ModelResponse[Any]:
        config = get_config()
        prepared = self._prepare(request, config)
        return self._decided(prepared, handler(prepared), handler, config)

    async def awrap_model_call(
        self, request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any]:
        # Recording and recall touch SQLite and the embedder: keep them off the event loop.
        config = get_config()
        prepared = await asyncio.to_thread(self._prepare, request, config)
        draft = await handler(prepared)
        loop = asyncio.get_running_loop()

        def again(changed: ModelRequest[Any]) -> ModelResponse[Any]:
            return asyncio.run_coroutine_threadsafe(handler(changed), loop).result()  # type: ignore[arg-type]

        return await asyncio.to_thread(self._decided, prepared, draft, again, config)

    def after_agent(self, state: AgentState[Any], runtime: GraphRuntime[Any]) -> dict[str, Any] | None:
        # The final reply has no model call after it to record it.
        thread = self._adapter._thread(get_config())
        with thread.lock:
            thread.record(state["messages"])
        return None

    async def aafter_agent(self, state: AgentState[Any], runtime: GraphRuntime[Any]) -> dict[str, Any] | None:
        return await asyncio.to_thread(self.after_agent, state, runtime)

    def _decided(self, prepared: ModelRequest[Any], draft: ModelResponse[Any],
                 handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
                 config: RunnableConfig) -> ModelResponse[Any]:
        """The utility-aware path: for the model call that answers a user message, the
        orchestrator decides from ``draft`` whether recalled records should change it, and
        the model is called once more with them only when it says so. A draft that calls a
        tool is not an answer yet and skips the path; so does every later call of the turn."""
        thread = self._adapter._thread(config)
        session = thread.session
        reply = _reply(draft)
        answers_user = bool(prepared.messages) and isinstance(prepared.messages[-1], HumanMessage)
        if (not session.decides or not answers_user or reply is None or reply.tool_calls
                or not reply.text.strip()):
            return draft
        made: dict[str, Any] = {}

        def regenerate(block: str) -> str:
            pair = thread.pair(block)
            response = handler(prepared.override(messages=[*prepared.messages, *pair]))
            again = _reply(response)
            if again is None or again.tool_calls:
                raise ValueError("the regenerated reply calls a tool instead of answering")
            made.update(response=response, pair=pair)
            return str(again.text)

        with thread.lock:
            served = session.decide(str(reply.text), regenerate)
            if served is None or not served.regenerated:
                return draft
            thread.keep(prepared.messages, made["pair"])
        return made["response"]  # type: ignore[no-any-return]

    def _prepare(self, request: ModelRequest[Any], config: RunnableConfig) -> ModelRequest[Any]:
        thread = self._adapter._thread(config)
        with thread.lock:
            history: list[AnyMessage] = list(request.state["messages"])
            thread.record(history)
            thread.recall(history)
            session = thread.session
            return request.override(
                messages=thread.model_input(request.messages),
                tools=self._adapter._current_tools(session, request.tools),
                system_message=_with_policy(request.system_message, session.system_prompt()),
            )


def _reply(response: Any) -> AIMessage | None:
    """The model's message in a model call's result (a ModelResponse or a bare message)."""
    messages = response.result if isinstance(response, ModelResponse) else [response]
    return next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)


def _with_policy(system: SystemMessage | None, policy: str) -> SystemMessage:
    """The system message with ``policy`` (the session's profile block and the memory-use
    policy) as its last part. Both are fixed for the session, so the prompt prefix stays
    byte-identical from turn to turn."""
    if system is None:
        return SystemMessage(content=policy)
    if policy in system.text:
        return system
    content = system.content
    if isinstance(content, str):
        return system.model_copy(update={"content": f"{content}\n\n{policy}" if content else policy})
    return system.model_copy(update={"content": [*content, {"type": "text", "text": f"\n\n{policy}"}]})


def _principal_parts(config: RunnableConfig | Mapping[str, Any]) -> tuple[str, tuple[str, str, str | None]]:
    """The thread id and its owner from ``config["configurable"]``."""
    configurable: Mapping[str, Any] = config.get("configurable") or {}
    missing = [key for key in ("thread_id", "agent_id", "user_id") if not configurable.get(key)]
    if missing:
        raise ValueError("Retold memory needs config['configurable'] to carry "
                         f"{', '.join(missing)}")
    project = configurable.get("project_id")
    return (str(configurable["thread_id"]),
            (str(configurable["agent_id"]), str(configurable["user_id"]),
             str(project) if project else None))


def _same_owner(thread_id: str, known: tuple[str, str, str | None],
                given: tuple[str, str, str | None]) -> None:
    # A thread's turns and memories belong to one principal; a run that names another
    # must not read or write through this thread's session.
    if known != given:
        raise ValueError(f"thread {thread_id} belongs to another agent, user or project")
