"""Manual lifecycle changes on one known record: supersede, confirm, expire, forget.

``memory_revise`` and ``memory_forget`` land here after the tool handler has checked that
the principal may read and write the record. Every change re-checks the record's state
under the write lock, writes its rows and its audit event in ONE ``atomic()``
transaction, and touches the in-memory vector index only after the commit. A refused
change writes nothing.

A supersede runs the memory_write evidence path (the quote must be found in the session,
and a direct claim must be entailed by it) and must have authority over the record it
replaces: a higher-ranked source, or the same rank with a later event time.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

import numpy as np

from retold.clock import Clock, Timer, from_iso, new_id, to_iso
from retold.errors import RetoldError
from retold.index.embedder import Embedder
from retold.index.vector import VectorIndex
from retold.ingest.ingestor import Ingestor, WriteRequest
from retold.ingest.summary import retire_superseded
from retold.ingest.write_request import Provenance
from retold.models import ACTIVE_STATUSES, RECORD_STATUSES, Principal, Record
from retold.policy.lifecycle import Lifecycle
from retold.policy.secrets import screen
from retold.store import Embedding, NewEvent, RecordWrite, Store

__all__ = [
    "Revision", "RevisionError", "Reviser", "StatusAction", "StatusChange", "is_history", "refuse_secrets",
]

StatusAction = Literal["confirm", "expire", "forget", "restore"]
# Stages the creation event cannot time: they end after it is written.
_PENDING = ["event_log", "transaction", "index_update", "total"]


class RevisionError(RetoldError):
    """A refused revision; ``code`` is the structured tool error and ``details`` what it
    names beside the message. Nothing was written."""

    def __init__(self, code: str, message: str, **details: str) -> None:
        super().__init__(message)
        self.code, self.message, self.details = code, message, details


def refuse_secrets(**fields: str | None) -> None:
    """Raise ``secret_detected`` when a field holds a credential: the content becomes a
    record, and the reason and evidence land in its audit event."""
    if found := screen(**fields):
        raise RevisionError("secret_detected", found.message, kind=found.kind, field=found.field)


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


@dataclass(frozen=True)
class _Correction:
    """A supersede that passed its checks outside the transaction: what its write, its
    creation event and its index update share."""

    principal: Principal
    old: Record
    candidate: Record  # the successor; its entity links are filled in under the lock
    prov: Provenance
    reason: str  # masked as the audit trail keeps it
    requested_kind: str  # the source kind the caller asked for, before the evidence check
    ends_validity: datetime | None  # the stated valid_from, where ``old``'s window ends
    vector: np.ndarray | None
    pending: str | None  # why the vector is late, when it is


def is_history(record: Record, now: datetime) -> bool:
    """Superseded, expired, deleted, or past its expiry: no revision applies."""
    if record.status not in ACTIVE_STATUSES:
        return True
    return record.expires_at is not None and record.expires_at < now


def _history(record_id: str) -> RevisionError:
    return RevisionError("invalid_input", f"memory {record_id} is history and cannot be revised")


class Reviser:
    """The lifecycle changes of memory_revise and memory_forget."""

    def __init__(self, store: Store, index: VectorIndex, embedder: Embedder, ingestor: Ingestor,
                 lifecycle: Lifecycle, clock: Clock, *, restore_days: int = 30) -> None:
        self.store, self.index, self.embedder, self.ingestor = store, index, embedder, ingestor
        self.lifecycle, self.clock, self.restore_days = lifecycle, clock, restore_days

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
        valid_from: datetime | None = None,
        valid_until: datetime | None = None,
    ) -> Revision:
        """Replace ``old`` with a new record that inherits its subject, attribute, tags,
        scope, entity links with their roles, and validity window.

        ``valid_from`` and ``valid_until`` fix the window where the correction states
        them: a stated ``valid_from`` is when the value changed, so ``old``'s window ends
        there. Without one nothing is invented: a correction may say the old value was
        never right, so ``old`` gets no end (an as-of search never returns it). Raises
        RevisionError ``invalid_input`` when ``old`` is history, the revision lacks
        authority over it (naming both source kinds) or the window would end before it
        starts, and ``secret_detected`` when the content, evidence or reason holds a
        credential.
        """
        timer = Timer()
        now = self.clock.now()
        if is_history(old, now):
            raise _history(old.id)
        window = _corrected_window(old, valid_from, valid_until)
        refuse_secrets(content=content, evidence=evidence, reason=reason)
        reason = self._masked(reason)
        request = WriteRequest(type=old.type, content=content.strip(), source_kind=source_kind,
                               evidence=evidence, evidence_turn=evidence_turn)
        # The memory_write evidence path, shared rather than repeated.
        prov = self.ingestor.provenance(principal, request)
        timer.mark("evidence")
        candidate = self._successor(principal, old, request.content, prov, now, window)
        self.ingestor.sensitivity.apply(candidate)
        self._check_authority(candidate, old, prov.notes)
        timer.mark("permission")
        vector, pending = self.ingestor.vector_for(candidate.indexed_content)
        timer.mark("embed")
        fix = _Correction(principal, old, candidate, prov, reason, source_kind, valid_from, vector, pending)
        written, event_id, retired = self._write_correction(fix, now, timer)
        timer.mark("transaction")
        self._index_correction(fix, written, retired)
        timer.mark("index_update")
        notes = [*prov.notes, *([f"stored without its vector ({pending}): found by its words and entities"
                                 " until the backfill embeds it"] if pending is not None else [])]
        return Revision(candidate.id, old.id, candidate.status, candidate.source_kind,
                        candidate.version, "; ".join(notes) or None, prov.entailment,
                        event_id, timer.as_dict())

    def _successor(self, principal: Principal, old: Record, content: str, prov: Provenance, now: datetime,
                   window: tuple[datetime | None, datetime | None]) -> Record:
        """The record that replaces ``old``: its subject, attribute, scope and tags, the
        corrected ``window``, and the lifecycle's starting state for its source kind."""
        return Record(
            id=new_id(), type=old.type, version=old.version + 1, content=content,
            subject=old.subject, subject_entity_id=old.subject_entity_id, attribute=old.attribute,
            scope=old.scope, source_kind=prov.source_kind,  # type: ignore[arg-type]
            source_ref=prov.source_ref, creator_agent_id=principal.agent_id,
            evidence=prov.evidence, created_at=now,
            # An episodic record reports one event, so its correction keeps the event's
            # time; a current fact is observed now.
            event_at=old.event_at if old.type == "episodic" else now,
            expires_at=self.lifecycle.initial_expiry(prov.source_kind, now),
            valid_from=window[0], valid_until=window[1], review_at=None, review_flagged_at=None,
            confidence=self.lifecycle.initial_confidence(prov.source_kind),
            status=self.lifecycle.initial_status(prov.source_kind), supersedes_id=old.id,
            reinforcements=0, last_reinforced_at=None, tags=list(old.tags),
        )

    def _write_correction(self, fix: _Correction, now: datetime,
                          timer: Timer) -> tuple[RecordWrite, str, list[tuple[str, int]]]:
        """Retire ``fix.old`` and write its successor in one transaction: the write, its
        creation event's id, and the ``(record_id, index_version)`` of the rows retired."""
        store, old, candidate = self.store, fix.old, fix.candidate
        with store.atomic():
            # Re-read under the write lock: another writer may have changed the record
            # since the handler loaded it.
            fresh = store.get_record(old.id)
            if fresh is None or is_history(fresh, now):
                raise _history(old.id)
            self._check_authority(candidate, fresh, fix.prov.notes)
            # Checked active under this same lock just above; the session summaries that
            # restate the old record retire with it.
            retired = retire_superseded(store, old.id, candidate, NewEvent(
                "record.superseded", fix.principal.agent_id,
                {"by": candidate.id, "manual_revision": True, "reason": fix.reason}, old.id),
                ends_validity=fix.ends_validity,
                keep_history=self.ingestor.pack.classes.keeps_history(old.type))
            links = store.record_links(old.id)  # (entity_id, stored role), about first
            candidate.entity_ids = [entity_id for entity_id, _ in links]
            written = store.write_record(
                candidate, links=links,
                embedding=None if fix.vector is None else Embedding(self.embedder.name, self.embedder.version,
                                                                    fix.vector),
                event=lambda: self._creation_event(fix, timer))
            if fix.pending is not None:
                store.mark_pending(candidate.id, fix.pending)
            assert written.event_id is not None
            event_id = written.event_id
            timer.mark("event_log")
        return written, event_id, retired

    def _creation_event(self, fix: _Correction, timer: Timer) -> NewEvent:
        """The successor's ``record.created`` event, built as the write lands so that its
        timings include persistence."""
        timer.mark("persistence")
        prov, old = fix.prov, fix.old
        return NewEvent("record.created", fix.principal.agent_id, {
            "manual_revision": True, "reason": fix.reason, "outcome": f"superseded:{old.id}",
            "supersedes_id": old.id, "requested_source_kind": fix.requested_kind,
            "source_kind": prov.source_kind, "source_ref": prov.source_ref,
            "notes": prov.notes, "evidence_note": "; ".join(prov.notes) or None,
            "entailment": prov.entailment, "judge": self.ingestor.judge.name,
            "origin_scope": str(fix.candidate.scope),
            "timings_ms": {k: v for k, v in timer.as_dict().items() if k != "total"},
            "timings_pending": _PENDING,
            **({"embedding_pending": fix.pending} if fix.pending is not None else {}),
        }, fix.candidate.id)

    def _index_correction(self, fix: _Correction, written: RecordWrite,
                          retired: list[tuple[str, int]]) -> None:
        """Bring the vector index up to the committed supersede."""
        for retired_id, version in retired:
            self.index.acknowledge(retired_id, version)
        if fix.vector is not None:
            self.index.upsert(fix.candidate.id, fix.vector, written.index_version, written.seq)
        else:  # found by its words until the backfill embeds it
            self.index.acknowledge(fix.candidate.id, written.index_version)

    # -- restore ---------------------------------------------------------------------------

    def restorable_until(self, record: Record) -> datetime | None:
        """When a forgotten record's restore window closes; None when it cannot be
        restored at all (not forgotten, or erased: no content is left)."""
        forgotten = self._last_forget(record)
        return None if forgotten is None else forgotten[0] + timedelta(days=self.restore_days)

    def _last_forget(self, record: Record) -> tuple[datetime, str | None] | None:
        if record.status != "deleted" or not record.content:
            return None
        events = self.store.events(record_id=record.id, kind="record.forgotten")
        if not events:
            return None
        return from_iso(events[-1]["at"]), events[-1]["payload"].get("previous_status")

    def restore(self, actor: str, record: Record, reason: str) -> StatusChange:
        """Undo a forget inside the restore window, or a capacity archive at any time: the
        record returns to the status it had, searchable again by its words and its
        vector, with a ``record.restored`` event naming ``actor``.

        If another live record now holds the same subject and attribute (written while
        this one was away), the two are linked as a conflict rather than one silently
        replacing the other: nobody has compared them yet. Raises RevisionError
        ``not_found`` past the window or after an erase (the reason says which),
        ``invalid_input`` when the record is neither forgotten nor archived.
        """
        refuse_secrets(reason=reason)
        reason = self._masked(reason)
        if record.status == "expired" and (archived := self.store.archived_from(record.id)) is not None:
            target = archived if archived in ACTIVE_STATUSES else "provisional"
            return self._bring_back(actor, record, reason, target, "expired", {"archived": True})
        if record.status != "deleted":
            raise RevisionError("invalid_input", f"memory {record.id} is {record.status}, neither forgotten"
                                " nor archived; only those can be restored")
        forgotten = self._last_forget(record)
        if forgotten is None:
            raise RevisionError("not_found", f"memory {record.id} was erased and cannot be restored")
        at, previous = forgotten
        until = at + timedelta(days=self.restore_days)
        if self.clock.now() > until:
            raise RevisionError("not_found", f"memory {record.id} was forgotten on {to_iso(at)[:10]};"
                                f" its {self.restore_days}-day restore window closed on {to_iso(until)[:10]}")
        # A forget event thinned by retention no longer says the old status: come back
        # unconfirmed rather than claim a confirmation nobody can show.
        target = previous if previous in RECORD_STATUSES and previous != "deleted" else "provisional"
        return self._bring_back(actor, record, reason, target, "deleted", {"forgotten_at": to_iso(at)})

    def _bring_back(self, actor: str, record: Record, reason: str, target: str, from_status: str,
                    detail: dict[str, object]) -> StatusChange:
        event = NewEvent("record.restored", actor, {"reason": reason, "status": target, **detail}, record.id)
        with self.store.atomic():
            change = self.store.restore(record.id, target, event, from_status=from_status)
            if change is None:
                raise RevisionError("not_found", f"memory {record.id} was erased and cannot be restored")
            if target in ACTIVE_STATUSES and record.attribute and record.subject_entity_id:
                # The write path's own notion of the current value about the same thing.
                current = self.store.active_for_subject(
                    record.scope, record.type, record.subject_entity_id, self.clock.now(),
                    attribute=record.attribute)
                for other in current:
                    if other.id != record.id:
                        self.store.add_conflict(record.id, other.id)
        assert change.event_id is not None
        return StatusChange(record.id, "restore", from_status, target, change.event_id)

    def _masked(self, reason: str) -> str:
        # A reason lands in the audit trail and may restate the record: it is kept masked as
        # the tenant's pack masks the record's text, which stays raw in the record alone.
        return self.ingestor.sensitivity.mask(reason)

    def _check_authority(self, new: Record, old: Record, notes: list[str]) -> None:
        """Authority: source rank first, then event time, then write time."""
        if self.lifecycle.has_authority(new, old):
            return
        why = f"{new.source_kind} cannot supersede {old.source_kind}"
        if new.source_kind == old.source_kind:
            why += " with a later event time"
        if notes:
            why += f" ({'; '.join(notes)})"
        raise RevisionError("invalid_input", why)

    # -- confirm, expire, forget ---------------------------------------------------------------

    def change_status(self, actor: str, record: Record, action: StatusAction,
                      reason: str) -> StatusChange:
        """Confirm, expire or forget one record and append its event with the reason,
        naming ``actor`` (the calling agent, or the inspector's operator).

        confirm and expire need an active record (history cannot be revised); confirm
        also clears any provisional expiry. forget takes any record not already deleted,
        drops its FTS row and marks its vector dead. Raises RevisionError
        ``invalid_input`` otherwise; nothing is written then.
        """
        refuse_secrets(reason=reason)
        reason = self._masked(reason)
        now = self.clock.now()
        if action == "forget":
            target, sources = "deleted", tuple(s for s in RECORD_STATUSES if s != "deleted")
            live_at: datetime | None = None
        else:
            target = "confirmed" if action == "confirm" else "expired"
            sources, live_at = ACTIVE_STATUSES, now
        kind = {"confirm": "record.confirmed", "expire": "record.expired",
                "forget": "record.forgotten"}[action]
        event = NewEvent(kind, actor,
                         {"reason": reason, "previous_status": record.status, "manual": True}, record.id)
        with self.store.atomic():
            change = self.store.transition(record.id, target, from_statuses=sources, live_at=live_at,
                                            clear_expiry=action == "confirm", event=event)
            if change is None:
                if action == "forget":
                    raise RevisionError("invalid_input", f"memory {record.id} is already forgotten")
                raise _history(record.id)
        assert change.event_id is not None
        if action == "forget":
            self.index.remove(record.id, change.index_version)  # a forgotten record's vector is dead
        else:
            self.index.acknowledge(record.id, change.index_version)
        return StatusChange(record.id, action, record.status, target, change.event_id)


def _corrected_window(old: Record, valid_from: datetime | None,
                      valid_until: datetime | None) -> tuple[datetime | None, datetime | None]:
    """The correction's validity window: what it states, else ``old``'s; RevisionError
    ``invalid_input`` when it would end before it starts."""
    window_from, window_until = valid_from or old.valid_from, valid_until or old.valid_until
    if window_from is not None and window_until is not None and window_from > window_until:
        raise RevisionError("invalid_input", f"the corrected window would end ({to_iso(window_until)})"
                            f" before it starts ({to_iso(window_from)})")
    return window_from, window_until
