"""MemoryHost: the host's administrative API for grants, members and principals.

Agents never grant themselves anything: every scope other than the implicit private
``agent:<agent_id>/<user_id>`` is provisioned here (or by the ``retold grant`` and
``retold members`` commands, which wrap this class), and every change appends an audit
event in the same transaction as the change itself. A shared (project or org) scope
needs both: the agent's grant and the user's membership.
"""

from __future__ import annotations

from collections.abc import Sequence

from retold.clock import Clock
from retold.errors import RetoldError
from retold.models import Entity, Scope
from retold.names import normalize_alias, normalize_canonical
from retold.store import Store
from retold.store.members import SHARED_KINDS, Member
from retold.store.pins import PinRefusedError

__all__ = ["HostError", "MemoryHost"]


class HostError(RetoldError):
    """The host refused an administrative change; nothing was written."""


def _check_id(name: str, value: str) -> None:
    # '/' separates agent and user in the private scope id, so neither id may contain it,
    # or agent:a/b/c could name two different principal pairs.
    if not isinstance(value, str) or not value.strip():
        raise HostError(f"{name} must be a non-empty string")
    if "/" in value:
        raise HostError(f"{name} must not contain '/', got {value!r}")


def _check_shared(scope: Scope) -> None:
    if scope.kind not in SHARED_KINDS:
        raise HostError(
            f"{scope} is not a shared scope; members belong to {' or '.join(SHARED_KINDS)} scopes"
        )


