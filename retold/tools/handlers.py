"""ToolHandlers: the five memory tools behind one framework-neutral entry point (LLD 11).

``call(name, principal, payload)`` never raises for bad input (DESIGN.md decision 8): it
returns the tool result or ``{"error": {"code", "message"}}``. The order inside every
handler is fixed by LLD 11: the payload is checked against the tool's schema first
(nothing there describes a stored target), then the caller's right to read the target,
then everything else. A record or entity the caller cannot read answers exactly like an
id that never existed, so no error confirms that a foreign id exists.

The Principal always comes from the adapter; tool input never names an agent, a grant or
a raw scope id.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from retold.ingest.revision import Reviser, RevisionError, StatusAction, is_history
from retold.models import Entity, Principal, Record, Scope, SearchRequest, SearchResponse
from retold.policy import grants
from retold.retrieve.explain import short_id
from retold.store.entities import EntityMergeError
from retold.tools.schemas import ToolSchema, tool_schemas
from retold.tools.validation import ToolError, search_request, validate_payload, write_request
from retold.util import to_iso

if TYPE_CHECKING:
    from retold.runtime import Runtime

__all__ = ["ToolHandlers", "ToolResult"]

ToolResult = dict[str, Any]
"""A JSON-serialisable tool result: the tool's fields, or ``{"error": {...}}``."""

logger = logging.getLogger(__name__)

_SHORT_ID = re.compile(r"[0-9a-f]{8}")
_RECENT_EVENTS = 20
_MAX_LINEAGE = 50  # a supersedes chain longer than this is corrupt data, not history
_FORGET_NOTE = ("forgotten: no tool returns this memory any more; its content stays in the store "
                "until an administrator erases it (retold erase --record <id>)")


def _jsonable(value: Any) -> Any:
    """Dataclass trees to plain JSON values: datetimes as ISO text, tuples as lists."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, datetime):
        return to_iso(value)
    if isinstance(value, np.generic):  # a numpy score is not JSON
        return value.item()
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def _ts(moment: datetime | None) -> str | None:
    return to_iso(moment) if moment is not None else None


def _not_found(raw_id: str) -> ToolError:
    # LLD 11: one message shape for a missing and an unreadable id, built only from
    # what the caller sent.
    return ToolError("not_found", f"no memory with id {raw_id}")


def _entity_not_found(raw_id: str) -> ToolError:
    return ToolError("not_found", f"no entity with id {raw_id}")


class _Access:
    """The caller's readable and writable scopes, read once per call."""

    def __init__(self, runtime: Runtime, principal: Principal) -> None:
        self.readable = grants.readable_scopes(runtime.store, principal)
        self.writable = grants.writable_scopes(runtime.store, principal)

    def can_read(self, scope: Scope) -> bool:
        return scope in self.readable

    def can_write(self, scope: Scope) -> bool:
        return scope in self.writable


