"""Manual lifecycle changes on one known record: supersede, confirm, expire, forget (LLD 11).

``memory_revise`` and ``memory_forget`` land here after the tool handler has checked that
the principal may read and write the record. Every change re-checks the record's state
under the write lock, writes its rows and its audit event in ONE ``atomic()``
transaction, and touches the in-memory vector index only after the commit (LLD 7, 8.1
step 8). A refused change writes nothing.

A supersede runs the memory_write evidence path (validate_evidence, then entailment for
a direct claim) in the principal's current session, and must satisfy the LLD 6.3
authority rule against the record it replaces.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from retold.errors import RetoldError
from retold.ingest.ingestor import WriteRequest
from retold.models import ACTIVE_STATUSES, RECORD_STATUSES, Principal, Record
from retold.util import Timer, new_id

if TYPE_CHECKING:
    from retold.runtime import Runtime

__all__ = ["Revision", "RevisionError", "Reviser", "StatusAction", "StatusChange", "is_history"]

StatusAction = Literal["confirm", "expire", "forget"]
# Stages the creation event cannot time (LLD 8.1 "timings_pending").
_PENDING = ["event_log", "transaction", "index_update", "total"]


class RevisionError(RetoldError):
    """A refused revision; ``code`` is the structured tool error. Nothing was written."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


@dataclass(frozen=True)
class Revision:
    """A supersede that landed: the new record replaced ``replaced_id``."""

    record_id: str
    replaced_id: str
    status: str
    source_kind: str
    version: int
    note: str | None
    entailment: float | str | None
    event_id: str
    timings_ms: dict[str, float]


@dataclass(frozen=True)
class StatusChange:
    """A confirm, expire or forget that landed."""

    record_id: str
    action: StatusAction
    previous_status: str
    status: str
    event_id: str


def is_history(record: Record, now: datetime) -> bool:
    """Superseded, expired, deleted, or past its expiry: no revision applies (LLD 6.5, 11)."""
    if record.status not in ACTIVE_STATUSES:
        return True
    return record.expires_at is not None and record.expires_at < now


def _history(record_id: str) -> RevisionError:
    return RevisionError("invalid_input", f"memory {record_id} is history and cannot be revised")


