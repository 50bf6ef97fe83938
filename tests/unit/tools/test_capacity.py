"""A scope over ``lifecycle.max_active_per_scope`` is brought back to its cap by the
capacity sweep: the lowest-scoring live records are archived (history, still found with
include_history, restorable), a pinned record or an attribute's only current value never
is, a record a search returned lately outlasts one nobody used, and each archive is an
event with the score's parts. The CLI reports first and changes only with --apply."""

from __future__ import annotations

import dataclasses
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from retold.cli import main
from retold.clock import new_id
from retold.config import ScopeCaps
from retold.models import ACTIVE_STATUSES, Scope
from retold.testing import World, make_record
from tests.unit.tools.test_handlers import tools, user_fact

ADITYA = Scope("user", "aditya")


def _cap(world: World, **caps: int | None) -> None:
    config = world.rt.config
    world.rt.operations.config = dataclasses.replace(config, lifecycle=dataclasses.replace(
        config.lifecycle, max_active_per_scope=ScopeCaps(**caps)))


def _inference(world: World, content: str) -> str:
    """An agent's guess about an event: episodic, so no attribute protects it."""
    written = world.write(type="episodic", content=content)
    assert written.record_id is not None and written.status == "provisional"
    return written.record_id


def _search(world: World, query: str, **extra: Any) -> list[str]:
    answer = tools(world).call("memory_search", world.p, {"queries": [query], **extra})
    return [r["id"] for r in answer["results"]]


def _live(world: World) -> set[str]:
    return {r.id for r in world.rt.store.find_records(scopes=[ADITYA]) if r.status in ACTIVE_STATUSES}


def test_over_its_cap_a_scope_archives_its_least_useful_records(world: World) -> None:
    stated = user_fact(world)["record_id"]  # the only value of explanation_style
    world.clock.advance(timedelta(days=200))
    guesses = [_inference(world, text) for text in (
        "Went sailing near the harbour lighthouse.", "Bought rare jazz vinyl at a flea market.",
        "Played board games until midnight.", "Took a pottery class downtown.")]
    pinned = _inference(world, "Solved chess puzzles on the train.")
    tools(world).call("memory_revise", world.p, {"id": pinned, "action": "pin", "reason": "keep"})
    world.clock.advance(timedelta(days=1))
    assert _search(world, "rare jazz vinyl") == [guesses[1]]  # used: it outlasts the rest
    _cap(world, user=4)

    [result] = world.rt.operations.capacity("admin")
    assert (result.scope, result.live, result.cap, result.still_over) == (ADITYA, 6, 4, 0)
    archived = {a.row.record_id for a in result.archived}
    assert archived == {guesses[0], guesses[2]}  # equal scores: the older writes go first
    assert _live(world) == {stated, pinned, guesses[1], guesses[3]}
    for record_id in archived:
        assert world.record(record_id).status == "expired"
    event = world.events("record.archived")[0]
    assert event["payload"]["reason"] == "over capacity" and event["payload"]["cap"] == 4
    assert event["payload"]["previous_status"] == "provisional"
    assert set(event["payload"]["score"]) == {"trust", "explicit", "use", "fresh", "total"}

    assert guesses[0] not in _search(world, "sailing near the harbour lighthouse")
    assert guesses[0] in _search(world, "sailing near the harbour lighthouse", include_history=True)
    assert world.rt.operations.capacity("admin") == []  # at its cap now: nothing more to do


def test_an_archived_record_can_be_restored(world: World) -> None:
    first = _inference(world, "Went sailing near the harbour lighthouse.")
    world.clock.advance(timedelta(days=1))
    _inference(world, "Bought rare jazz vinyl at a flea market.")
    _cap(world, user=1)
    [result] = world.rt.operations.capacity("admin")
    assert [a.row.record_id for a in result.archived] == [first]  # the older of two equals
    answer = tools(world).call("memory_revise", world.p,
                               {"id": first, "action": "restore", "reason": "still true"})
    assert (answer["status"], answer["previous_status"]) == ("provisional", "expired")
    assert first in _search(world, "sailing near the harbour lighthouse")
    again = tools(world).call("memory_revise", world.p, {"id": first, "action": "restore", "reason": "twice"})
    assert again["error"]["code"] == "invalid_input"


def test_a_record_that_expired_on_its_own_is_not_restorable(world: World) -> None:
    record_id = _inference(world, "Went sailing near the harbour lighthouse.")
    world.clock.advance(timedelta(days=400))
    world.rt.operations.expire()
    answer = tools(world).call("memory_revise", world.p,
                               {"id": record_id, "action": "restore", "reason": "x"})
    assert answer["error"]["code"] == "invalid_input"
    assert "neither forgotten nor archived" in answer["error"]["message"]


def test_random_scopes_never_lose_a_pin_or_an_attributes_last_value(world: World) -> None:
    store, rng = world.rt.store, random.Random(7)
    for round_ in range(4):
        scope = Scope("user", f"u{round_}")
        for i in range(rng.randint(5, 25)):
            at = world.clock.now() - timedelta(days=rng.randint(0, 600))
            rec = make_record(id=new_id(), scope=scope, content=f"fact {round_}-{i}",
                              attribute=rng.choice([None, "editor", "timezone"]),
                              subject=rng.choice(["a", "b"]), source_kind=rng.choice(
                                  ["user_statement", "tool_result", "agent_inference"]),
                              status=rng.choice(["provisional", "confirmed"]), created_at=at, event_at=at)
            store.write_record(rec)
            if rng.random() < 0.2:
                store.pin(rec.id, "admin", "keep", 50)
    before = {r.id: r for r in store.find_records() if r.scope.kind == "user" and r.scope.id.startswith("u")}
    _cap(world, user=3)
    world.rt.operations.capacity("admin")
    after = {r.id: r for r in store.find_records() if r.id in before}
    for record_id, old in before.items():
        if store.is_pinned(record_id):
            assert after[record_id].status == old.status
    for scope_id in {r.scope.id for r in before.values()}:
        held = {(r.subject, r.attribute) for r in before.values() if r.scope.id == scope_id and r.attribute}
        kept = {(r.subject, r.attribute) for r in after.values()
                if r.scope.id == scope_id and r.attribute and r.status in ACTIVE_STATUSES}
        assert held == kept


def test_cli_reports_first_and_archives_only_with_apply(
    world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    world.clock.set(datetime.now(UTC))  # the CLI reads the real clock
    for text in ("Went sailing near the harbour lighthouse.", "Bought rare jazz vinyl at a flea market.",
                 "Played board games until midnight."):
        _inference(world, text)
    world.rt.close()
    config = tmp_path / "cli.yaml"
    config.write_text("embedding:\n  model: fake\n  version: fake-1\n"
                      "lifecycle:\n  max_active_per_scope:\n    user: 1\n")
    base = ["--store", world.target, "--config", str(config)]
    assert main(["capacity", *base]) == 0
    out = capsys.readouterr().out
    assert "user:aditya: 3 live, cap 1; would archive 2" in out and "add --apply" in out
    assert main(["capacity", "--apply", *base]) == 0
    assert "user:aditya: 3 live, cap 1; archived 2" in capsys.readouterr().out
    assert main(["capacity", "--apply", *base]) == 0
    assert capsys.readouterr().out.strip() == "every scope is within its cap"
