"""Shared-scope membership: MemoryHost's add/remove/list and what policy makes of it."""

from __future__ import annotations

import pytest

from retold.host import HostError, MemoryHost
from retold.models import Principal, Scope
from retold.policy.grants import readable_scopes, writable_scopes, write_targets
from retold.store import Store

AGENT = "support-agent"
APOLLO = Scope("project", "apollo")
ACME = Scope("org", "acme")


def _who(user: str, project: str | None = None, agent: str = AGENT) -> Principal:
    return Principal(agent, user, "s1", project)


# -- MemoryHost -------------------------------------------------------------------------------


def test_add_and_remove_member_write_rows_and_events(store: Store, host: MemoryHost) -> None:
    assert host.add_member(APOLLO, "mia", actor="ops") is True
    [member] = host.members(APOLLO)
    assert (member.scope, member.user_id, member.added_by) == (APOLLO, "mia", "ops")
    [event] = store.events(kind="membership.changed")
    assert event["actor"] == "ops"
    assert event["payload"] == {"scope": "project:apollo", "user_id": "mia", "member": True}

    assert host.add_member(APOLLO, "mia") is False  # already a member: nothing logged
    assert len(store.events(kind="membership.changed")) == 1

    assert host.remove_member(APOLLO, "mia", actor="ops") is True
    assert host.members(APOLLO) == []
    assert store.events(kind="membership.changed")[-1]["payload"]["member"] is False
    assert host.remove_member(APOLLO, "mia") is False
    assert len(store.events(kind="membership.changed")) == 2


@pytest.mark.parametrize(
    ("scope", "user_id"),
    [
        (Scope("user", "mia"), "mia"),  # one owner already
        (Scope("agent", "team-notes"), "mia"),  # shared among the agent's users by design
        (Scope("agent", f"{AGENT}/mia"), "mia"),
        (APOLLO, "team/mia"),
        (APOLLO, "  "),
    ],
)
def test_refused_memberships_write_nothing(store: Store, host: MemoryHost, scope: Scope,
                                           user_id: str) -> None:
    with pytest.raises(HostError):
        host.add_member(scope, user_id)
    assert store.member_scopes(user_id) == []
    assert store.events() == []


# -- policy: grant AND membership --------------------------------------------------------------


def test_a_project_grant_reaches_only_the_users_who_belong(store: Store, host: MemoryHost) -> None:
    host.grant(AGENT, APOLLO, read=True, write=True)
    # The project the session names is membership enough.
    assert APOLLO in readable_scopes(store, _who("mia", "apollo"))
    assert APOLLO in writable_scopes(store, _who("mia", "apollo"))
    assert write_targets(store, _who("mia", "apollo"))["current_project"] == APOLLO
    # A user with no project, or with another one, is not served the grant.
    for outsider in (_who("nick"), _who("olga", "zeus")):
        assert APOLLO not in readable_scopes(store, outsider)
        assert APOLLO not in writable_scopes(store, outsider)
        assert "current_project" not in write_targets(store, outsider)

    host.add_member(APOLLO, "nick")
    assert APOLLO in readable_scopes(store, _who("nick"))
    assert APOLLO in writable_scopes(store, _who("nick"))
    assert APOLLO in readable_scopes(store, _who("nick", "zeus"))  # whatever project the session names
    host.remove_member(APOLLO, "nick")
    assert APOLLO not in readable_scopes(store, _who("nick"))


def test_membership_without_a_grant_reaches_nothing(store: Store, host: MemoryHost) -> None:
    host.add_member(APOLLO, "mia")
    assert APOLLO not in readable_scopes(store, _who("mia"))
    assert APOLLO not in readable_scopes(store, _who("mia", "apollo"))
    host.grant("other-agent", APOLLO, read=True, write=True)
    assert APOLLO not in readable_scopes(store, _who("mia"))  # another agent's grant
    assert APOLLO in readable_scopes(store, _who("mia", agent="other-agent"))


def test_a_read_only_grant_stays_read_only_for_members(store: Store, host: MemoryHost) -> None:
    host.grant(AGENT, APOLLO, read=True, write=False)
    host.add_member(APOLLO, "mia")
    assert APOLLO in readable_scopes(store, _who("mia"))
    assert APOLLO not in writable_scopes(store, _who("mia"))


def test_an_org_scope_needs_an_explicit_member(store: Store, host: MemoryHost) -> None:
    host.grant(AGENT, ACME, read=True, write=True)
    # A project named like the org is no membership of the org.
    assert ACME not in readable_scopes(store, _who("mia", "acme"))
    host.add_member(ACME, "mia")
    assert ACME in readable_scopes(store, _who("mia"))
    assert ACME in writable_scopes(store, _who("mia"))
    assert ACME not in readable_scopes(store, _who("nick"))
