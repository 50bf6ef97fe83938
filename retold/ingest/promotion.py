"""Promoting a standing instruction the user keeps repeating to a procedural record.

A memory pack's ``classes.procedural.promote_after_repeats: N`` says that an instruction a
user gives in N separate sessions is a standing one. The extractor (or an agent) often
files such a statement as a semantic fact ("Aditya wants replies in British English") and
each later session's repeat reinforces it; once the reinforcements that counted come from
N distinct sessions, :meth:`Promotion.after_reinforce` writes a procedural record with the
same text, subject, scope, links and evidence that supersedes it, with the source
references of every repeat on its creation event. See docs/decisions.md, "A repeated
instruction becomes a procedural record".

Instruction-shaped means the keyword classifier puts the record's attribute and content,
or the user's quoted words, in the ``instruction`` category ("always", "from now on",
"whenever", ...), and the user said it (a ``user_statement``). A record is promoted once:
it is superseded by the promotion.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime

from retold.clock import Clock, new_id
from retold.index.embedder import Embedder
from retold.index.vector import VectorIndex
from retold.ingest.evidence import normalize_ws, session_of
from retold.ingest.subject import EPISODIC_ATTRIBUTE, normalize_attribute, subject_of
from retold.ingest.summary import retire_superseded
from retold.models import ACTIVE_STATUSES, Record
from retold.policy.lifecycle import Lifecycle
from retold.policy.validity import starts
from retold.store import Embedding, NewEvent, Store

__all__ = ["Promoted", "Promotion"]

# (attribute, text) -> the keyword category, None when no keyword matched.
Categorize = Callable[[str | None, str], str | None]
PACK_KEY = "classes.procedural.promote_after_repeats"
_ATTRIBUTE_CHARS = 48  # an episode has no attribute: its words name the instruction


@dataclass(frozen=True)
class Promoted:
    """The procedural record a repeated instruction became."""

    record_id: str
    from_id: str
    status: str
    sessions: tuple[str, ...]


class Promotion:
    """Checks a just-reinforced record and promotes it when the pack's repeats are met."""

    def __init__(self, store: Store, index: VectorIndex, embedder: Embedder, lifecycle: Lifecycle,
                 clock: Clock, categorize: Categorize, *, repeats: int, keep_history: bool = True) -> None:
        self.store, self.index, self.embedder = store, index, embedder
        self.lifecycle, self.clock, self.categorize = lifecycle, clock, categorize
        self.repeats = repeats  # distinct sessions that make an instruction standing
        self.keep_history = keep_history  # classes.procedural.versioned, for the one it replaces

    def after_reinforce(self, record_id: str, actor: str) -> Promoted | None:
        """Promote ``record_id`` if it is a user's instruction now said in enough separate
        sessions; None (nothing written) otherwise. Runs after the reinforcement committed
        (inside an extraction run's transaction when extraction wrote it)."""
        store = self.store
        record = store.get_record(record_id)
        if record is None or not self._instruction(record):
            return None
        refs = sorted(store.counted_refs(record.id))
        sessions = tuple(sorted({s for s in map(session_of, refs) if s is not None}))
        if len(sessions) < self.repeats:
            return None
        attribute = record.attribute
        if record.type == "episodic" or not attribute or attribute == EPISODIC_ATTRIBUTE:
            attribute = normalize_attribute(record.content)[:_ATTRIBUTE_CHARS].rstrip("_") or "instruction"
        now = self.clock.now()
        promoted = replace(
            record, id=new_id(), type="procedural", version=record.version + 1, attribute=attribute,
            subject=subject_of(record.subject_entity_id, attribute), supersedes_id=record.id,
            created_at=now, creator_agent_id=actor, tags=list(record.tags), entity_ids=[],
            index_version=0, seq=0)
        incumbent = self._incumbent(promoted, now)
        if incumbent is not None and (
                normalize_ws(incumbent.content).casefold() == normalize_ws(record.content).casefold()
                or not self.lifecycle.has_authority(promoted, incumbent)):
            return None  # already standing as said, or a more authoritative one stands
        vector = self.index.vector_for(record.id)  # the same text: the same vector
        with store.atomic():
            links = store.record_links(record.id)
            promoted.entity_ids = [entity_id for entity_id, _ in links]
            change = store.transition(record.id, "superseded", from_statuses=ACTIVE_STATUSES,
                                      event=NewEvent("record.superseded", actor, {
                                          "by": promoted.id, "reason": "promoted to a procedural record",
                                          "pack_key": PACK_KEY}, record.id))
            if change is None:  # another writer changed it meanwhile
                return None
            retired = [(record.id, change.index_version)]
            if incumbent is not None:
                # The instruction it replaces held until the promoted one's window starts.
                retired += retire_superseded(store, incumbent.id, promoted, NewEvent(
                    "record.superseded", actor, {"by": promoted.id}, incumbent.id),
                    ends_validity=starts(promoted), keep_history=self.keep_history)
            written = store.write_record(
                promoted, links=links,
                embedding=None if vector is None else Embedding(self.embedder.name, self.embedder.version,
                                                                vector),
                event=lambda: NewEvent("record.created", actor, {
                    "outcome": f"promoted:{record.id}", "promoted_from": record.id,
                    "evidence_refs": refs, "sessions": list(sessions), "pack_key": PACK_KEY,
                    "source_kind": promoted.source_kind, "source_ref": promoted.source_ref,
                    "origin_scope": str(promoted.scope)}, promoted.id))
            if vector is None:
                store.mark_pending(promoted.id, "promoted from a record stored without its vector")
        for changed_id, version in retired:
            self.index.acknowledge(changed_id, version)
        if vector is not None:
            self.index.upsert(promoted.id, vector, written.index_version, written.seq)
        return Promoted(promoted.id, record.id, promoted.status, sessions)

    def _instruction(self, record: Record) -> bool:
        if (record.type not in ("semantic", "episodic") or record.status not in ACTIVE_STATUSES
                or record.source_kind != "user_statement"):
            return False
        return (self.categorize(record.attribute, record.content) == "instruction"
                or (record.evidence is not None and self.categorize(None, record.evidence) == "instruction"))

    def _incumbent(self, promoted: Record, now: datetime) -> Record | None:
        """The current procedural record under the same subject and attribute, if any."""
        if promoted.subject_entity_id is None:
            return None
        same = self.store.active_for_subject(promoted.scope, "procedural", promoted.subject_entity_id, now,
                                             attribute=promoted.attribute)
        return max(same, key=self.lifecycle.authority_key) if same else None
