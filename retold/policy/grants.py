"""Readable and writable scopes of a principal.

The only implicit scope is the private ``agent:<agent_id>/<user_id>``; every other scope
needs a grant from the host. Two safety belts apply to grant rows, whoever wrote them: a
``user:X`` grant counts only while the principal is user X, and a private-scope grant
``agent:A/U`` (which MemoryHost refuses to create, but a direct store write could) counts
only while the principal user is U.

A grant on a shared scope (project or org) is per agent, and one agent may serve users of
many customers, so it counts only while the principal's user belongs to the scope: the
project the principal names, or an explicit membership the host added. Every read and
write path takes its scopes from here, so this one rule covers them all.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Protocol

from retold.models import Principal, Scope
from retold.store.grants import Grant
from retold.store.members import SHARED_KINDS

__all__ = [
    "Access",
    "ScopeCache",
    "DEFAULT_TARGETS",
    "GrantSource",
    "can_read",
    "can_write",
    "is_member",
    "no_grant_reason",
    "readable_scopes",
    "resolve_write_target",
    "writable_scopes",
    "write_targets",
]

DEFAULT_TARGETS = ("personal", "current_project")


class GrantSource(Protocol):
    def grants_for(self, agent_id: str) -> list[Grant]: ...
    def member_scopes(self, user_id: str) -> list[Scope]: ...


class VersionedGrants(GrantSource, Protocol):
    def access_version(self) -> int: ...


# Principals whose scopes one process keeps; past this many it starts over.
_SCOPE_CACHE_ENTRIES = 4096


class ScopeCache:
    """A principal's readable scopes, kept until grants or memberships change.

    An agent searches many times between grant changes, and each search would otherwise
    read the agent's grants and the user's memberships again (two queries, a round trip
    each on PostgreSQL). The store's ``access_version`` moves on every change to either
    table, whoever makes it (triggers keep it), so one read of it per call says whether
    what is kept still holds; a revoked grant is honoured by the next search.
    """

    def __init__(self, store: VersionedGrants) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._version = -1
        self._readable: dict[tuple[str, str, str | None], list[Scope]] = {}

    def readable(self, principal: Principal) -> list[Scope]:
        """What :func:`readable_scopes` answers now, read from the store only when the
        grants or memberships changed since this principal was last asked about."""
        version = self.store.access_version()
        key = (principal.agent_id, principal.user_id, principal.project_id)
        with self._lock:
            if version != self._version or len(self._readable) > _SCOPE_CACHE_ENTRIES:
                self._readable, self._version = {}, version
            elif (kept := self._readable.get(key)) is not None:
                return list(kept)
        scopes = readable_scopes(self.store, principal)
        with self._lock:
            if self._version == version:  # another thread may have seen a newer version meanwhile
                self._readable[key] = scopes
        return list(scopes)


def is_member(principal: Principal, scope: Scope, memberships: Callable[[], list[Scope]]) -> bool:
    """Whether the principal's user belongs to a shared scope. ``memberships`` reads the
    user's explicit ones; it is called only when the project the principal names does
    not already decide it."""
    if scope.kind == "project" and scope.id == principal.project_id:
        return True
    return scope in memberships()


def _honoured(scope: Scope, principal: Principal, memberships: Callable[[], list[Scope]]) -> bool:
    if scope.kind == "user":
        return scope.id == principal.user_id
    if scope.is_private:
        return scope.id.rpartition("/")[2] == principal.user_id
    if scope.kind in SHARED_KINDS:
        return is_member(principal, scope, memberships)
    return True


def _scopes(store: GrantSource, principal: Principal, *, write: bool) -> list[Scope]:
    scopes = [principal.private_scope]
    # Read once, and only when a shared grant asks.
    memberships = cache(lambda: store.member_scopes(principal.user_id))
    for grant in store.grants_for(principal.agent_id):
        allowed = grant.can_write if write else grant.can_read
        if allowed and grant.scope not in scopes and _honoured(grant.scope, principal, memberships):
            scopes.append(grant.scope)
    return scopes


def readable_scopes(store: GrantSource, principal: Principal) -> list[Scope]:
    """The private scope first, then every honoured read grant (a shared scope only for
    its members)."""
    return _scopes(store, principal, write=False)


def no_grant_reason(store: GrantSource, principal: Principal, scopes: list[Scope]) -> str | None:
    """Why ``scopes`` (what :func:`readable_scopes` gave) hold only the agent's private
    scope, or None when a grant is honoured. An agent nobody granted anything looks, from
    inside, exactly like one whose store is empty; this sentence tells the two apart."""
    if [s for s in scopes if s != principal.private_scope]:
        return None
    if not store.grants_for(principal.agent_id):
        return (f"agent {principal.agent_id!r} holds no grant, so it can read only its private scope (a host"
                f" grants one: retold grant {principal.agent_id} user:{principal.user_id} --store ...)")
    project = "" if principal.project_id is None else f" in project {principal.project_id!r}"
    return (f"no grant of agent {principal.agent_id!r} covers user {principal.user_id!r}{project},"
            " so it can read only its private scope")


def writable_scopes(store: GrantSource, principal: Principal) -> list[Scope]:
    """The private scope first, then every honoured write grant (a shared scope only for
    its members)."""
    return _scopes(store, principal, write=True)


@dataclass(frozen=True)
class Access:
    """A caller's readable and writable scopes, read once per call; None is every scope
    (an operator in the inspector, whom no grant limits)."""

    readable: list[Scope] | None
    writable: list[Scope] | None

    @classmethod
    def of(cls, store: GrantSource, principal: Principal) -> Access:
        return cls(readable_scopes(store, principal), writable_scopes(store, principal))

    @classmethod
    def everything(cls) -> Access:
        return cls(None, None)

    def can_read(self, scope: Scope) -> bool:
        return self.readable is None or scope in self.readable

    def can_write(self, scope: Scope) -> bool:
        return self.writable is None or scope in self.writable


def can_read(store: GrantSource, principal: Principal, scope: Scope) -> bool:
    return scope in readable_scopes(store, principal)


def can_write(store: GrantSource, principal: Principal, scope: Scope) -> bool:
    return scope in writable_scopes(store, principal)


def write_targets(
    store: GrantSource, principal: Principal, target_map: Mapping[str, Scope] | None = None
) -> dict[str, Scope]:
    """The symbolic write targets this session offers.

    The default map offers ``personal`` (the principal's user scope) and, when the
    principal has a project, ``current_project``; a host may pass its own map. Targets
    the principal cannot write are removed, so the model never sees them. The private
    scope appears only when the host's map names it.
    """
    if target_map is None:
        target_map = {"personal": Scope("user", principal.user_id)}
        if principal.project_id:
            target_map["current_project"] = Scope("project", principal.project_id)
    writable = writable_scopes(store, principal)
    return {name: scope for name, scope in target_map.items() if scope in writable}


def resolve_write_target(
    store: GrantSource,
    principal: Principal,
    target: str | None,
    target_map: Mapping[str, Scope] | None = None,
) -> Scope | None:
    """The scope behind a symbolic target (``None`` means ``personal``), or None when
    this session does not offer it (``invalid_write_target``)."""
    return write_targets(store, principal, target_map).get(target or "personal")
