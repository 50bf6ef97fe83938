"""The record a write proposes: its entities resolved and its fields settled.

A write's request names what it is about by mention; the candidate is that request made a
record: each mention resolved to an entity (missing ones are created, an ambiguous
``about`` is refused), the primary entity fixed (the principal's own person entity when
none is named), and the lifecycle's initial status, expiry and confidence for the source
kind its evidence settled. It is built inside the write's transaction, and built again
when the decision is made again under the write lock, because entity creation must see
the same locked state as the decision.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from retold.clock import new_id
from retold.ingest.entities import EntityError, EntityResolver
from retold.ingest.subject import subject_of
from retold.ingest.write_request import Admission, Claim, Refusal, WriteRequest
from retold.models import Principal, Record, Resolution, Scope
from retold.policy import grants
from retold.policy.lifecycle import Lifecycle
from retold.store import Store

__all__ = ["Candidate", "CandidateBuilder"]


@dataclass(frozen=True)
class Candidate:
    """The proposed record with its entity links (id, role), the mentions left unlinked
    because they were ambiguous, the notes that say so, and the source kind the request
    asked for (the record's own may have been downgraded by the evidence check)."""

    record: Record
    links: tuple[tuple[str, str], ...]
    ambiguous: tuple[dict[str, Any], ...]
    notes: tuple[str, ...]
    requested_source_kind: str

    @property
    def entity_ids(self) -> list[str]:
        """The linked entities, in link order: what the write lock's window checks."""
        return [entity_id for entity_id, _ in self.links]


class CandidateBuilder:
    """Resolves a request's entities and builds the record it proposes."""

    def __init__(self, store: Store, resolver: EntityResolver, lifecycle: Lifecycle) -> None:
        self.store, self.resolver, self.lifecycle = store, resolver, lifecycle

    def build(self, principal: Principal, request: WriteRequest, admission: Admission, claim: Claim,
              now: datetime) -> Candidate:
        """The candidate record for ``request``; raises :class:`Refusal` for an entity that
        cannot be resolved."""
        notes: list[str] = []
        primary, links, ambiguous = self._entities(principal, request, admission.scope, notes)
        prov = claim.provenance
        record = Record(
            id=new_id(), type=request.type, version=1,  # type: ignore[arg-type]
            content=request.content.strip(), subject=subject_of(primary, admission.attribute),
            subject_entity_id=primary, attribute=admission.attribute, scope=admission.scope,
            source_kind=prov.source_kind,  # type: ignore[arg-type]
            source_ref=prov.source_ref, creator_agent_id=principal.agent_id,
            evidence=prov.evidence, created_at=now, event_at=request.event_at or now,
            expires_at=self.lifecycle.initial_expiry(prov.source_kind, now),
            valid_from=request.valid_from, valid_until=request.valid_until,
            review_at=request.review_at, review_flagged_at=None,
            confidence=self.lifecycle.initial_confidence(prov.source_kind),
            status=self.lifecycle.initial_status(prov.source_kind),
            supersedes_id=None, reinforcements=0, last_reinforced_at=None,
            tags=list(request.tags), entity_ids=[e for e, _ in links],
        )
        if (sensitivity := claim.sensitivity) is not None:
            record.sensitivity, record.redacted_content = sensitivity.name, sensitivity.redacted_content
            record.sensitivity_label = sensitivity.label
        return Candidate(record, tuple(links), tuple(ambiguous), tuple(notes), request.source_kind)

    def _entities(
        self, principal: Principal, request: WriteRequest, scope: Scope, notes: list[str]
    ) -> tuple[str | None, list[tuple[str, str]], list[dict[str, Any]]]:
        """Resolve mentions; return the primary entity, the links and ambiguities."""
        try:
            resolutions = self.resolver.resolve(list(request.entities), scope, principal)
        except EntityError as exc:
            # A missing and an unreadable entity id answer alike, as not_found.
            code = {"entity_not_readable": "not_found", "entity_kind_mismatch": "invalid_input"}
            raise Refusal(code.get(exc.code, exc.code), str(exc)) from None
        links: list[tuple[str, str]] = []
        ambiguous: list[dict[str, Any]] = []
        primary: str | None = None
        for res in resolutions:
            if res.outcome == "ambiguous":
                if res.mention.role == "about":
                    raise Refusal(
                        "entity_ambiguous",
                        f"{res.mention.text!r} names several entities; pass one entity_id",
                        candidates=self.resolver.describe_candidates(res.candidates),
                    )
                ambiguous.append({"text": res.mention.text, "candidates": res.candidates})
                notes.append(f"ambiguous mention {res.mention.text!r} not linked")
                continue
            assert res.entity is not None
            if res.mention.role == "about" and primary is None:
                primary = res.entity.id
            if all(res.entity.id != e for e, _ in links):
                links.append((res.entity.id, res.mention.role))
        if primary is None:
            primary = self._principal_subject(principal, request, scope)
            if primary is not None:
                links.insert(0, (primary, "about"))
        return primary, links, ambiguous

    def _principal_subject(self, principal: Principal, request: WriteRequest, scope: Scope) -> str | None:
        """A subject-less write is about the principal's person entity."""
        own_scope = scope == Scope("user", principal.user_id)
        if request.type != "episodic" and not own_scope:
            raise Refusal("invalid_subject", "about entity required")
        if request.type == "episodic" and not grants.can_read(
            self.store, principal, Scope("user", principal.user_id)
        ):
            return None
        res: Resolution = self.resolver.principal_entity(principal)
        if res.outcome == "ambiguous":
            raise Refusal(
                "entity_ambiguous",
                f"several person entities carry the alias of user {principal.user_id!r}",
                candidates=self.resolver.describe_candidates(res.candidates),
            )
        return res.entity.id if res.entity else None
