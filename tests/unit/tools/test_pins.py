"""Pins keep a record from ageing out: a pinned provisional record outlives its expiry
(the sweep skips it and search still finds it) where an unpinned one expires; a scope
holds at most ``lifecycle.max_pinned_per_scope`` pins; each change is an event; the tool,
the host API and the CLI all set them."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from retold.cli import main
from retold.cli.common import EXIT_REFUSED
from retold.host import HostError
from retold.models import Principal
from retold.testing import World, make_world
from tests.unit.tools.test_handlers import tools, user_fact


def _revise(world: World, record_id: str, action: str) -> dict[str, Any]:
    payload = {"id": record_id, "action": action, "reason": "keep it"}
    return tools(world).call("memory_revise", world.p, payload)


def _provisional(world: World, content: str, attribute: str) -> str:
    written = world.write(content=content, attribute=attribute)
    assert written.status == "provisional" and written.record_id is not None
    assert world.record(written.record_id).expires_at is not None
    return written.record_id


def _found(world: World, query: str) -> list[str]:
    return [r["id"] for r in tools(world).call("memory_search", world.p, {"queries": [query]})["results"]]


def test_a_pinned_record_outlives_its_expiry_and_an_unpinned_one_does_not(world: World) -> None:
    kept = _provisional(world, "Aditya parks in bay twelve at the office.", "parking_bay")
    lapsed = _provisional(world, "Aditya's desk phone extension is 4471.", "desk_extension")
    answer = _revise(world, kept, "pin")
    assert answer == {"id": kept, "action": "pin", "pinned": True, "event_id": answer["event_id"]}
    assert world.record(kept).expires_at is None
    event = world.events("record.pinned")[0]
    assert (event["actor"], event["record_id"]) == (world.p.agent_id, kept)

    world.clock.advance(timedelta(days=400))
    world.rt.operations.expire()
    assert world.record(kept).status == "provisional"
    assert world.record(lapsed).status == "expired"
    assert _found(world, "where does Aditya park at the office") == [kept]
    got = tools(world).call("memory_get", world.p, {"ids": [kept, lapsed]})["records"]
    assert [g["pinned"] for g in got] == [True, False]


def test_a_reinforced_pinned_record_gets_no_new_expiry(world: World) -> None:
    # Reinforcing a provisional record normally moves its expiry later; a pinned one has none.
    said = "I park in bay twelve at the office."
    inferred = {"type": "semantic", "content": "Aditya parks in bay twelve at the office.",
                "attribute": "parking_bay", "source_kind": "agent_inference", "evidence": said}
    world.say("user", said)
    record_id = tools(world).call("memory_write", world.p, inferred)["record_id"]
    _revise(world, record_id, "pin")
    world.p = Principal(world.p.agent_id, world.p.user_id, "s2", None)
    world.rt.hooks.on_session_start(world.p)
    world.say("user", said)
    again = tools(world).call("memory_write", world.p, inferred)
    assert (again["outcome"], again["record_id"], again["status"]) == ("reinforced", record_id, "provisional")
    assert world.record(record_id).expires_at is None


def test_unpin_lets_it_age_again_and_each_change_is_an_event(world: World) -> None:
    record_id = user_fact(world)["record_id"]
    _revise(world, record_id, "pin")
    assert _revise(world, record_id, "pin")["note"] == "already pinned; nothing changed"
    assert _revise(world, record_id, "unpin")["pinned"] is False
    assert [e["kind"] for e in world.rt.store.events(record_id=record_id)
            if e["kind"].endswith("pinned")] == ["record.pinned", "record.unpinned"]


def test_a_scope_holds_at_most_its_pin_limit(tmp_path: Path, store_target: str) -> None:
    world = make_world(tmp_path, store=store_target)
    try:
        world.rt.host.max_pinned_per_scope = 1
        first = user_fact(world)["record_id"]
        second = user_fact(world, "Aditya drinks green tea.", "drink")["record_id"]
        assert world.rt.host.pin(first, "keep")
        with pytest.raises(HostError, match="already holds 1 pinned"):
            world.rt.host.pin(second, "keep")
        assert not world.rt.store.is_pinned(second)
    finally:
        world.rt.close()


def test_history_cannot_be_pinned(world: World) -> None:
    record_id = user_fact(world)["record_id"]
    _revise(world, record_id, "expire")
    before = world.counts()
    answer = _revise(world, record_id, "pin")
    assert answer["error"] == {"code": "invalid_input",
                               "message": f"memory {record_id} is not live and cannot be pinned"}
    assert world.counts() == before


def test_cli_pins_and_unpins_in_one_line(world: World, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    record_id = user_fact(world)["record_id"]
    world.rt.close()
    config = tmp_path / "cli.yaml"
    config.write_text("embedding:\n  model: fake\n  version: fake-1\n")
    base = ["--store", world.target, "--config", str(config), "--reason", "operator keeps it"]
    assert main(["pin", record_id, *base]) == 0
    assert capsys.readouterr().out.strip() == f"pinned {record_id}"
    assert main(["unpin", record_id, *base]) == 0
    assert capsys.readouterr().out.strip() == f"unpinned {record_id}"
    assert main(["pin", "no-such-record", *base]) == EXIT_REFUSED
    assert capsys.readouterr().err.strip() == "retold pin: no memory no-such-record"
