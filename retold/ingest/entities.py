"""Entity resolution: exact, scope-aware alias lookup.

A wrong link can expose unrelated memory, so the resolver never guesses: it looks an
alias up only in the caller's readable scopes, links when exactly one active entity of
the mention's kind owns it, reports every candidate when several do, and otherwise
creates a provisional entity in the writer's scope.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from retold.errors import RetoldError
from retold.models import ENTITY_KINDS, Entity, EntityMention, Principal, Resolution, Scope
from retold.names import normalize_alias, normalize_canonical
from retold.policy.grants import readable_scopes, writable_scopes
from retold.store import Store

__all__ = [
    "EntityError",
    "EntityErrorCode",
    "EntityResolver",
]

EntityErrorCode = Literal[
    "entity_not_readable", "entity_kind_mismatch", "scope_not_writable", "invalid_input"
]


class EntityError(RetoldError):
    """A mention the resolver refuses; ``code`` is the structured tool error."""

    def __init__(self, code: EntityErrorCode, message: str) -> None:
        super().__init__(message)
        self.code: EntityErrorCode = code
        self.message = message


class EntityResolver:
    """Resolves entity mentions for one store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def resolve(
        self, mentions: Sequence[EntityMention], scope: Scope, principal: Principal
    ) -> list[Resolution]:
        """One Resolution per mention, in order.

        Raises EntityError for an unreadable (or missing) explicit id, a kind mismatch,
        an empty mention, or a needed creation in a scope the principal cannot write.
        Ambiguity is an outcome, never an error, and writes no event: the caller decides
        (the ingestor refuses an ambiguous ``about`` entity and lists an ambiguous mention
        in its own write event). Creations join the caller's open transaction as a
        savepoint.
        """
        readable = readable_scopes(self.store, principal)
        out: list[Resolution] = []
        for mention in mentions:
            if mention.kind not in ENTITY_KINDS:
                raise EntityError("invalid_input", f"unknown entity kind {mention.kind!r}")
            if mention.entity_id:
                out.append(Resolution(mention, self._explicit(mention, readable), "explicit", []))
                continue
            norm = normalize_alias(mention.text)
            if not norm:
                raise EntityError("invalid_input", "an entity mention needs a name")
            hits = self.store.entities_by_alias(norm, scopes=readable, kinds=[mention.kind])
            if len(hits) == 1:
                out.append(Resolution(mention, hits[0], "resolved", []))
            elif len(hits) > 1:
                out.append(Resolution(mention, None, "ambiguous", [h.id for h in hits]))  # never pick one
            else:
                out.append(self._create(mention, norm, scope, principal, readable))
        return out

    def principal_entity(self, principal: Principal) -> Resolution:
        """The principal's person entity in ``user:<user_id>``.

        It carries ``normalize_alias(user_id)``. When absent it is created ``confirmed``
        (the host, not a model, vouches for the user) without a writability check. Two
        person entities carrying the alias (possible after merges or manual edits) give
        an ``ambiguous`` Resolution, which the handler turns into entity_ambiguous.
        """
        scope = Scope("user", principal.user_id)
        norm = normalize_alias(principal.user_id)
        mention = EntityMention(kind="person", text=principal.user_id, role="about")
        hits = self.store.entities_by_alias(norm, scopes=[scope], kinds=["person"])
        if len(hits) == 1:
            return Resolution(mention, hits[0], "resolved", [])
        if len(hits) > 1:
            return Resolution(mention, None, "ambiguous", [h.id for h in hits])
        with self.store.atomic():
            # Look again under the write lock: another process may have created it.
            hits = self.store.entities_by_alias(norm, scopes=[scope], kinds=["person"])
            if len(hits) == 1:
                return Resolution(mention, hits[0], "resolved", [])
            if len(hits) > 1:
                return Resolution(mention, None, "ambiguous", [h.id for h in hits])
            entity = self._insert(mention, norm, scope, "confirmed", actor=principal.agent_id)
        return Resolution(mention, entity, "created", [])

    def describe_candidates(self, ids: Sequence[str]) -> list[dict[str, str]]:
        """id, kind, canonical name and scope of each candidate, for entity_ambiguous."""
        out: list[dict[str, str]] = []
        for entity_id in ids:
            entity = self.store.get_entity(entity_id)
            if entity is not None:
                out.append(
                    {"id": entity.id, "kind": entity.kind, "canonical": entity.canonical,
                     "scope": str(entity.scope)}
                )
        return out

    # -- steps ---------------------------------------------------------------------------

    def _explicit(self, mention: EntityMention, readable: list[Scope]) -> Entity:
        assert mention.entity_id is not None
        # Missing and unreadable answer identically, checked before anything that
        # would describe the entity, so no message confirms that a foreign id exists.
        not_readable = EntityError("entity_not_readable", f"entity {mention.entity_id} is not readable")
        entity = self.store.get_entity(mention.entity_id)
        if entity is None or entity.scope not in readable:
            raise not_readable
        entity = self.store.follow_merges(entity)
        # The survivor of a merge may live in a scope this caller cannot read; linking
        # to it would leak its existence, so it answers like a missing id too.
        if entity.scope not in readable or entity.status not in ("provisional", "confirmed"):
            raise not_readable
        if entity.kind != mention.kind:
            raise EntityError(
                "entity_kind_mismatch",
                f"entity {mention.entity_id} is a {entity.kind}, not a {mention.kind}",
            )
        return entity

    def _create(
        self, mention: EntityMention, norm: str, scope: Scope, principal: Principal, readable: list[Scope]
    ) -> Resolution:
        if scope not in writable_scopes(self.store, principal):
            raise EntityError("scope_not_writable", f"cannot create an entity in {scope}")
        with self.store.atomic():
            # Repeat the lookup under the write lock (BEGIN IMMEDIATE), so two writers
            # that both missed the alias do not create two entities for one name.
            hits = self.store.entities_by_alias(norm, scopes=readable, kinds=[mention.kind])
            if len(hits) == 1:
                return Resolution(mention, hits[0], "resolved", [])
            if len(hits) > 1:
                return Resolution(mention, None, "ambiguous", [h.id for h in hits])
            entity = self._insert(mention, norm, scope, "provisional", actor=principal.agent_id)
        return Resolution(mention, entity, "created", [])

    def _insert(self, mention: EntityMention, norm: str, scope: Scope, status: str, *, actor: str) -> Entity:
        entity = self.store.create_entity(
            mention.kind, normalize_canonical(mention.text), scope, status=status
        )
        self.store.add_alias(entity.id, norm)
        entity.aliases = [norm]
        self.store.append_event(
            "entity.created",
            actor,
            {"kind": entity.kind, "canonical": entity.canonical, "scope": str(scope),
             "status": status, "alias": norm},
            entity_id=entity.id,
        )
        return entity
