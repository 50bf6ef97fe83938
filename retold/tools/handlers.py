"""ToolHandlers: the five memory tools behind one framework-neutral entry point.

``call(name, principal, payload)`` never raises for bad input: it returns the tool result
or ``{"error": {"code", "message"}}`` and changes nothing. The order inside every handler
is fixed: the payload is checked against the tool's schema first (nothing there
describes a stored target), then the caller's right to read the target, then everything
else. A record or entity the caller cannot read answers exactly like an
id that never existed, so no error confirms that a foreign id exists.

The Principal always comes from the adapter; tool input never names an agent, a grant or
a raw scope id.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal, Protocol, cast

from retold.activation.activator import Activator
from retold.clock import Clock, to_iso
from retold.config import Config
from retold.errors import (
    ModelError,
    StoreCorruptError,
    StoreError,
    StoreFullError,
    StoreLockedError,
    StoreReadOnlyError,
)
from retold.index.vector import VectorIndex
from retold.ingest.ingestor import Ingestor
from retold.ingest.revision import Reviser, RevisionError, StatusAction, is_history, refuse_secrets
from retold.models import Entity, Principal, Record, Scope, SearchRequest, SearchResponse
from retold.policy import grants
from retold.policy.grants import Access
from retold.retrieve.explain import explanation_plain, short_id
from retold.retrieve.retriever import Retriever
from retold.store import Store
from retold.store.entities import EntityMergeError
from retold.store.pins import PinRefusedError
from retold.tools.export import anthropic_tools, openai_tools
from retold.tools.schemas import ToolSchema, tool_schemas
from retold.tools.validation import ToolError, parse_time, search_request, validate_payload, write_request

__all__ = ["ToolHandlers", "ToolParts", "ToolResult"]

ToolResult = dict[str, Any]
"""A JSON-serialisable tool result: the tool's fields, or ``{"error": {...}}``."""

logger = logging.getLogger(__name__)

_SHORT_ID = re.compile(r"[0-9a-f]{8}")
_RECENT_EVENTS = 20
_MAX_LINEAGE = 50  # a supersedes chain longer than this is corrupt data, not history
# What the model is told when the store cannot serve a call; the operator's log line has
# the full message with the file's path.
_STORE_CONDITIONS: dict[type[StoreError], str] = {
    StoreLockedError: "memory is busy with another write; try again shortly",
    StoreReadOnlyError: "memory is read-only here: searches work, but nothing can be saved",
    StoreFullError: "memory storage is full",
    StoreCorruptError: ("memory storage is damaged and needs an administrator (`retold check` finds"
                        " the damage)"),
}
_UNAVAILABLE: tuple[type[Exception], ...] = (*_STORE_CONDITIONS, ModelError)
_FORGET_NOTE = ("forgotten: no tool returns this memory any more; memory_revise action restore brings"
                " it back until <until>, then it is erased for good (an administrator can erase it"
                " now: retold erase --record <id>)")


def _ts(moment: datetime | None) -> str | None:
    return to_iso(moment) if moment is not None else None


class ToolParts(Protocol):
    """What the handlers use; the runtime provides each part, built on first use."""

    @property
    def config(self) -> Config: ...
    @property
    def store(self) -> Store: ...
    @property
    def index(self) -> VectorIndex: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def ingestor(self) -> Ingestor: ...
    @property
    def retriever(self) -> Retriever: ...
    @property
    def reviser(self) -> Reviser: ...
    @property
    def activator(self) -> Activator: ...


def _time(payload: Mapping[str, Any], name: str) -> datetime | None:
    """A validated payload's optional date-time field."""
    return parse_time(name, payload[name]) if name in payload else None


def _not_found(raw_id: str) -> ToolError:
    # One message shape for a missing and an unreadable id, built only from what the
    # caller sent, so no answer confirms that a foreign id exists.
    return ToolError("not_found", f"no memory with id {raw_id}")


def _unavailable(name: str, exc: Exception) -> ToolError:
    """``store_unavailable`` or ``model_unavailable``, in words the model can pass on."""
    if isinstance(exc, ModelError):
        return ToolError("model_unavailable", f"{name} failed: the memory model is unavailable; "
                         "nothing was changed")
    why = next(text for kind, text in _STORE_CONDITIONS.items() if isinstance(exc, kind))
    return ToolError("store_unavailable", f"{name} failed: {why}; nothing was changed")


def _entity_not_found(raw_id: str) -> ToolError:
    return ToolError("not_found", f"no entity with id {raw_id}")


