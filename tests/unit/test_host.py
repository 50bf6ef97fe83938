"""MemoryHost grants, revocations and principal provisioning."""

from __future__ import annotations

import pytest

from retold.host import HostError, MemoryHost
from retold.models import Principal, Scope
from retold.names import normalize_alias
from retold.policy.grants import readable_scopes, writable_scopes
from retold.store import Store

AGENT = "research-agent"
ADITYA = Scope("user", "aditya")
PROJECT = Scope("project", "retold")


def _who(user: str = "aditya", agent: str = AGENT) -> Principal:
    return Principal(agent_id=agent, user_id=user, session_id="s1")


# -- grant and revoke -------------------------------------------------------------------------


def test_grant_and_revoke_write_rows_and_events(store: Store, host: MemoryHost) -> None:
    host.grant(AGENT, PROJECT, read=True, write=True, actor="ops")

    [grant] = store.grants_for(AGENT)
    assert (grant.scope, grant.can_read, grant.can_write) == (PROJECT, True, True)
    [event] = store.events(kind="grant.changed")
    assert event["actor"] == "ops"
    assert event["payload"] == {"agent_id": AGENT, "scope": "project:retold", "read": True, "write": True}

    assert host.revoke(AGENT, PROJECT, actor="ops") is True
    assert store.grants_for(AGENT) == []
    events = store.events(kind="grant.changed")
    assert len(events) == 2 and events[1]["payload"]["revoked"] is True
    assert events[1]["payload"]["scope"] == "project:retold"

    assert host.revoke(AGENT, PROJECT) is False  # nothing left to remove, nothing logged
    assert len(store.events(kind="grant.changed")) == 2


def test_grant_again_replaces_the_permissions(store: Store, host: MemoryHost) -> None:
    host.grant(AGENT, PROJECT, read=True, write=True)
    host.grant(AGENT, PROJECT, read=True, write=False)
    [grant] = store.grants_for(AGENT)
    assert (grant.can_read, grant.can_write) == (True, False)


@pytest.mark.parametrize(
    ("agent_id", "scope"),
    [
        (AGENT, Scope("agent", "other-agent/aditya")),  # a private agent scope
        ("team/agent", PROJECT),  # '/' in the agent id
        ("", PROJECT),
        ("   ", PROJECT),
        (AGENT, Scope("user", "aditya/evil")),  # '/' in a user-scope id
    ],
)
def test_refused_grants_write_nothing(store: Store, host: MemoryHost, agent_id: str, scope: Scope) -> None:
    with pytest.raises(HostError):
        host.grant(agent_id, scope, read=True, write=True)
    assert store.grants_for(agent_id) == []
    assert store.events() == []


# -- provision_user ----------------------------------------------------------------------------


def test_provision_user_creates_the_principal_entity_and_is_idempotent(
    store: Store, host: MemoryHost
) -> None:
    entity = host.provision_user("aditya", aliases=["Aditya Rao", "  ADITYA  rao "])

    assert (entity.kind, entity.scope, entity.status) == ("person", ADITYA, "confirmed")
    assert entity.aliases == ["aditya", "aditya rao"]
    [event] = store.events(kind="principal.provisioned")
    assert event["entity_id"] == entity.id
    assert event["payload"] == {"user_id": "aditya", "entity_id": entity.id, "created": True,
                                "aliases_added": ["aditya rao"]}

    again = host.provision_user("aditya", aliases=["Aditya Rao"])
    assert again.id == entity.id and again.aliases == entity.aliases
    assert len(store.events(kind="principal.provisioned")) == 1  # a no-op logs nothing
    assert len(store.entities_by_alias("aditya", scopes=[ADITYA], kinds=["person"])) == 1

    more = host.provision_user("aditya", aliases=["Adi"])
    assert more.id == entity.id and more.aliases == ["adi", "aditya", "aditya rao"]
    assert store.events(kind="principal.provisioned")[-1]["payload"]["aliases_added"] == ["adi"]


def test_provision_user_refuses_an_alias_of_another_person_and_writes_nothing(
    store: Store, host: MemoryHost
) -> None:
    scope = Scope("user", "u-7f3a")
    other = store.create_entity("person", "Bob", scope)
    store.add_alias(other.id, "bob")
    events_before = store.events()

    with pytest.raises(HostError, match="another person entity"):
        host.provision_user("u-7f3a", aliases=["Aditya", "Bob"])

    assert store.entities_by_alias(normalize_alias("u-7f3a"), scopes=[scope]) == []
    assert store.entities_by_alias("aditya", scopes=[scope]) == []
    assert store.events() == events_before

    # Once the principal exists, a refused alias still leaves it exactly as it was.
    entity = host.provision_user("u-7f3a", aliases=["Aditya"])
    with pytest.raises(HostError):
        host.provision_user("u-7f3a", aliases=["Adi", "bob"])
    current = store.get_entity(entity.id)
    assert current is not None and current.aliases == ["aditya", "u-7f3a"]


def test_provision_user_refuses_a_slash_in_the_user_id(store: Store, host: MemoryHost) -> None:
    with pytest.raises(HostError):
        host.provision_user("a/b")
    assert store.events() == []


# -- grants feed policy ---------------------------------------------------------------------


def test_plain_agent_scope_needs_a_grant_and_is_then_readable_across_users(
    store: Store, host: MemoryHost
) -> None:
    shared = Scope("agent", "team-notes")
    assert shared not in readable_scopes(store, _who("aditya"))

    host.grant(AGENT, shared, read=True, write=False)

    assert shared in readable_scopes(store, _who("aditya"))
    assert shared in readable_scopes(store, _who("bob"))
    assert shared not in writable_scopes(store, _who("bob"))
    assert shared not in readable_scopes(store, _who("aditya", agent="other-agent"))


def test_project_grant_does_not_imply_the_user_scope(store: Store, host: MemoryHost) -> None:
    host.grant(AGENT, PROJECT, read=True, write=True)
    principal = Principal(AGENT, "aditya", "s1", project_id=PROJECT.id)
    assert PROJECT in readable_scopes(store, principal) and PROJECT in writable_scopes(store, principal)
    assert ADITYA not in readable_scopes(store, principal)
    assert readable_scopes(store, principal)[0] == principal.private_scope


def test_user_grant_is_not_honoured_for_another_principal_user(store: Store, host: MemoryHost) -> None:
    host.grant(AGENT, ADITYA, read=True, write=True)
    assert ADITYA in readable_scopes(store, _who("aditya"))
    assert ADITYA in writable_scopes(store, _who("aditya"))
    assert ADITYA not in readable_scopes(store, _who("bob"))
    assert ADITYA not in writable_scopes(store, _who("bob"))


def test_direct_store_private_grant_counts_only_for_its_encoded_user(store: Store) -> None:
    # MemoryHost refuses this grant; a direct store write can still create the row.
    private = Scope("agent", f"{AGENT}/aditya")
    store.put_grant("other-agent", private, read=True, write=True)
    assert private in readable_scopes(store, _who("aditya", agent="other-agent"))
    assert private not in readable_scopes(store, _who("bob", agent="other-agent"))
    assert private not in writable_scopes(store, _who("bob", agent="other-agent"))
