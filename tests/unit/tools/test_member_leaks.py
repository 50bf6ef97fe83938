"""Leak probes for shared scopes: one agent holds a grant on project:apollo and serves
several users. Members reach the project's memory through every channel; a non-member
gets, through every channel, exactly the answer an id that never existed gets, and
nothing changes in the store."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from retold.clock import new_id
from retold.models import EntityMention, Principal, Scope
from retold.retrieve.explain import short_id
from retold.testing import AGENT, World

APOLLO = Scope("project", "apollo")
SECRET = "Apollo launches from pad 39A."
CHANNELS = {"search", "search_entity", "get", "short_id", "get_entity", "write_about_entity",
            "write", "revise", "forget"}


@dataclass(frozen=True)
class Apollo:
    record_id: str
    entity_id: str


def _apollo(world: World) -> Apollo:
    """project:apollo granted to the agent, with one record about the Apollo entity,
    written in a session of mia, whose session names the project."""
    world.rt.host.grant(AGENT, APOLLO, read=True, write=True)
    mia = Principal(AGENT, "mia", "sm", "apollo")
    world.rt.hooks.on_session_start(mia)
    written = world.rt.tools.call("memory_write", mia, {
        "type": "semantic", "content": SECRET, "attribute": "launch_pad",
        "write_target": "current_project",
        "entities": [{"kind": "project", "name": "Apollo", "role": "about"}],
    })
    assert written["outcome"] == "created", written
    [entity] = world.rt.store.entities_by_alias("apollo", scopes=[APOLLO])
    return Apollo(written["record_id"], entity.id)


def _session(world: World, user: str, project: str | None) -> Principal:
    principal = Principal(AGENT, user, f"s-{user}", project)
    world.rt.hooks.on_session_start(principal)
    return principal


# Who asks: (name, is a member, how the world makes them).
Make = Callable[[World], Principal]


def _removed(world: World) -> Principal:
    world.rt.host.add_member(APOLLO, "rex")
    world.rt.host.remove_member(APOLLO, "rex")
    return _session(world, "rex", None)


def _explicit(world: World) -> Principal:
    world.rt.host.add_member(APOLLO, "erin")
    return _session(world, "erin", None)


CASES: list[tuple[str, bool, Make]] = [
    ("session names the project", True, lambda w: _session(w, "pia", "apollo")),
    ("explicit member", True, _explicit),
    ("no project", False, lambda w: _session(w, "nick", None)),
    ("another project", False, lambda w: _session(w, "olga", "zeus")),
    ("membership removed", False, _removed),
    ("the world's own user", False, lambda w: w.p),
]


def _swap(answer: Any, *ids: str) -> str:
    text = json.dumps(answer, sort_keys=True, default=str)
    for i, value in enumerate(ids):
        text = text.replace(value, f"<ID{i}>")
    return text


class _Probe:
    """Each channel once, for the real ids and (for parity) for ids that never existed."""

    def __init__(self, world: World, principal: Principal, apollo: Apollo) -> None:
        self.world, self.p, self.apollo = world, principal, apollo
        self.missing = Apollo(new_id(), "ent_" + new_id().replace("-", ""))

    def call(self, name: str, payload: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self.world.rt.tools.call(name, self.p, payload)
        return result

    def search(self) -> dict[str, Any]:
        return self.call("memory_search", {"queries": ["Apollo launch pad"]})

    def get(self, target: Apollo, short: bool = False) -> dict[str, Any]:
        raw = short_id(target.record_id) if short else target.record_id
        entry: dict[str, Any] = self.call("memory_get", {"ids": [raw]})["records"][0]
        return entry

    def write_about(self, target: Apollo) -> Any:
        """A write into the caller's private scope, about the entity by its id."""
        return self.world.write(self.p, content="The launch checklist is long.", attribute="checklist",
                                target=self.p.private_scope,
                                entities=[EntityMention("project", "Apollo", "about", target.entity_id)])

    def write(self) -> Any:
        return self.world.write(self.p, content="Apollo's backup pad is 39B.", attribute="backup_pad",
                                target=APOLLO, entities=[("project", "Apollo", "about")])

    def by_id(self, target: Apollo) -> list[tuple[str, dict[str, Any]]]:
        """Every tool call that names the record or the entity by id, with its answer."""
        rid, eid = target.record_id, target.entity_id
        own = self.world.rt.store.entities_by_alias("aditya", scopes=[Scope("user", "aditya")])[0].id
        calls: list[tuple[str, dict[str, Any]]] = [
            ("memory_get", {"ids": [rid]}),
            ("memory_get", {"ids": [short_id(rid)]}),
            ("memory_revise", {"id": rid, "action": "confirm", "reason": "checked"}),
            ("memory_revise", {"id": rid, "action": "expire", "reason": "stale"}),
            ("memory_revise", {"id": rid, "action": "supersede", "reason": "fix",
                               "content": "Apollo launches from pad 40."}),
            ("memory_forget", {"id": rid, "reason": "asked"}),
            ("memory_revise", {"entity_id": eid, "merge_into": own, "reason": "same"}),
            ("memory_revise", {"entity_id": own, "merge_into": eid, "reason": "same"}),
        ]
        return [(name, self.call(name, payload)) for name, payload in calls]