class ToolHandlers:
    """memory_search, memory_get, memory_write, memory_revise and memory_forget for one
    runtime (LLD 11). Build it once per process; it keeps no per-call state."""

    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime
        self.reviser = Reviser(runtime)
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
        write now, and the tool is left out when there is none (LLD 8.1 step 2).
        """
        targets = grants.write_targets(self.rt.store, principal)
        return tool_schemas(list(targets))

    def call(self, name: str, principal: Principal, payload: object, *,
             context: str | None = None) -> ToolResult:
        """Run one tool call; never raises for bad input.

        ``context`` is the adapter's current-turn context for ``memory_search`` (LLD 11,
        14.1); the model cannot supply it. An unexpected failure is logged and answered
        as ``internal_error``; the store's transaction has rolled back by then.
        """
        try:
            validate_payload(name, payload)
            assert isinstance(payload, dict)  # validate_payload checked the shape
            return self._handlers[name](principal, payload, context)
        except ToolError as err:
            return err.as_result()
        except Exception:
            logger.exception("memory tool %s failed", name)
            return ToolError("internal_error", f"{name} failed unexpectedly; nothing was changed").as_result()

    def search(self, principal: Principal, request: SearchRequest) -> ToolResult:
        """Run a search the adapter built itself (a host-issued ``trigger="auto"`` search,
        LLD 14.1) through the same pipeline and result shape as the tool."""
        outcome = self.rt.retriever.search(principal, request)
        return self._search_result(principal, outcome.response, outcome.rendered)

    # -- memory_search ----------------------------------------------------------------------

    def _search(self, principal: Principal, payload: dict[str, Any], context: str | None) -> ToolResult:
        return self.search(principal, search_request(payload, context))

    def _search_result(self, principal: Principal, response: SearchResponse, rendered: str) -> ToolResult:
        readable_entities = self._readable_entities(
            principal, (eid for r in response.results for eid in r.explanation.entity_ids))
        results = []
        for hit in response.results:
            record = hit.record
            explanation = _jsonable(hit.explanation)
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
            "timings_ms": dict(response.timings_ms), "rendered": rendered,
            "rewrite_status": response.rewrite_status, "rewritten_queries": response.rewritten_queries,
        }

    def _readable_entities(self, principal: Principal, entity_ids: Iterable[str]) -> set[str]:
        readable = grants.readable_scopes(self.rt.store, principal)
        out = set()
        for entity_id in set(entity_ids):
            entity = self.rt.store.get_entity(entity_id)
            if entity is not None and entity.scope in readable:
                out.add(entity_id)
        return out

    # -- memory_write -----------------------------------------------------------------------

    def _write(self, principal: Principal, payload: dict[str, Any], _context: str | None) -> ToolResult:
        result = self.rt.ingestor.write(principal, write_request(payload), origin="tool")
        if result.error is not None:
            raise ToolError(result.error.code, result.error.message, **result.error.details)
        return {"record_id": result.record_id, "status": result.status, "outcome": result.outcome,
                "note": result.note, "timings_ms": result.timings_ms}

    # -- memory_get -------------------------------------------------------------------------

    def _get(self, principal: Principal, payload: dict[str, Any], _context: str | None) -> ToolResult:
        access = _Access(self.rt, principal)
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

    def _find(self, raw_id: str, access: _Access) -> Record | None:
        """The record behind a full id, or the short id shown in rendered search results,
        when the caller can read it; None answers alike for missing and unreadable."""
        record = self.rt.store.get_record(raw_id)
        if record is None and _SHORT_ID.fullmatch(raw_id):
            # Looked up only inside readable scopes, so a short id never resolves to
            # (or collides visibly with) a foreign record.
            scope_sql = " OR ".join(["(scope_kind = ? AND scope_id = ?)"] * len(access.readable))
            params = [p for s in access.readable for p in (s.kind, s.id)]
            hits = self.rt.store.select_records(f"id LIKE ? AND ({scope_sql})", ["%" + raw_id, *params],
                                                limit=2)
            record = hits[0] if len(hits) == 1 else None
        if record is None or not access.can_read(record.scope):
            return None
        return record

    def _full(self, record: Record, access: _Access) -> ToolResult:
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
            "tags": list(record.tags),
            "supersedes_id": self._readable_id(record.supersedes_id, access),
            "superseded_by": next((e["id"] for e in lineage if e["relation"] == "superseded_by"), None),
            "lineage": lineage,
            "conflicts": [self._summary(other) for other in self._records(
                self.rt.store.conflicts_of(record.id), access)],
            "entities": list(entities.values()),
            "events": self._events(record.id),
        }

    def _tombstone(self, record: Record, access: _Access) -> ToolResult:
        """LLD 11: the audit shape only; content, evidence and source never leave the store."""
        return {
            "id": record.id, "short_id": short_id(record.id), "tombstone": True, "status": "deleted",
            "type": record.type, "scope": str(record.scope),
            "content": None, "evidence": None, "source_ref": None,
            "created_at": to_iso(record.created_at), "event_at": to_iso(record.event_at),
            "supersedes_id": self._readable_id(record.supersedes_id, access),
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

    def _lineage(self, record: Record, access: _Access) -> list[ToolResult]:
        """The supersedes chain both ways, oldest first, readable records only."""
        store = self.rt.store
        seen = {record.id}
        older: list[ToolResult] = []
        current = record
        while current.supersedes_id and current.supersedes_id not in seen and len(seen) < _MAX_LINEAGE:
            found = store.get_record(current.supersedes_id)
            if found is None or not access.can_read(found.scope):
                break
            seen.add(found.id)
            older.append(self._summary(found, "supersedes"))
            current = found
        newer: list[ToolResult] = []
        current = record
        while len(seen) < _MAX_LINEAGE:
            successors = [r for r in store.select_records("supersedes_id = ?", (current.id,))
                          if access.can_read(r.scope) and r.id not in seen]
            if not successors:
                break
            current = successors[0]
            seen.add(current.id)
            newer.append(self._summary(current, "superseded_by"))
        return [*reversed(older), *newer]

    def _records(self, ids: Sequence[str], access: _Access) -> list[Record]:
        found = (self.rt.store.get_record(i) for i in ids)
        return [r for r in found if r is not None and access.can_read(r.scope)]

    def _readable_id(self, record_id: str | None, access: _Access) -> str | None:
        return record_id if record_id and self._records([record_id], access) else None

    def _entities(self, record: Record, access: _Access) -> dict[str, ToolResult]:
        """LLD 17.4: links whose entity the caller cannot read are left out entirely."""
        out: dict[str, ToolResult] = {}
        for entity_id, role in self.rt.store.record_links(record.id):
            entity: Entity | None = self.rt.store.get_entity(entity_id)
            if entity is not None and access.can_read(entity.scope):
                out[entity_id] = {"id": entity.id, "kind": entity.kind, "canonical": entity.canonical,
                                  "role": role, "status": entity.status}
        return out

    def _events(self, record_id: str) -> list[ToolResult]:
        events = self.rt.store.events(record_id=record_id)[-_RECENT_EVENTS:]
        return [{"kind": e["kind"], "at": e["at"]} for e in events]

    # -- memory_revise ----------------------------------------------------------------------

    def _revise(self, principal: Principal, payload: dict[str, Any], _context: str | None) -> ToolResult:
        if "entity_id" in payload:
            return self._merge(principal, payload)
        access = _Access(self.rt, principal)
        record = self._writable_record(payload["id"], access)
        action, reason = payload["action"], payload["reason"]
        try:
            if is_history(record, self.rt.clock.now()):
                raise RevisionError("invalid_input", f"memory {record.id} is history and cannot be revised")
            if action == "supersede":
                rev = self.reviser.supersede(
                    principal, record, content=payload["content"], reason=reason,
                    source_kind=payload.get("source_kind", "agent_inference"),
                    evidence=payload.get("evidence"),
                    # JSON Schema counts 2.0 as an integer; turn numbers are ints.
                    evidence_turn=int(payload["evidence_turn"]) if "evidence_turn" in payload else None,
                )
                return {"id": record.id, "action": action, "outcome": f"superseded:{record.id}",
                        "record_id": rev.record_id, "status": rev.status, "source_kind": rev.source_kind,
                        "version": rev.version, "supersedes_id": record.id, "note": rev.note,
                        "event_id": rev.event_id, "timings_ms": rev.timings_ms}
            change = self.reviser.change_status(principal, record, cast(StatusAction, action), reason)
        except RevisionError as err:
            raise ToolError(err.code, err.message) from None
        return {"id": record.id, "action": action, "status": change.status,
                "previous_status": change.previous_status, "event_id": change.event_id}

    def _writable_record(self, raw_id: str, access: _Access) -> Record:
        # LLD 11: readability first (not_found for both cases), then writability.
        record = self._find(raw_id, access)
        if record is None:
            raise _not_found(raw_id)
        if not access.can_write(record.scope):
            raise ToolError("scope_not_writable",
                            f"memory {record.id} is in scope {record.scope}, which this agent cannot write")
        return record

    def _merge(self, principal: Principal, payload: dict[str, Any]) -> ToolResult:
        """Entity merge shape: both entities readable and writable, else one not_found."""
        access = _Access(self.rt, principal)
        found: list[Entity] = []
        for raw_id in (payload["entity_id"], payload["merge_into"]):
            entity = self.rt.store.get_entity(raw_id)
            if entity is None or not access.can_read(entity.scope) or not access.can_write(entity.scope):
                raise _entity_not_found(raw_id)
            found.append(entity)
        source, target = found
        if source.kind != target.kind:
            raise ToolError("invalid_input",
                            f"cannot merge a {source.kind} entity into a {target.kind} entity")
        try:
            report = self.rt.store.merge_entities(source.id, target.id, principal.agent_id, payload["reason"])
        except EntityMergeError as err:
            raise ToolError("invalid_input", str(err)) from None
        if report.index_version is not None:
            for record_id in report.records_rewritten:  # this process made the change
                self.rt.index.acknowledge(record_id, report.index_version)
        return {"entity_id": source.id, "merge_into": target.id, "status": "merged",
                "records_rewritten": [r.id for r in self._records(report.records_rewritten, access)],
                "aliases_added": report.aliases_added, "event_id": report.event_id}

    # -- memory_forget ----------------------------------------------------------------------

    def _forget(self, principal: Principal, payload: dict[str, Any], _context: str | None) -> ToolResult:
        record = self._writable_record(payload["id"], _Access(self.rt, principal))
        try:
            change = self.reviser.change_status(principal, record, "forget", payload["reason"])
        except RevisionError as err:
            raise ToolError(err.code, err.message) from None
        return {"id": record.id, "status": change.status, "tombstone": True,
                "previous_status": change.previous_status, "event_id": change.event_id,
                "note": _FORGET_NOTE.replace("<id>", record.id)}
