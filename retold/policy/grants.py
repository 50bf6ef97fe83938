"""Readable and writable scopes of a principal.

The only implicit scope is the private ``agent:<agent_id>/<user_id>``; every other scope
needs a grant from the host. Two safety belts apply to grant rows, whoever wrote them: a
``user:X`` grant counts only while the principal is user X, and a private-scope grant
``agent:A/U`` (which MemoryHost refuses to create, but a direct store write could) counts
only while the principal user is U.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from retold.models import Principal, Scope
from retold.store.grants import Grant

__all__ = [
    "DEFAULT_TARGETS",
    "GrantSource",
    "can_read",
    "can_write",
    "readable_scopes",
    "resolve_write_target",
    "writable_scopes",
    "write_targets",
]

DEFAULT_TARGETS = ("personal", "current_project")


class GrantSource(Protocol):
    def grants_for(self, agent_id: str) -> list[Grant]: ...


def _honoured(scope: Scope, principal: Principal) -> bool:
    if scope.kind == "user":
        return scope.id == principal.user_id
    if scope.is_private:
        return scope.id.rpartition("/")[2] == principal.user_id
    return True


def _scopes(store: GrantSource, principal: Principal, *, write: bool) -> list[Scope]:
    scopes = [principal.private_scope]
    for grant in store.grants_for(principal.agent_id):
        allowed = grant.can_write if write else grant.can_read
        if allowed and _honoured(grant.scope, principal) and grant.scope not in scopes:
            scopes.append(grant.scope)
    return scopes


def readable_scopes(store: GrantSource, principal: Principal) -> list[Scope]:
    """The private scope first, then every honoured read grant."""
    return _scopes(store, principal, write=False)


def writable_scopes(store: GrantSource, principal: Principal) -> list[Scope]:
    """The private scope first, then every honoured write grant."""
    return _scopes(store, principal, write=True)


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