def _reached_as_member(probe: _Probe) -> set[str]:
    """Run every channel in an order that keeps the record live until the end; return
    the channels that reached project:apollo."""
    apollo, reached = probe.apollo, set()
    found = probe.search()
    hits = [r for r in found["results"] if r["id"] == apollo.record_id]
    if hits:
        reached.add("search")
        if apollo.entity_id in hits[0]["explanation"]["entity_ids"]:
            reached.add("search_entity")
    full = probe.get(apollo)
    if full.get("content") == SECRET:
        reached.add("get")
        if apollo.entity_id in [e["id"] for e in full["entities"]]:
            reached.add("get_entity")
    if probe.get(apollo, short=True).get("id") == apollo.record_id:
        reached.add("short_id")
    if probe.write_about(apollo).outcome == "created":
        reached.add("write_about_entity")
    written = probe.write()
    if written.outcome == "created" and probe.world.record(written.record_id).scope == APOLLO:
        reached.add("write")
    if probe.call("memory_revise", {"id": apollo.record_id, "action": "confirm",
                                    "reason": "checked"}).get("status") == "confirmed":
        reached.add("revise")
    if probe.call("memory_forget", {"id": apollo.record_id, "reason": "asked"}).get("status") == "deleted":
        reached.add("forget")
    return reached


@pytest.mark.parametrize(("who", "member", "make"), CASES, ids=[c[0] for c in CASES])
def test_a_shared_scope_answers_members_only_through_every_channel(
    world: World, who: str, member: bool, make: Make
) -> None:
    apollo = _apollo(world)
    probe = _Probe(world, make(world), apollo)
    if member:
        assert _reached_as_member(probe) == CHANNELS, who
        return

    found = probe.search()
    assert apollo.record_id not in json.dumps(found) and apollo.entity_id not in json.dumps(found)
    assert "39A" not in found["rendered"]
    before = world.counts()
    # Every id-bearing call answers as it does for ids that never existed.
    real = probe.by_id(apollo)
    missing = probe.by_id(probe.missing)
    for (name, answer), (_, absent) in zip(real, missing, strict=True):
        assert _swap(answer, apollo.record_id, short_id(apollo.record_id), apollo.entity_id) == _swap(
            absent, probe.missing.record_id, short_id(probe.missing.record_id),
            probe.missing.entity_id), name
        assert "not_found" in json.dumps(answer), name
        assert "39A" not in json.dumps(answer) and "apollo" not in json.dumps(answer).lower(), name
    about = probe.write_about(apollo)
    assert about.outcome == probe.write_about(probe.missing).outcome == "not_found"
    assert about.note == probe.write_about(probe.missing).note.replace(  # type: ignore[union-attr]
        probe.missing.entity_id, apollo.entity_id)
    assert probe.write().outcome == "scope_not_writable"
    assert "current_project" not in json.dumps(world.rt.tools.schemas(probe.p))
    assert world.counts() == before
    assert world.record(apollo.record_id).status == "provisional"


def test_removing_a_member_takes_effect_on_the_next_call(world: World) -> None:
    apollo = _apollo(world)
    erin = _explicit(world)
    probe = _Probe(world, erin, apollo)
    assert [r["id"] for r in probe.search()["results"]] == [apollo.record_id]
    assert probe.get(apollo)["content"] == SECRET

    world.rt.host.remove_member(APOLLO, "erin")

    assert probe.search()["results"] == []
    assert probe.get(apollo)["error"]["code"] == "not_found"
    assert probe.write().outcome == "scope_not_writable"
    world.rt.host.add_member(APOLLO, "erin")
    assert probe.get(apollo)["content"] == SECRET
