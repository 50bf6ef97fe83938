"""A process keeps each principal's readable scopes between grant changes, and a change
made anywhere (another process, an import, a hand-written statement) reaches its next
search: a revoked grant never reads on from a stale cache."""

from __future__ import annotations

from pathlib import Path

from retold.models import Principal, Scope
from retold.store import open_store
from retold.testing import World, make_world

SHARED = Scope("project", "atlas")


def _world_with_project(tmp_path: Path, store_target: str) -> World:
    world = make_world(tmp_path, store=store_target)
    world.rt.host.grant(world.p.agent_id, SHARED, read=True, write=True)
    world.rt.host.add_member(SHARED, world.p.user_id)
    written = world.write(content="The Atlas deploy runs every Tuesday at noon.", target=SHARED,
                          attribute="deploy_schedule", entities=[("project", "Atlas", "about")])
    assert written.ok, written
    return world


def _found(world: World, principal: Principal | None = None) -> list[str]:
    result = world.rt.tools.call("memory_search", principal or world.p,
                                 {"queries": ["when does the Atlas deploy run?"]})
    assert "error" not in result, result
    return [hit["content"] for hit in result["results"]]


def test_a_grant_revoked_by_another_process_stops_the_next_search(tmp_path: Path, store_target: str) -> None:
    world = _world_with_project(tmp_path, store_target)
    assert any("Tuesday" in c for c in _found(world))
    assert any("Tuesday" in c for c in _found(world))  # served from the kept scopes
    other = open_store(store_target)
    try:
        assert other.delete_grant(world.p.agent_id, SHARED)
    finally:
        other.close()
    assert not any("Tuesday" in c for c in _found(world))
    world.rt.close()


def test_a_membership_removed_by_hand_stops_the_next_search(tmp_path: Path, store_target: str) -> None:
    world = _world_with_project(tmp_path, store_target)
    assert any("Tuesday" in c for c in _found(world))
    # A statement of the store's own dialect that no Retold method issues, as an import or
    # an administrator's script would.
    with world.rt.store.atomic() as conn:
        conn.execute("DELETE FROM scope_members WHERE user_id = ?", (world.p.user_id,))
    assert not any("Tuesday" in c for c in _found(world))
    world.rt.close()


def test_searches_between_changes_read_the_grants_once(tmp_path: Path, store_target: str) -> None:
    world = _world_with_project(tmp_path, store_target)
    store = world.rt.store
    reads: list[str] = []
    original = store.grants_for

    def counting(agent_id: str | None) -> list:  # type: ignore[type-arg]
        reads.append(str(agent_id))
        return original(agent_id)

    store.grants_for = counting  # type: ignore[method-assign]
    for _ in range(5):
        assert any("Tuesday" in c for c in _found(world))
    assert reads == [world.p.agent_id]
    # Another user of the same agent is another key: read once for them too.
    world.rt.host.provision_user("mira")
    _found(world, Principal(world.p.agent_id, "mira", "s2", None))
    assert len(reads) == 3  # provisioning changed no grant, but the new principal is read
    world.rt.host.grant(world.p.agent_id, Scope("user", "mira"), read=True, write=False)
    _found(world)
    assert len(reads) == 4  # the new grant moved the version: read again
    world.rt.close()
