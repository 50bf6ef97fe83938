"""Session summaries: one live episodic record per session, retired with what it restates.

The summary is keyed by ``session:<id>``: the same text again is ``already_reinforced``,
new text supersedes the live one (which stays as history). Its subject is the principal's
person entity; other names it mentions are linked when they resolve to one entity.

A summary restates its session, so when a record that session stated or reinforced is
superseded, :func:`retire_superseded` retires the summary in the same transaction: it
would otherwise go on presenting the old value as current (docs/decisions.md, "A session
summary retires with the records it restates").
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

from retold.clock import Clock, new_id
from retold.index.embedder import Embedder
from retold.ingest.entities import EntityError, EntityResolver
from retold.ingest.evidence import normalize_ws, session_of
from retold.ingest.subject import EPISODIC_ATTRIBUTE, subject_of
from retold.models import ACTIVE_STATUSES, Principal, Record, Scope, SessionSummary
from retold.policy import grants
from retold.policy.lifecycle import Lifecycle
from retold.policy.sensitivity import SensitivityRules
from retold.store import Embedding, NewEvent, Store
from retold.store.sessions import SessionRow

__all__ = ["SummaryWriter", "retire_superseded"]


def retire_superseded(store: Store, record_id: str, successor: Record, event: NewEvent, *,
                      ends_validity: datetime | None, keep_history: bool = True) -> list[tuple[str, int]]:
    """Mark ``record_id`` superseded by ``successor`` (with ``event``), then retire the live
    summaries of the sessions that stated or reinforced it, inside the caller's transaction.

    ``ends_validity`` is where the retired rows' validity windows end (where the
    successor's starts); None leaves them as they are.

    ``keep_history=False`` (a memory pack whose ``classes.procedural.versioned`` is false)
    replaces the old record instead: it is forgotten, not kept as history, with a
    ``record.forgotten`` event carrying ``event``'s payload (``by`` names the successor),
    so ``include_history`` no longer finds it, ``restore`` can bring it back within the
    restore window and ``retold retain`` erases it after (docs/decisions.md, "An
    unversioned instruction is replaced, not kept").

    The successor's own session is spared: its summary is written knowing the new value.
    Returns ``(record id, index_version)`` for every row retired, the record first, so the
    caller can acknowledge them in its vector index after the commit. A replaced record is
    left out: its vector is dead, and the index's next refresh drops it, as it drops a
    record another process forgot.
    """
    if keep_history:
        change = store.transition(record_id, "superseded", from_statuses=ACTIVE_STATUSES,
                                  ends_validity=ends_validity, event=event)
    else:
        old = store.get_record(record_id)
        change = store.transition(record_id, "deleted", from_statuses=ACTIVE_STATUSES, event=NewEvent(
            "record.forgotten", event.actor, {
                **event.payload, "previous_status": old.status if old else None, "replaced": True,
                "pack_key": "classes.procedural.versioned"}, record_id))
    assert change is not None  # callers read the record as active under this same write lock
    retired = [(record_id, change.index_version)] if keep_history else []
    sessions = {session_of(ref) for ref in store.counted_refs(record_id)}
    sessions -= {session_of(successor.source_ref), None}
    for session_id in sorted(s for s in sessions if s is not None):
        for summary in store.find_records(source_kind="session_summary", source_ref=f"session:{session_id}",
                                          statuses=ACTIVE_STATUSES):
            restates = NewEvent("record.superseded", successor.creator_agent_id, {
                "by": successor.id, "restates": record_id, "reason": "restates a superseded record"},
                summary.id)
            done = store.transition(summary.id, "superseded", from_statuses=ACTIVE_STATUSES,
                                    ends_validity=ends_validity, event=restates)
            if done is not None:
                retired.append((summary.id, done.index_version))
    return retired


class SummaryWriter:
    """Writes a session's summary inside the caller's apply transaction."""

    def __init__(self, store: Store, embedder: Embedder, lifecycle: Lifecycle, clock: Clock,
                 sensitivity: SensitivityRules | None = None) -> None:
        self.store, self.embedder, self.lifecycle, self.clock = store, embedder, lifecycle, clock
        self.sensitivity = sensitivity or SensitivityRules()

    def write(self, session: SessionRow, principal: Principal, scope: Scope,
                       summary: SessionSummary, content: str, vector: Any) -> tuple[str, str | None]:
        """One confirmed episodic record per session, keyed by ``session:<id>``, with
        ``vector`` embedded from its masked text (``self.sensitivity.mask``): identical
        text is already_reinforced, new text supersedes. Text identical to a summary that
        already left the live set (retired, forgotten, expired) is not written again, so a
        re-run cannot bring back what retirement or forgetting removed."""
        store, life, now = self.store, self.lifecycle, self.clock.now()
        if not content or vector is None:
            return "skipped_empty", None
        ref = f"session:{session.id}"
        past = store.find_records(source_kind="session_summary", source_ref=ref)
        if past and normalize_ws(past[-1].content).casefold() == content.casefold():
            latest = past[-1]
            is_live = latest.status in ACTIVE_STATUSES
            return ("already_reinforced" if is_live else f"already_{latest.status}"), latest.id
        live = [r for r in past if r.status in ACTIVE_STATUSES]
        links, dropped = self._links(principal, scope, summary)
        subject = links[0][0] if links and links[0][1] == "about" else None
        record = Record(
            id=new_id(), type="episodic", version=live[0].version + 1 if live else 1, content=content,
            subject=subject_of(subject, EPISODIC_ATTRIBUTE), subject_entity_id=subject,
            attribute=EPISODIC_ATTRIBUTE, scope=scope, source_kind="session_summary", source_ref=ref,
            creator_agent_id=principal.agent_id, evidence=None, created_at=now,
            event_at=session.ended_at or now, expires_at=life.initial_expiry("session_summary", now),
            valid_from=None, valid_until=None, review_at=None, review_flagged_at=None,
            confidence=life.initial_confidence("session_summary"),
            status=life.initial_status("session_summary"), supersedes_id=live[0].id if live else None,
            reinforcements=0, last_reinforced_at=None, entity_ids=[e for e, _ in links])
        # Classified by its text alone: a summary has no evidence, and its attribute is
        # the summaries' own, which says nothing about what the text holds.
        sensitivity = self.sensitivity.classify(content)
        record.sensitivity, record.redacted_content = sensitivity.name, sensitivity.redacted_content
        outcome = f"superseded:{live[0].id}" if live else "created"
        with store.atomic():
            if live:
                # The store admits one live summary per session, so the old one retires
                # first; it stays as history, its window ending where the new account starts.
                replaced = NewEvent("record.superseded", record.creator_agent_id, {"by": record.id},
                                    live[0].id)
                store.transition(live[0].id, "superseded", from_statuses=ACTIVE_STATUSES,
                                 ends_validity=record.event_at, event=replaced)
            store.write_record(
                record, links=links,
                embedding=Embedding(self.embedder.name, self.embedder.version, vector),
                event=lambda: NewEvent("record.created", record.creator_agent_id, {
                    "origin": "extraction", "source_kind": "session_summary", "source_ref": ref,
                    "outcome": outcome, "ambiguous_mention": dropped, "origin_scope": str(scope)},
                    record.id))
        return outcome, record.id

    def _links(self, principal: Principal, scope: Scope,
                       summary: SessionSummary) -> tuple[list[tuple[str, str]], list[dict[str, Any]]]:
        """The principal's person entity as subject, other entities as mentions; ambiguous
        or unresolvable aliases are dropped and reported."""
        links: list[tuple[str, str]] = []
        dropped: list[dict[str, Any]] = []
        names = EntityResolver(self.store)
        if grants.can_read(self.store, principal, Scope("user", principal.user_id)):
            own = names.principal_entity(principal)
            links += [(own.entity.id, "about")] if own.entity is not None else []
        for mention in summary.entity_mentions:
            try:
                res = names.resolve([replace(mention, role="mentions")], scope, principal)[0]
            except EntityError as exc:
                dropped.append({"text": mention.text, "reason": exc.code})
                continue
            if res.entity is None:
                dropped.append({"text": mention.text, "candidates": res.candidates})
            elif all(res.entity.id != e for e, _ in links):
                links.append((res.entity.id, "mentions"))
        return links, dropped