class MemoryHost:
    """Grants, memberships and principal provisioning over one store."""

    def __init__(self, store: Store, clock: Clock | None = None, *, max_pinned_per_scope: int = 50) -> None:
        self.store = store
        self.clock: Clock = clock or store.clock
        self.max_pinned_per_scope = max_pinned_per_scope

    def pin(self, record_id: str, reason: str, actor: str = "admin") -> bool:
        """Keep a live record from ageing out (the expiry sweep skips it); False when it
        was already pinned. HostError when it is missing, not live, or its scope holds
        ``lifecycle.max_pinned_per_scope`` pins."""
        try:
            return self.store.pin(record_id, actor, reason, self.max_pinned_per_scope) is not None
        except PinRefusedError as err:
            raise HostError(str(err)) from None

    def unpin(self, record_id: str, reason: str, actor: str = "admin") -> bool:
        """Remove a pin; False when the record was not pinned."""
        return self.store.unpin(record_id, actor, reason) is not None

    def grant(
        self, agent_id: str, scope: Scope, read: bool = True, write: bool = False, actor: str = "admin"
    ) -> None:
        """Give ``agent_id`` read and/or write access to ``scope``.

        Refused with HostError: an empty agent id or one containing ``/``, a private
        agent scope (``agent:A/U`` is implicit and must not be granted to anyone else),
        and a user scope whose id contains ``/``.
        """
        _check_id("agent_id", agent_id)
        if scope.is_private:
            raise HostError(
                f"{scope} is a private agent scope; it is implicit for its own agent and user"
                " and cannot be granted"
            )
        if scope.kind == "user":
            _check_id("user scope id", scope.id)
        with self.store.atomic():
            self.store.put_grant(agent_id, scope, read=read, write=write)
            self.store.append_event(
                "grant.changed",
                actor,
                {"agent_id": agent_id, "scope": str(scope), "read": read, "write": write},
            )

    def revoke(self, agent_id: str, scope: Scope, actor: str = "admin") -> bool:
        """Remove a grant; True when one existed. Only a real removal is logged, since
        nothing changed otherwise."""
        with self.store.atomic():
            removed = self.store.delete_grant(agent_id, scope)
            if removed:
                self.store.append_event(
                    "grant.changed",
                    actor,
                    {"agent_id": agent_id, "scope": str(scope), "read": False, "write": False,
                     "revoked": True},
                )
        return removed

    def add_member(self, scope: Scope, user_id: str, actor: str = "admin") -> bool:
        """Make ``user_id`` a member of a project or org scope; False when they already were.

        Agents granted the scope may then read (and, with a write grant, write) it in that
        user's sessions. A principal whose session names a project belongs to it without
        this call. Refused with HostError: another scope kind, an empty user id or one
        containing ``/``. Only a real addition is logged.
        """
        _check_shared(scope)
        _check_id("user_id", user_id)
        with self.store.atomic():
            added = self.store.put_member(scope, user_id, added_by=actor)
            if added:
                self._membership_event(scope, user_id, actor, member=True)
        return added

    def remove_member(self, scope: Scope, user_id: str, actor: str = "admin") -> bool:
        """End an explicit membership; True when one existed. Access that comes from the
        project a principal names is not a row and is not affected."""
        _check_shared(scope)
        with self.store.atomic():
            removed = self.store.delete_member(scope, user_id)
            if removed:
                self._membership_event(scope, user_id, actor, member=False)
        return removed

    def members(self, scope: Scope) -> list[Member]:
        """The explicit members of a project or org scope, by user id."""
        _check_shared(scope)
        return self.store.members_of(scope)

    def _membership_event(self, scope: Scope, user_id: str, actor: str, *, member: bool) -> None:
        # user_id under that key, so erasing the user blanks the event's payload too.
        self.store.append_event(
            "membership.changed", actor, {"scope": str(scope), "user_id": user_id, "member": member}
        )

    def provision_user(self, user_id: str, aliases: Sequence[str] = (), actor: str = "admin") -> Entity:
        """Create or complete the principal's person entity in ``user:<user_id>``.

        The entity carries ``normalize_alias(user_id)`` first, then each display name in
        ``aliases``, normalised. An alias that already names a different active person
        entity in that scope is refused with HostError and nothing is written. Calling
        it again with the same names changes nothing and logs nothing; otherwise a
        ``principal.provisioned`` event records what was created or added.
        """
        _check_id("user_id", user_id)
        scope = Scope("user", user_id)
        principal_alias = normalize_alias(user_id)
        wanted: list[str] = []
        for alias in aliases:
            norm = normalize_alias(alias)
            if not norm:
                raise HostError(f"alias {alias!r} is empty once normalised")
            if norm not in wanted and norm != principal_alias:
                wanted.append(norm)

        # One transaction: every check runs under the write lock, and a refusal rolls
        # back the entity creation too, so a refused call leaves the store untouched.
        with self.store.atomic():
            hits = self.store.entities_by_alias(principal_alias, scopes=[scope], kinds=["person"])
            if len(hits) > 1:
                raise HostError(
                    f"{len(hits)} person entities in {scope} carry {principal_alias!r}"
                    f" ({', '.join(h.id for h in hits)}); merge them first"
                )
            entity = hits[0] if hits else None
            for norm in wanted:
                others = [
                    e for e in self.store.entities_by_alias(norm, scopes=[scope], kinds=["person"])
                    if entity is None or e.id != entity.id
                ]
                if others:
                    raise HostError(
                        f"alias {norm!r} already names another person entity in {scope}"
                        f" ({', '.join(e.id for e in others)})"
                    )
            created = entity is None
            if entity is None:
                entity = self.store.create_entity(
                    "person", normalize_canonical(user_id), scope, status="confirmed"
                )
                self.store.add_alias(entity.id, principal_alias)
                self.store.append_event(
                    "entity.created",
                    actor,
                    {"kind": "person", "canonical": entity.canonical, "scope": str(scope),
                     "status": "confirmed", "alias": principal_alias},
                    entity_id=entity.id,
                )
            added = [norm for norm in wanted if self.store.add_alias(entity.id, norm)]
            if created or added:
                self.store.append_event(
                    "principal.provisioned",
                    actor,
                    {"user_id": user_id, "entity_id": entity.id, "created": created,
                     "aliases_added": added},
                    entity_id=entity.id,
                )
        current = self.store.get_entity(entity.id)
        assert current is not None
        return current