class Reviser:
    """The lifecycle changes of memory_revise and memory_forget for one runtime."""

    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime

    # -- supersede ----------------------------------------------------------------------

    def supersede(
        self,
        principal: Principal,
        old: Record,
        *,
        content: str,
        reason: str,
        source_kind: str = "agent_inference",
        evidence: str | None = None,
        evidence_turn: int | None = None,
    ) -> Revision:
        """Replace ``old`` with a new record that inherits its subject, attribute, tags,
        scope and entity links with their roles (LLD 11).

        Raises RevisionError ``invalid_input`` when ``old`` is history or the revision
        lacks authority over it (LLD 6.3), naming both source kinds.
        """
        rt = self.rt
        timer = Timer()
        now = rt.clock.now()
        if is_history(old, now):
            raise _history(old.id)
        request = WriteRequest(type=old.type, content=content.strip(), source_kind=source_kind,
                               evidence=evidence, evidence_turn=evidence_turn)
        # The memory_write evidence path, shared rather than repeated (LLD 8.1 step 3).
        prov = rt.ingestor.provenance(principal, request)
        timer.mark("evidence")
        candidate = Record(
            id=new_id(), type=old.type, version=old.version + 1, content=request.content,
            subject=old.subject, subject_entity_id=old.subject_entity_id, attribute=old.attribute,
            scope=old.scope, source_kind=prov.source_kind,  # type: ignore[arg-type]
            source_ref=prov.source_ref, creator_agent_id=principal.agent_id,
            evidence=prov.evidence, created_at=now,
            # An episodic record reports one event, so its correction keeps the event's
            # time; a current fact is observed now.
            event_at=old.event_at if old.type == "episodic" else now,
            expires_at=rt.lifecycle.initial_expiry(prov.source_kind, now),
            valid_from=None, valid_until=None, review_at=None, review_flagged_at=None,
            confidence=rt.lifecycle.initial_confidence(prov.source_kind),
            status=rt.lifecycle.initial_status(prov.source_kind), supersedes_id=old.id,
            reinforcements=0, last_reinforced_at=None, tags=list(old.tags),
        )
        self._check_authority(candidate, old, prov.notes)
        timer.mark("permission")
        vector = rt.embedder.embed_documents([candidate.content])[0]
        timer.mark("embed")
        store = rt.store
        with store.atomic():
            # Re-read under the write lock: another writer may have changed the record
            # since the handler loaded it.
            fresh = store.get_record(old.id)
            if fresh is None or is_history(fresh, now):
                raise _history(old.id)
            self._check_authority(candidate, fresh, prov.notes)
            old_version = store.transition(old.id, "superseded", from_statuses=ACTIVE_STATUSES)
            assert old_version is not None  # checked under the same lock just above
            store.append_event("record.superseded", principal.agent_id,
                               {"by": candidate.id, "manual_revision": True, "reason": reason},
                               record_id=old.id)
            links = store.record_links(old.id)  # (entity_id, stored role), about first
            candidate.entity_ids = [entity_id for entity_id, _ in links]
            store.insert_record(candidate)
            store.link_record(candidate.id, links)
            store.refresh_fts([candidate.id])
            new_version = store.put_embedding(candidate.id, rt.embedder.name, rt.embedder.version, vector)
            timer.mark("persistence")
            payload: dict[str, Any] = {
                "manual_revision": True, "reason": reason, "outcome": f"superseded:{old.id}",
                "supersedes_id": old.id, "requested_source_kind": source_kind,
                "source_kind": prov.source_kind, "source_ref": prov.source_ref,
                "notes": prov.notes, "evidence_note": "; ".join(prov.notes) or None,
                "entailment": prov.entailment, "judge": rt.judge.name,
                "origin_scope": str(candidate.scope),
                "timings_ms": {k: v for k, v in timer.as_dict().items() if k != "total"},
                "timings_pending": _PENDING,
            }
            event_id = store.append_event("record.created", principal.agent_id, payload,
                                          record_id=candidate.id)
            timer.mark("event_log")
        timer.mark("transaction")
        rt.index.acknowledge(old.id, old_version)
        rt.index.upsert(candidate.id, vector, new_version, candidate.seq)
        timer.mark("index_update")
        return Revision(candidate.id, old.id, candidate.status, candidate.source_kind,
                        candidate.version, "; ".join(prov.notes) or None, prov.entailment,
                        event_id, timer.as_dict())

    def _check_authority(self, new: Record, old: Record, notes: list[str]) -> None:
        """LLD 6.3: rank first, then event time, then write time."""
        if self.rt.lifecycle.has_authority(new, old):
            return
        why = f"{new.source_kind} cannot supersede {old.source_kind}"
        if new.source_kind == old.source_kind:
            why += " with a later event time"
        if notes:
            why += f" ({'; '.join(notes)})"
        raise RevisionError("invalid_input", why)

    # -- confirm, expire, forget ---------------------------------------------------------------

    def change_status(self, principal: Principal, record: Record, action: StatusAction,
                      reason: str) -> StatusChange:
        """Confirm, expire or forget one record and append its event with the reason.

        confirm and expire need an active record (LLD 11: history cannot be revised);
        confirm also clears any provisional expiry. forget takes any record not already
        deleted, drops its FTS row and marks its vector dead. Raises RevisionError
        ``invalid_input`` otherwise; nothing is written then.
        """
        rt = self.rt
        now = rt.clock.now()
        if action == "forget":
            target, sources = "deleted", tuple(s for s in RECORD_STATUSES if s != "deleted")
            live_at: datetime | None = None
        else:
            target = "confirmed" if action == "confirm" else "expired"
            sources, live_at = ACTIVE_STATUSES, now
        with rt.store.atomic():
            version = rt.store.transition(record.id, target, from_statuses=sources, live_at=live_at,
                                          clear_expiry=action == "confirm")
            if version is None:
                if action == "forget":
                    raise RevisionError("invalid_input", f"memory {record.id} is already forgotten")
                raise _history(record.id)
            kind = {"confirm": "record.confirmed", "expire": "record.expired",
                    "forget": "record.forgotten"}[action]
            event_id = rt.store.append_event(
                kind, principal.agent_id,
                {"reason": reason, "previous_status": record.status, "manual": True},
                record_id=record.id,
            )
        if action == "forget":
            rt.index.remove(record.id, version)  # LLD 11: the in-memory vector is dead
        else:
            rt.index.acknowledge(record.id, version)
        return StatusChange(record.id, action, record.status, target, event_id)
