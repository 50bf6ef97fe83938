"""Applying a write decision: the rows it writes, the audit event, and this process's
vector index once the transaction has committed.

Inside the write's transaction a decision becomes rows: a new record (created, history on
arrival, a provisional conflict with its conflict row, or a successor that first retires
the incumbents it supersedes and the session summaries restating them), or a
reinforcement of the record it matched, which counts only an independent source
reference. Either way one event reports the outcome, the provenance and what each stage
cost. After the commit, the index takes the new vector and acknowledges every row whose
version moved, so its next refresh does not read them again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from retold.clock import Timer
from retold.config.pack import MemoryPack
from retold.index.embedder import Embedder
from retold.index.vector import VectorIndex
from retold.ingest.decider import Decided
from retold.ingest.decision import Decision
from retold.ingest.subject import subject_of
from retold.ingest.summary import retire_superseded
from retold.ingest.write_request import Claim
from retold.models import Principal, Record
from retold.policy.lifecycle import Lifecycle
from retold.policy.sensitivity import SensitivityRules
from retold.policy.validity import closed_at, starts
from retold.store import Embedding, NewEvent, Store

__all__ = ["Applied", "Applier", "IndexChange"]

# Stages whose timing the event cannot contain: they end after it is written.
_PENDING = ["event_log", "transaction", "index_update", "total"]
EventFor = Callable[[str, str], NewEvent]  # (outcome, record id) -> the write's event


@dataclass(frozen=True)
class IndexChange:
    """A change this process applies to its own index after commit: the records_version
    the record committed under, and its new vector and seq (None: the vector is unchanged)."""

    record_id: str
    version: int
    vector: np.ndarray | None = None
    seq: int | None = None


@dataclass(frozen=True)
class Applied:
    """What the write did: its outcome string, the record it wrote or reinforced, its
    event, the notes the event recorded, and the index changes due after commit."""

    outcome: str
    record_id: str
    event_id: str
    notes: tuple[str, ...]
    changes: tuple[IndexChange, ...]


class Applier:
    """Persists decisions and brings this process's index up to date after commit."""

    def __init__(self, store: Store, index: VectorIndex, embedder: Embedder, lifecycle: Lifecycle,
                 sensitivity: SensitivityRules, pack: MemoryPack) -> None:
        self.store, self.index, self.embedder, self.lifecycle = store, index, embedder, lifecycle
        self.sensitivity, self.pack = sensitivity, pack

    def apply(self, principal: Principal, claim: Claim, decided: Decided, timer: Timer) -> Applied:
        """Write the decision and its event, inside the caller's transaction."""
        payload = dict(decided.audit)
        if claim.pending is not None:
            payload["embedding_pending"] = claim.pending
        notes = (*claim.provenance.notes, *decided.candidate.notes)
        prov = claim.provenance

        def event(outcome: str, record_id: str) -> NewEvent:
            # Built once the rows are written, so it can report what writing cost.
            timer.mark("persistence")
            payload.update(
                source_kind=prov.source_kind, source_ref=prov.source_ref, notes=list(notes),
                entailment=prov.entailment, outcome=outcome,
                ambiguous_mention=list(decided.candidate.ambiguous),
                timings_ms={k: v for k, v in timer.as_dict().items() if k != "total"},
                timings_pending=_PENDING,
            )
            kind = "record.reinforced" if decided.decision.action == "reinforce" else "record.created"
            return NewEvent(kind, principal.agent_id, payload, record_id)

        decision = decided.decision
        if decision.attribute_aliased_from:
            payload["attribute_aliased_from"] = decision.attribute_aliased_from
        if decision.action == "reinforce":
            assert decision.target is not None
            outcome, record_id, changes, event_id = self._reinforce(
                decided.candidate.record, decision.target, payload, event)
        else:
            outcome, record_id, changes, event_id = self._write(
                replace(decided.candidate.record), decided, claim.pending, payload, event)
        timer.mark("event_log")
        return Applied(outcome, record_id, event_id, notes, tuple(changes))

    def update_index(self, applied: Applied) -> None:
        """After commit: the new vector goes in; every other changed row is acknowledged."""
        for change in applied.changes:
            if change.vector is None:
                self.index.acknowledge(change.record_id, change.version)
            else:
                self.index.upsert(change.record_id, change.vector, change.version, change.seq)

    def _write(self, candidate: Record, decided: Decided, pending: str | None, payload: dict[str, Any],
               event: EventFor) -> tuple[str, str, list[IndexChange], str]:
        """Write the candidate as the decision has it (a supersede retires the incumbents
        first); return the outcome, the record id, the index changes and the event id."""
        decision, target = decided.decision, decided.decision.target
        outcome = self._settle(candidate, decision, payload)
        changes: list[IndexChange] = []
        # A superseded incumbent must leave the live-summary and active sets before its
        # successor arrives, so retire it first, with the session summaries restating it.
        if decision.action == "supersede":
            assert target is not None
            # A pack that versions no instructions replaces the old one instead. The old
            # windows end where the new one starts: the change the write dated (valid_from,
            # event_at), else when it was recorded.
            keep = self.pack.classes.keeps_history(candidate.type)
            for old in [target, *decision.also_superseded]:
                retired = retire_superseded(self.store, old.id, candidate, NewEvent(
                    "record.superseded", candidate.creator_agent_id, {"by": candidate.id}, old.id),
                    ends_validity=starts(candidate), keep_history=keep)
                changes += [IndexChange(rid, version) for rid, version in retired]
            payload["also_superseded"] = [r.id for r in decision.also_superseded]
        vector = decided.vector
        written = self.store.write_record(
            candidate, links=list(decided.candidate.links),
            embedding=None if vector is None else Embedding(self.embedder.name, self.embedder.version,
                                                            vector),
            event=lambda: event(outcome, candidate.id))
        if pending is not None:
            self.store.mark_pending(candidate.id, pending)
        changes.append(IndexChange(candidate.id, written.index_version, vector, written.seq))
        if decision.action == "conflict":
            assert target is not None
            self.store.add_conflict(candidate.id, target.id)
        assert written.event_id is not None
        return outcome, candidate.id, changes, written.event_id

    def _settle(self, candidate: Record, decision: Decision, payload: dict[str, Any]) -> str:
        """Set the candidate's attribute, lineage, status and window as ``decision`` has
        them; return the write's outcome string."""
        target = decision.target
        if decision.attribute != candidate.attribute:
            candidate.attribute = decision.attribute
            candidate.subject = subject_of(candidate.subject_entity_id, decision.attribute)
        if decision.action == "supersede":
            assert target is not None
            candidate.supersedes_id, candidate.version = target.id, target.version + 1
            return f"superseded:{target.id}"
        if decision.action == "superseded_on_arrival":
            assert target is not None
            candidate.status = "superseded"
            # History that arrived late held until the current value started.
            candidate.valid_until = closed_at(candidate, starts(target)) or candidate.valid_until
            payload["superseded_on_arrival_by"] = target.id
            return f"superseded_on_arrival:{target.id}"
        if decision.action == "conflict":
            assert target is not None
            candidate.status = "provisional"
            candidate.expires_at = self.lifecycle.provisional_expiry(candidate.created_at)
            payload["conflict_with"] = target.id
            # Nobody has said which one holds, so neither window ends.
            payload["validity"] = "both windows left open: a conflict ends neither"
            return f"conflict:{target.id}"
        return "created"

    def _reinforce(self, candidate: Record, target: Record, payload: dict[str, Any],
                   event: EventFor) -> tuple[str, str, list[IndexChange], str]:
        """Only an independent source reference counts as more support."""
        ref = candidate.source_ref
        changes: list[IndexChange] = []
        independent = ref is not None and ref not in self.store.counted_refs(target.id)
        # The audit trail keeps the quote masked: the raw text stays in the record alone.
        incoming = None if candidate.evidence is None else self.sensitivity.mask(candidate.evidence)
        payload.update(counted=independent, incoming_evidence=incoming,
                       incoming_source_kind=candidate.source_kind)
        if not independent:
            payload["reason"] = ("source reference already counted" if ref
                                 else "an observation without a source reference is not independent")
            outcome = "already_reinforced"
        else:
            result = self.lifecycle.reinforce(target, candidate.created_at, source_kind=candidate.source_kind,
                                              source_ref=ref, evidence=candidate.evidence)
            payload.update(confirmed=result.confirmed, provenance_upgraded=result.provenance_upgraded)
            version = self.store.update_lifecycle(result.record)
            changes.append(IndexChange(target.id, version))
            outcome = "reinforced"
        done = event(outcome, target.id)
        event_id = self.store.append_event(done.kind, done.actor, done.payload, record_id=done.record_id)
        return outcome, target.id, changes, event_id
