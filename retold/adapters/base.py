"""MemorySession: what every integration shares, and the short path for a host with no
agent framework.

A session keeps the principal (following an idle split to its new session id), records
each human, assistant and tool message once and in order, builds the current-turn
context a search carries, offers the tools in a provider's format for the grants that
hold now, turns results into model text, and ends the session (which schedules its
extraction) on exit::

    with rt.session("research-agent", "aditya") as s:
        s.say("user", "Keep answers concise.")
        s.write("Aditya prefers concise answers.", attribute="answer_style",
                source_kind="user_statement", evidence="Keep answers concise.")
        print(s.text("memory_search", s.search("answer style")))
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal

from retold.config import Config
from retold.config.retrieval import TriggerMode
from retold.errors import StoreError
from retold.ingest.session import SessionHooks
from retold.models import Principal, ProfileBlock, Role, SearchRequest
from retold.policy.prompt import RECALLED_HEADER, MemoryPolicy, memory_policy
from retold.retrieve.profile import ProfileAssembler
from retold.store import Store
from retold.tools.export import anthropic_tools, openai_tools, result_text
from retold.tools.handlers import ToolHandlers
from retold.tools.schemas import ToolSchema, tool_schemas
from retold.utility.decision import TurnDecision
from retold.utility.orchestrator import Served, TurnInput, UtilityOrchestrator

__all__ = ["RECALLED_HEADER", "MemorySession", "Message", "new_session_id", "registered_schemas"]

log = logging.getLogger(__name__)

Provider = Literal["anthropic", "openai"]


@dataclass(frozen=True)
class Message:
    """One conversation message as a host sees it."""

    role: Role
    content: str


class MemorySession:
    """One conversation with memory for one principal. Build it with ``rt.session(...)``."""

    def __init__(self, tools: ToolHandlers, hooks: SessionHooks, store: Store, config: Config,
                 principal: Principal, *, profiles: ProfileAssembler | None = None,
                 orchestrator: UtilityOrchestrator | None = None) -> None:
        self._tools, self._hooks, self._store, self._config = tools, hooks, store, config
        self._principal = principal
        self._profiles = profiles
        self._orchestrator = orchestrator
        self.last_decision: TurnDecision | None = None  # the newest turn's, when the orchestrator ran
        self._profile: ProfileBlock | None = None
        self._recorded: list[Message] = []
        self._recalled_upto = 0  # recorded messages whose user turns were already recalled for
        self._policy_logged = False
        self._ended = False
        hooks.on_session_start(principal)

    @property
    def principal(self) -> Principal:
        """The principal to use now: after an idle split it names the new session."""
        return self._principal

    # -- turns ------------------------------------------------------------------------

    def say(self, role: Role, content: str) -> None:
        """Record one message (``user``, ``assistant`` or ``tool``, the tool's result text)."""
        self._principal = self._hooks.on_turn(self._principal, role, content)
        self._recorded.append(Message(role, content))

    def sync(self, messages: Iterable[Message | tuple[str, str]]) -> int:
        """Record the messages of a replayed history that this session has not recorded
        yet; return how many were new.

        Frameworks often hand over the whole conversation on every call. The history is
        taken as growing at its end: messages already recorded, in order, are skipped, so
        replaying it records each message exactly once.
        """
        history = [m if isinstance(m, Message) else Message(m[0], m[1]) for m in messages]  # type: ignore[arg-type]
        known = self._recorded
        if history[: len(known)] != known:
            raise ValueError("the history does not continue the recorded conversation; "
                             "start a new session for a different conversation")
        new = history[len(known):]
        for message in new:
            self.say(message.role, message.content)
        return len(new)

    def context(self) -> str:
        """The current turn for a search: the last user message and the assistant reply
        after it, cut to ``retrieval.rewrite.max_context_chars`` (the newest text kept)."""
        last_user = max((i for i, m in enumerate(self._recorded) if m.role == "user"), default=None)
        if last_user is None:
            return ""
        return self._shown([m for m in self._recorded[last_user:] if m.role != "tool"][:2])

    # -- tools ------------------------------------------------------------------------

    def call(self, name: str, payload: object) -> dict[str, Any]:
        """Run one tool call for this principal; a search carries the current-turn context."""
        context = (self.context() or None) if name == "memory_search" else None
        return self._tools.call(name, self._principal, payload, context=context)

    def search(self, *queries: str, k: int | None = None, **filters: Any) -> dict[str, Any]:
        """``memory_search`` with one to three queries (``types``, ``entities``, ``since``,
        ``until``, ``include_history``, ``as_of`` as keyword filters; times are ISO 8601
        text, as the tool takes them)."""
        payload: dict[str, Any] = {"queries": list(queries), **filters}
        if k is not None:
            payload["k"] = k
        return self.call("memory_search", payload)

    def write(self, content: str, *, attribute: str | None = None, type: str = "semantic",  # noqa: A002
              source_kind: str = "agent_inference", evidence: str | None = None,
              entities: Sequence[Mapping[str, Any]] = (), **fields: Any) -> dict[str, Any]:
        """``memory_write`` for one memory; a ``user_statement`` needs the user's own words
        as ``evidence``, quoted from a recorded turn."""
        payload: dict[str, Any] = {"type": type, "content": content, "source_kind": source_kind,
                                   **fields}
        for key, value in (("attribute", attribute), ("evidence", evidence)):
            if value is not None:
                payload[key] = value
        if entities:
            payload["entities"] = [dict(e) for e in entities]
        return self.call("memory_write", payload)

    @property
    def mode(self) -> TriggerMode:
        """Who issues searches: ``tool_only`` (the model), ``host_only`` (the host) or ``hybrid``."""
        return self._config.retrieval.trigger.mode

    def tool_schemas(self) -> list[ToolSchema]:
        """The tools to register now. ``memory_write`` and its targets follow the current
        grants (call again after a grant changes); in ``host_only`` mode the host searches, so
        ``memory_search`` is not offered."""
        return registered_schemas(self.mode, self._tools.schemas(self._principal))

    def tools(self, provider: Provider = "anthropic", *, strict: bool = True) -> list[dict[str, Any]]:
        """:meth:`tool_schemas` in ``provider``'s format."""
        if provider == "anthropic":
            return anthropic_tools(self.tool_schemas())
        return openai_tools(self.tool_schemas(), strict=strict)

    def recall(self) -> str | None:
        """The host-issued search for the newest user turn, in ``host_only`` and ``hybrid`` modes:
        the block to show the model under :data:`RECALLED_HEADER`, or None.

        One search per new user turn, never for assistant or tool turns; a turn shorter
        than ``retrieval.trigger.host_min_query_chars`` is skipped with a
        ``trigger.skipped`` event. The search uses ``host_k`` and the host-issued gate threshold and
        is logged with trigger ``host``; an empty result shows nothing. With
        ``utility.enabled`` the host's memory is decided by :meth:`respond` instead, and
        this returns None.
        """
        if self.mode == "tool_only" or self._orchestrator is not None:
            return None
        users = [i for i, m in enumerate(self._recorded) if m.role == "user" and i >= self._recalled_upto]
        if not users:
            return None
        self._recalled_upto = len(self._recorded)
        text = self._recorded[users[-1]].content.strip()
        trigger = self._config.retrieval.trigger
        if len(text) < trigger.host_min_query_chars:
            self._store.append_event("trigger.skipped", self._principal.agent_id, {
                "session_id": self._principal.session_id, "chars": len(text),
                "min_chars": trigger.host_min_query_chars})
            return None
        result = self._tools.search(self._principal, SearchRequest(
            queries=[text], context=self.context() or None, k=trigger.host_k, trigger="host"))
        if not result["results"]:
            return None
        return f"{RECALLED_HEADER}\n{result['rendered']}"

    def respond(self, model_call: Callable[[str | None], str]) -> str:
        """Answer the newest user turn and record the reply as the assistant's turn.

        ``model_call(recalled)`` asks the host's model for a reply, with ``recalled`` (a
        block under :data:`RECALLED_HEADER`) appended to its input when it is not None.
        Without the orchestrator it is called once, with :meth:`recall`'s block. With it
        (``utility.enabled`` in ``host_only`` or ``hybrid``) the first call is the draft,
        made without memory, and :meth:`decide` chooses what to serve.
        """
        if self._orchestrator is None:
            reply = model_call(self.recall())
        else:
            draft = model_call(None)
            served = self.decide(draft, model_call)
            reply = draft if served is None else served.reply
        self.say("assistant", reply)
        return reply

    def decide(self, draft: str, regenerate: Callable[[str], str]) -> Served | None:
        """The orchestrator's decision for the newest user turn, given the model's
        ``draft`` (made without recalled memory): the reply to serve and why. A second
        model call, ``regenerate(block)``, happens only when records the draft needs were
        admitted under a bundle with a recorded pass; any failure serves the draft. None
        when the orchestrator is off or no user turn is recorded. Records nothing: the
        caller records the reply it serves. The decision is also kept in
        :attr:`last_decision` and the store."""
        users = [i for i, m in enumerate(self._recorded) if m.role == "user"]
        if self._orchestrator is None or not users:
            return None
        profile = self.profile
        turn = TurnInput(self._principal, users[-1], self._recorded[users[-1]].content,
                         self._context_before(users[-1]), profile.text if profile is not None else "")
        served = self._orchestrator.respond(turn, draft, regenerate)
        self.last_decision = served.decision
        return served

    @property
    def decides(self) -> bool:
        """Whether host-issued memory goes through the orchestrator (:meth:`decide`)."""
        return self._orchestrator is not None

    def _context_before(self, index: int) -> str:
        """The two messages before ``index`` (tool results left out), as :meth:`context` cuts."""
        return self._shown([m for m in self._recorded[:index] if m.role != "tool"][-2:])

    def _shown(self, messages: Sequence[Message]) -> str:
        """``messages`` as ``role: text`` lines, cut to ``retrieval.rewrite.max_context_chars``
        with the newest text kept."""
        text = "\n".join(f"{m.role}: {m.content}" for m in messages)
        limit = self._config.retrieval.rewrite.max_context_chars
        return text if len(text) <= limit else text[-limit:]

    @staticmethod
    def text(name: str, result: Mapping[str, Any]) -> str:
        """A tool result as the text to hand back to the model."""
        return result_text(name, result)

    @property
    def policy(self) -> MemoryPolicy:
        """The memory-use policy for the configured trigger mode; its version is recorded
        on the session the first time it is read, so an answer can be traced to it."""
        policy = memory_policy(self._config.retrieval.trigger.mode)
        if not self._policy_logged:
            self._store.append_event("session.policy", self._principal.agent_id, {
                "session_id": self._principal.session_id, "mode": policy.mode,
                "version": policy.version})
            self._policy_logged = True
        return policy

    @property
    def profile(self) -> ProfileBlock | None:
        """The session's profile block (None without a profile assembler): assembled and
        stored with the session on first read, then the same bytes for the rest of the
        conversation, idle splits included, so the system prompt never changes mid-session.
        Adapters read it before the first model call."""
        if self._profile is None and self._profiles is not None:
            try:
                self._profile = self._profiles.for_session(self._principal)
            except StoreError as exc:
                # A store that cannot keep the block (read-only, locked) still shows it:
                # this session holds it for every turn, untraced.
                log.warning("profile for session %s not stored: %s", self._principal.session_id, exc)
                self._profile = self._profiles.assemble(self._principal)
        return self._profile

    def system_prompt(self, base: str = "") -> str:
        """``base``, then the profile block, then the memory-use policy: the text the
        adapters put in the system prompt (CrewAI: the backstory)."""
        profile = self.profile
        parts = [base.rstrip()] if base.strip() else []
        if profile is not None and profile.text:
            parts.append(profile.text)
        parts.append(self.policy.text)
        return "\n\n".join(parts)

    # -- end --------------------------------------------------------------------------

    def end(self) -> None:
        """End the session and schedule its extraction; a second call does nothing."""
        if not self._ended:
            self._ended = True
            self._hooks.on_session_end(self._principal)

    def __enter__(self) -> MemorySession:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.end()


def registered_schemas(mode: TriggerMode, schemas: Sequence[ToolSchema] | None = None) -> list[ToolSchema]:
    """The tools a host registers in trigger ``mode``: ``schemas`` (by default the static
    contract, for frameworks that register tools before any principal exists) without
    ``memory_search`` in ``host_only`` mode, where the host searches instead of the model."""
    chosen = list(tool_schemas(None) if schemas is None else schemas)
    return [s for s in chosen if not (mode == "host_only" and s["name"] == "memory_search")]


def new_session_id() -> str:
    """A fresh session id for a host that has none of its own."""
    return f"sess_{uuid.uuid4().hex[:16]}"
