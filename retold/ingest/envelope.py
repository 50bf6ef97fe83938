"""The envelope an extracted candidate must keep to be written.

A candidate's envelope is what the extractor cannot change by rewording: its class is
kept by the memory pack and clears the class's confidence floor, it holds no credential,
its evidence quote is found in the transcript, its time range is in order and its about
entity resolves without a guess. The session end checks it twice: before review (so the
reviewer sees only candidates that could be written) and again under the write lock, with
the transcript and grants read afresh. A review may narrow a candidate, never widen it
(:meth:`Envelope.revision_problem`). Nothing here writes: an entity named for the first
time is created by the write path at apply.
"""

from __future__ import annotations

from typing import Any

from retold.config import IngestionConfig
from retold.config.pack import BUILTIN_PACK, MemoryPack
from retold.ingest.evidence import normalize_ws, validate_evidence
from retold.ingest.screening import candidate_secret
from retold.models import CandidateRecord, EntityMention, Principal, Scope, Turn
from retold.names import normalize_alias
from retold.policy import grants
from retold.policy.lifecycle import Lifecycle
from retold.store import Store

__all__ = ["Envelope", "Rejected"]

_TIMES = ("event_at", "valid_from", "valid_until", "review_at")


class Rejected(Exception):
    """A candidate refused with a structured ``code``, a message and its details (recorded
    in the run's ``extraction.run`` event, never raised past the run)."""

    def __init__(self, code: str, message: str, **details: Any) -> None:
        super().__init__(message)
        self.code, self.message, self.details = code, message, details


class Envelope:
    """The envelope checks over ``store``'s entities and grants, with the evidence rules
    of ``ingestion``, the source ranks of ``lifecycle`` and the classes ``pack`` keeps."""

    def __init__(self, store: Store, ingestion: IngestionConfig, lifecycle: Lifecycle,
                 pack: MemoryPack = BUILTIN_PACK) -> None:
        self.store, self.cfg, self.lifecycle, self.pack = store, ingestion, lifecycle, pack

    def destination(self, principal: Principal) -> Scope:
        """The principal's user scope when writable, else the private scope."""
        user = Scope("user", principal.user_id)
        return user if grants.can_write(self.store, principal, user) else principal.private_scope

    def check(self, cand: CandidateRecord, principal: Principal, turns: list[Turn], scope: Scope) -> str:
        """Check a candidate's envelope without writing anything; return the primary
        entity id ("" when apply will create it) or raise :class:`Rejected`."""
        # Type, content, source kind and time zones were checked by the stage's JSON schema.
        policy = self.pack.classes.of(cand.type)
        if not policy.enabled:  # refused before anything is looked up or written
            raise Rejected("class_disabled", f"{cand.type} memories are not kept here (memory pack "
                           f"classes.{cand.type}.enabled: false)")
        if cand.confidence < policy.extraction_confidence_floor:
            raise Rejected("below_confidence_floor",
                           f"confidence {cand.confidence:g} is below the memory pack's "
                           f"classes.{cand.type}.extraction_confidence_floor "
                           f"{policy.extraction_confidence_floor:g}",
                           confidence=cand.confidence, floor=policy.extraction_confidence_floor)
        if secret := candidate_secret(cand):
            raise Rejected("secret_detected", secret.message, kind=secret.kind, field=secret.field)
        check = validate_evidence(
            turns, cand.evidence, cand.source_kind, turn_hint=cand.evidence_turn,
            min_characters=self.cfg.evidence.min_characters, min_words=self.cfg.evidence.min_words,
            source_rank=self.lifecycle.ranks)
        if not check.found:  # extraction rejects where memory_write would downgrade
            raise Rejected("evidence_not_found", check.note or "evidence not found",
                           evidence_turn=cand.evidence_turn)
        if cand.valid_from and cand.valid_until and cand.valid_from > cand.valid_until:
            raise Rejected("invalid_temporal", "valid_from is after valid_until")
        readable = grants.readable_scopes(self.store, principal)
        found = [self._lookup(m, readable) for m in cand.entity_mentions if m.role == "about"]
        if found:
            return found[0]
        user = Scope("user", principal.user_id)
        if cand.type != "episodic" and scope != user:  # as for an explicit write
            raise Rejected("invalid_subject", "about entity required outside the user scope")
        person = self.store.entities_by_alias(normalize_alias(principal.user_id), scopes=[user],
                                              kinds=["person"])
        return person[0].id if len(person) == 1 else ""

    def _lookup(self, mention: EntityMention, readable: list[Scope]) -> str:
        """Resolve an about mention read-only: nothing is created before apply."""
        if mention.entity_id:  # the ingestor checks it is readable (not_found otherwise)
            return mention.entity_id
        norm = normalize_alias(mention.text)
        if not norm:
            raise Rejected("invalid_input", "an entity mention needs a name")
        hits = self.store.entities_by_alias(norm, scopes=readable, kinds=[mention.kind])
        if len(hits) > 1:  # never guess: reject and record the candidate entity ids
            raise Rejected("entity_ambiguous", f"{mention.text!r} names several entities",
                           candidates=[h.id for h in hits])
        return hits[0].id if hits else ""

    def revision_problem(self, old: CandidateRecord, new: CandidateRecord | None) -> str | None:
        """A review may narrow content, attribute or temporal metadata, never widen the
        claim: the evidence, entities and source stay what the extractor found."""
        if new is None:
            return "a revision must carry the revised candidate"
        rank = self.lifecycle.rank
        added = [k for k in _TIMES if getattr(old, k) is None and getattr(new, k) is not None]
        forbidden = [
            (new.type != old.type, "change the record type"),
            (normalize_ws(new.evidence) != normalize_ws(old.evidence)
             or new.evidence_turn != old.evidence_turn, "replace the evidence quote or turn"),
            (rank(new.source_kind) > rank(old.source_kind), "strengthen source_kind"),
            (new.entity_mentions != old.entity_mentions, "substitute entities"),
            (bool(added), f"introduce unsupported {', '.join(added)}"),
        ]
        return next((f"a revision may not {what}" for bad, what in forbidden if bad), None)