class ToolHandlers:
    """memory_search, memory_get, memory_write, memory_revise and memory_forget. Build it
    once per process; it keeps no per-call state."""

    def __init__(self, parts: ToolParts) -> None:
        self.parts = parts
        self._handlers: dict[str, Callable[[Principal, dict[str, Any], str | None], ToolResult]] = {
            "memory_search": self._search,
            "memory_get": self._get,
            "memory_write": self._write,
            "memory_revise": self._revise,
            "memory_forget": self._forget,
        }

    # -- public surface -------------------------------------------------------------------

    def schemas(self, principal: Principal) -> list[ToolSchema]:
        """The tool schemas to register for this principal's session.

        ``memory_write``'s ``write_target`` enum lists only the labels the principal can
        write now, and the tool is left out when there is none.
        """
        targets = grants.write_targets(self.parts.store, principal)
        return tool_schemas(list(targets), self.parts.config.tools)

    def anthropic_tools(self, principal: Principal) -> list[dict[str, Any]]:
        """This session's tools for the Anthropic Messages API ``tools`` parameter."""
        return anthropic_tools(self.schemas(principal))

    def openai_tools(self, principal: Principal, *, strict: bool = True,
                     api: Literal["chat", "responses"] = "chat") -> list[dict[str, Any]]:
        """This session's tools as OpenAI function tools (strict form by default: pass each
        call's arguments through ``retold.tools.export.openai_arguments``)."""
        return openai_tools(self.schemas(principal), strict=strict, api=api)

    def call(self, name: str, principal: Principal, payload: object, *,
             context: str | None = None) -> ToolResult:
        """Run one tool call; never raises for bad input.

        ``context`` is the adapter's current-turn context for ``memory_search``; the model
        cannot supply it. A store that is locked, read-only, full or damaged answers
        ``store_unavailable``, a model that cannot load ``model_unavailable``, and any other
        failure is logged and answered as ``internal_error``; the store's transaction has
        rolled back by then.
        """
        try:
            validate_payload(name, payload, self.parts.config.tools)
            assert isinstance(payload, dict)  # validate_payload checked the shape
            return self._handlers[name](principal, payload, context)
        except ToolError as err:
            return err.as_result()
        except _UNAVAILABLE as exc:
            logger.warning("memory tool %s failed: %s", name, exc)
            return _unavailable(name, exc).as_result()
        except Exception:
            logger.exception("memory tool %s failed", name)
            return ToolError("internal_error", f"{name} failed unexpectedly; nothing was changed").as_result()

    def search(self, principal: Principal, request: SearchRequest) -> ToolResult:
        """Run a search the adapter built itself (a host-issued ``trigger="host"`` search)
        through the same pipeline and result shape as the tool."""
        retriever = self.parts.retriever
        # The log row goes to the writer once the result is built, not while it is.
        with retriever.search_log.held():
            outcome = retriever.search(principal, request)
            return self._search_result(outcome.scopes, outcome.response, outcome.rendered)

    # -- memory_search ----------------------------------------------------------------------

    def _search(self, principal: Principal, payload: dict[str, Any], context: str | None) -> ToolResult:
        return self.search(principal, search_request(payload, context))

    def _search_result(self, scopes: list[Scope], response: SearchResponse, rendered: str) -> ToolResult:
        # The scopes the search itself read: asking the store for the grants again would
        # cost two queries per search and could disagree with what the search saw.
        readable_entities = self._readable_entities(
            scopes, (eid for r in response.results for eid in r.explanation.entity_ids))
        results = []
        for hit in response.results:
            record = hit.record
            explanation = explanation_plain(hit.explanation)
            # Same rule as memory_get: no entity id from a scope the caller cannot read.
            explanation["entity_ids"] = [e for e in hit.explanation.entity_ids if e in readable_entities]
            results.append({
                "id": record.id, "short_id": short_id(record.id), "content": record.content,
                "type": record.type, "status": record.status, "source_kind": record.source_kind,
                "scope": str(record.scope), "event_at": to_iso(record.event_at),
                "score": float(hit.score), "explanation": explanation,
            })
        return {
            "search_id": response.search_id, "results": results, "empty_reason": response.empty_reason,
            "decision": dict(response.decision), "timings_ms": dict(response.timings_ms),
            "rendered": rendered,
            "rewrite_status": response.rewrite_status, "rewritten_queries": response.rewritten_queries,
        }

    def _readable_entities(self, readable: list[Scope], entity_ids: Iterable[str]) -> set[str]:
        wanted = set(entity_ids)
        if not wanted:
            return set()
        found = self.parts.store.entity_scopes(sorted(wanted))
        return {entity_id for entity_id, scope in found.items() if scope in readable}

    # -- memory_write -----------------------------------------------------------------------

    def _write(self, principal: Principal, payload: dict[str, Any], _context: str | None) -> ToolResult:
        result = self.parts.ingestor.write(principal, write_request(payload), origin="tool")
        if result.error is not None:
            raise ToolError(result.error.code, result.error.message, **result.error.details)
        assert result.record_id is not None  # a landed write names its record
        # After the commit, outside its transaction: a failure here leaves the write standing.
        activation = self.parts.activator.after_write(principal, result.record_id)
        for other in result.rejudge:  # a held contradiction's incumbent goes to review too
            self.parts.activator.after_write(principal, other)
        return {"record_id": result.record_id, "status": result.status, "outcome": result.outcome,
                "note": result.note, "activation": activation.activation,
                "activation_reason": activation.reason, "timings_ms": result.timings_ms}

    # -- memory_get -------------------------------------------------------------------------

    def _get(self, principal: Principal, payload: dict[str, Any], _context: str | None) -> ToolResult:
        access = Access.of(self.parts.store, principal)
        entries: list[ToolResult] = []
        for raw_id in dict.fromkeys(payload["ids"]):  # each id once, in the order asked
            record = self._find(raw_id, access)
            if record is None:
                entries.append({"id": raw_id, **_not_found(raw_id).as_result()})
            elif record.status == "deleted":
                entries.append(self._tombstone(record, access))
            else:
                entries.append(self._full(record, access))
        return {"records": entries}

    def describe(self, record_id: str, principal: Principal | None) -> ToolResult | None:
        """One record as ``memory_get`` shows it: to ``principal`` exactly as the tool
        would, or with None to an operator, who reads every scope (the inspector). None when
        it is missing or the principal cannot read it, alike."""
        access = Access.of(self.parts.store, principal) if principal is not None else Access.everything()
        record = self._find(record_id, access)
        if record is None:
            return None
        return self._tombstone(record, access) if record.status == "deleted" else self._full(record, access)

    def _find(self, raw_id: str, access: Access) -> Record | None:
        """The record behind a full id, or the short id shown in rendered search results,
        when the caller can read it; None answers alike for missing and unreadable."""
        record = self.parts.store.get_record(raw_id)
        if record is None and _SHORT_ID.fullmatch(raw_id):
            # Looked up only inside readable scopes, so a short id never resolves to
            # (or collides visibly with) a foreign record.
            hits = self.parts.store.find_records(id_suffix=raw_id, scopes=access.readable, limit=2)
            record = hits[0] if len(hits) == 1 else None
        if record is None or not access.can_read(record.scope):
            return None
        return record

    def _full(self, record: Record, access: Access) -> ToolResult:
        entities = self._entities(record, access)
        subject_entity = record.subject_entity_id if record.subject_entity_id in entities else None
        lineage = self._lineage(record, access)
        return {
            "id": record.id, "short_id": short_id(record.id), "tombstone": False,
            "type": record.type, "version": record.version, "status": record.status,
            "content": record.content, "attribute": record.attribute,
            "subject_entity_id": subject_entity,
            "subject": f"{subject_entity or '-'}/{record.attribute or '-'}",
            "scope": str(record.scope), "source_kind": record.source_kind,
            "source_ref": record.source_ref, "evidence": record.evidence,
            "creator_agent_id": record.creator_agent_id, "confidence": record.confidence,
            "reinforcements": record.reinforcements, "created_at": to_iso(record.created_at),
            "event_at": to_iso(record.event_at), "expires_at": _ts(record.expires_at),
            "valid_from": _ts(record.valid_from), "valid_until": _ts(record.valid_until),
            "review_at": _ts(record.review_at), "last_reinforced_at": _ts(record.last_reinforced_at),
            "tags": list(record.tags), "pinned": self.parts.store.is_pinned(record.id),
            "supersedes_id": self._readable_id(record.supersedes_id, access),
            "superseded_by": next((e["id"] for e in lineage if e["relation"] == "superseded_by"), None),
            "lineage": lineage,
            "conflicts": [self._summary(other) for other in self._records(
                self.parts.store.conflicts_of(record.id), access)],
            "entities": list(entities.values()),
            "events": self._events(record.id),
        }

    def _tombstone(self, record: Record, access: Access) -> ToolResult:
        """The audit shape only: a forgotten record's content, evidence and source never
        leave the store."""
        return {
            "id": record.id, "short_id": short_id(record.id), "tombstone": True, "status": "deleted",
            "type": record.type, "scope": str(record.scope),
            "content": None, "evidence": None, "source_ref": None,
            "created_at": to_iso(record.created_at), "event_at": to_iso(record.event_at),
            "supersedes_id": self._readable_id(record.supersedes_id, access),
            "restorable_until": _ts(self.parts.reviser.restorable_until(record)),
            "events": self._events(record.id),
        }

    def _summary(self, record: Record, relation: str | None = None) -> ToolResult:
        """A lineage or conflict entry; a forgotten record shows only its audit fields."""
        out: ToolResult = {"relation": relation} if relation else {}
        out |= {"id": record.id, "short_id": short_id(record.id), "status": record.status,
                "type": record.type, "created_at": to_iso(record.created_at),
                "event_at": to_iso(record.event_at)}
        if record.status == "deleted":
            return out | {"tombstone": True, "content": None}
        return out | {"tombstone": False, "version": record.version, "source_kind": record.source_kind,
                      "content": record.content}

    def _lineage(self, record: Record, access: Access) -> list[ToolResult]:
        """The supersession chain both ways, oldest first; each direction stops at the
        first record the caller cannot read."""
        chain = self.parts.store.lineage_ids(record.id)
        by_id = {r.id: r for r in self.parts.store.records(chain)}
        at = chain.index(record.id)
        older: list[ToolResult] = []
        for other in reversed(chain[max(0, at - _MAX_LINEAGE + 1):at]):
            found = by_id.get(other)
            if found is None or not access.can_read(found.scope):
                break
            older.append(self._summary(found, "supersedes"))
        newer: list[ToolResult] = []
        for other in chain[at + 1:at + _MAX_LINEAGE - len(older)]:
            found = by_id.get(other)
            if found is None or not access.can_read(found.scope):
                break
            newer.append(self._summary(found, "superseded_by"))
        return [*reversed(older), *newer]

    def _records(self, ids: Sequence[str], access: Access) -> list[Record]:
        found = (self.parts.store.get_record(i) for i in ids)
        return [r for r in found if r is not None and access.can_read(r.scope)]

    def _readable_id(self, record_id: str | None, access: Access) -> str | None:
        return record_id if record_id and self._records([record_id], access) else None

    def _entities(self, record: Record, access: Access) -> dict[str, ToolResult]:
        """Links whose entity the caller cannot read are left out entirely."""
        out: dict[str, ToolResult] = {}
        for entity_id, role in self.parts.store.record_links(record.id):
            entity: Entity | None = self.parts.store.get_entity(entity_id)
            if entity is not None and access.can_read(entity.scope):
                out[entity_id] = {"id": entity.id, "kind": entity.kind, "canonical": entity.canonical,
                                  "role": role, "status": entity.status}
        return out

    def _events(self, record_id: str) -> list[ToolResult]:
        events = self.parts.store.events(record_id=record_id)[-_RECENT_EVENTS:]
        return [{"kind": e["kind"], "at": e["at"]} for e in events]

    # -- memory_revise ----------------------------------------------------------------------

    def _revise(self, principal: Principal, payload: dict[str, Any], _context: str | None) -> ToolResult:
        if "entity_id" in payload:
            return self._merge(principal, payload)
        access = Access.of(self.parts.store, principal)
        record = self._writable_record(payload["id"], access)
        action, reason = payload["action"], payload["reason"]
        try:
            if action == "restore":
                return self._restore(principal, record, reason)
            if action in ("pin", "unpin"):
                return self._pin(principal, record, action, reason)
            if is_history(record, self.parts.clock.now()):
                raise RevisionError("invalid_input", f"memory {record.id} is history and cannot be revised")
            if action == "supersede":
                rev = self.parts.reviser.supersede(
                    principal, record, content=payload["content"], reason=reason,
                    source_kind=payload.get("source_kind", "agent_inference"),
                    evidence=payload.get("evidence"),
                    # JSON Schema counts 2.0 as an integer; turn numbers are ints.
                    evidence_turn=int(payload["evidence_turn"]) if "evidence_turn" in payload else None,
                    valid_from=_time(payload, "valid_from"), valid_until=_time(payload, "valid_until"),
                )
                # The successor is judged afresh; it never inherits the old activation.
                activation = self.parts.activator.after_write(principal, rev.record_id)
                return {"id": record.id, "action": action, "outcome": f"superseded:{record.id}",
                        "record_id": rev.record_id, "status": rev.status, "source_kind": rev.source_kind,
                        "version": rev.version, "supersedes_id": record.id, "note": rev.note,
                        "activation": activation.activation, "activation_reason": activation.reason,
                        "event_id": rev.event_id, "timings_ms": rev.timings_ms}
            change = self.parts.reviser.change_status(principal.agent_id, record, cast(StatusAction, action),
                                                          reason)
        except RevisionError as err:
            raise ToolError(err.code, err.message, **err.details) from None
        return {"id": record.id, "action": action, "status": change.status,
                "previous_status": change.previous_status, "event_id": change.event_id}

    def _pin(self, principal: Principal, record: Record, action: str, reason: str) -> ToolResult:
        refuse_secrets(reason=reason)  # the reason is kept in the event
        store, limit = self.parts.store, self.parts.config.lifecycle.max_pinned_per_scope
        try:
            if action == "pin":
                event_id = store.pin(record.id, principal.agent_id, reason, limit)
            else:
                event_id = store.unpin(record.id, principal.agent_id, reason)
        except PinRefusedError as err:
            raise ToolError("invalid_input", str(err)) from None
        out: ToolResult = {"id": record.id, "action": action, "pinned": action == "pin",
                           "event_id": event_id}
        if event_id is None:
            out["note"] = f"already {'pinned' if action == 'pin' else 'not pinned'}; nothing changed"
        return out

    def _restore(self, principal: Principal, record: Record, reason: str) -> ToolResult:
        change = self.parts.reviser.restore(principal.agent_id, record, reason)
        conflicts = self.parts.store.conflicts_of(record.id)
        out: ToolResult = {"id": record.id, "action": "restore", "status": change.status,
                           "previous_status": change.previous_status, "event_id": change.event_id}
        if conflicts:
            out["note"] = (f"restored beside {len(conflicts)} live memory(ies) about the same thing,"
                           " linked as conflicts: memory_get shows both")
        return out

    def _writable_record(self, raw_id: str, access: Access) -> Record:
        # Readability first (not_found for both cases), then writability.
        record = self._find(raw_id, access)
        if record is None:
            raise _not_found(raw_id)
        if not access.can_write(record.scope):
            raise ToolError("scope_not_writable",
                            f"memory {record.id} is in scope {record.scope}, which this agent cannot write")
        return record

    def _merge(self, principal: Principal, payload: dict[str, Any]) -> ToolResult:
        """Entity merge shape: both entities readable and writable, else one not_found."""
        access = Access.of(self.parts.store, principal)
        found: list[Entity] = []
        for raw_id in (payload["entity_id"], payload["merge_into"]):
            entity = self.parts.store.get_entity(raw_id)
            if entity is None or not access.can_read(entity.scope) or not access.can_write(entity.scope):
                raise _entity_not_found(raw_id)
            found.append(entity)
        source, target = found
        try:
            refuse_secrets(reason=payload["reason"])  # the reason is kept in the merge event
        except RevisionError as err:
            raise ToolError(err.code, err.message, **err.details) from None
        if source.kind != target.kind:
            raise ToolError("invalid_input",
                            f"cannot merge a {source.kind} entity into a {target.kind} entity")
        try:
            report = self.parts.store.merge_entities(source.id, target.id, principal.agent_id,
                                                     payload["reason"])
        except EntityMergeError as err:
            raise ToolError("invalid_input", str(err)) from None
        if report.index_version is not None:
            for record_id in report.records_rewritten:  # this process made the change
                self.parts.index.acknowledge(record_id, report.index_version)
        return {"entity_id": source.id, "merge_into": target.id, "status": "merged",
                "records_rewritten": [r.id for r in self._records(report.records_rewritten, access)],
                "aliases_added": report.aliases_added, "event_id": report.event_id}

    # -- memory_forget ----------------------------------------------------------------------

    def _forget(self, principal: Principal, payload: dict[str, Any], _context: str | None) -> ToolResult:
        record = self._writable_record(payload["id"], Access.of(self.parts.store, principal))
        try:
            change = self.parts.reviser.change_status(principal.agent_id, record, "forget", payload["reason"])
        except RevisionError as err:
            raise ToolError(err.code, err.message, **err.details) from None
        until = self.parts.reviser.restorable_until(self.parts.store.get_record(record.id) or record)
        return {"id": record.id, "status": change.status, "tombstone": True,
                "previous_status": change.previous_status, "event_id": change.event_id,
                "restorable_until": _ts(until),
                "note": _FORGET_NOTE.replace("<id>", record.id).replace("<until>", _ts(until) or "-")}
