"""Forget is undoable for ``lifecycle.restore_days``, then final: ``memory_revise`` action
``restore`` (and ``retold restore``) brings a forgotten record back, searchable again by
its words and its vector; past the window, or after an erase, it answers ``not_found``
with the reason, and the daily retain sweep erases what nobody restored, leaving none of
its text in the store."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from retold.cli import main
from retold.cli.common import EXIT_REFUSED
from retold.clock import to_iso
from retold.runtime import build_runtime
from retold.testing import World
from tests.sql import fts_ids, rows, stored_bytes
from tests.unit.tools.test_handlers import CONCISE, tools, user_fact

CANARY = "zq-restore-41c"


def _forget(world: World, record_id: str) -> dict[str, Any]:
    answer = tools(world).call("memory_forget", world.p, {"id": record_id, "reason": "asked to"})
    assert answer["status"] == "deleted", answer
    return answer


def _restore(world: World, record_id: str) -> dict[str, Any]:
    return tools(world).call("memory_revise", world.p,
                             {"id": record_id, "action": "restore", "reason": "forgot it by mistake"})


def _found(world: World, query: str) -> list[str]:
    return [r["id"] for r in tools(world).call("memory_search", world.p, {"queries": [query]})["results"]]


def test_a_forgotten_record_comes_back_as_it_was_and_is_found_again(world: World) -> None:
    record_id = user_fact(world)["record_id"]
    forgotten = _forget(world, record_id)
    until = world.clock.now() + timedelta(days=world.rt.config.lifecycle.restore_days)
    assert forgotten["restorable_until"] == to_iso(until)
    assert _found(world, "concise technical explanations") == []
    tombstone = tools(world).call("memory_get", world.p, {"ids": [record_id]})["records"][0]
    assert tombstone["tombstone"] and tombstone["restorable_until"] == forgotten["restorable_until"]

    world.clock.advance(timedelta(days=29))
    answer = _restore(world, record_id)
    assert answer == {"id": record_id, "action": "restore", "status": "confirmed",
                      "previous_status": "deleted", "event_id": answer["event_id"]}
    assert _found(world, "concise technical explanations") == [record_id]
    assert fts_ids(world.target, "concise") == {record_id}
    event = world.events("record.restored")[0]
    assert (event["actor"], event["payload"]["reason"]) == (world.p.agent_id, "forgot it by mistake")
    got = tools(world).call("memory_get", world.p, {"ids": [record_id]})["records"][0]
    assert (got["tombstone"], got["content"]) == (False, CONCISE)

    # Another process opening the store loads its vector again: forget never dropped it.
    other = build_runtime(world.rt.config, embedder=world.embedder, clock=world.clock, environ={})
    try:
        hits = other.tools.call("memory_search", world.p, {"queries": [CONCISE]})["results"]
        assert [h["id"] for h in hits] == [record_id]
    finally:
        other.close()


def test_forget_then_restore_gives_100_searches_the_same_ranking_as_before(world: World) -> None:
    things = ["sailing", "pottery", "chess", "jazz", "climbing", "baking", "cycling", "knitting",
              "rowing", "origami", "fencing", "birding"]
    places = ["Lisbon", "Oslo", "Kyoto", "Quito", "Dakar"]
    rng = random.Random(41)
    contents = [f"Aditya took up {thing} lessons in {places[n % len(places)]} on weekends."
                for n, thing in enumerate(things)]
    ids = [user_fact(world, content, attribute=f"hobby_{thing}")["record_id"]
           for content, thing in zip(contents, things, strict=True)]
    queries = [" ".join(rng.sample(rng.choice(contents).rstrip(".").split(), 3)) for _ in range(100)]

    def rankings() -> list[list[str]]:
        return [_found(world, query) for query in queries]

    before = rankings()
    target = ids[3]
    assert sum(target in ranked for ranked in before) >= 5  # the record is found by several
    _forget(world, target)
    assert all(target not in ranked for ranked in rankings())
    _restore(world, target)
    assert rankings() == before


def test_past_the_window_restore_is_not_found_and_changes_nothing(world: World) -> None:
    record_id = user_fact(world)["record_id"]
    _forget(world, record_id)
    world.clock.advance(timedelta(days=31))
    before = world.counts()
    answer = _restore(world, record_id)
    assert answer["error"]["code"] == "not_found"
    assert "30-day restore window closed" in answer["error"]["message"]
    assert world.counts() == before
    assert world.record(record_id).status == "deleted"


def test_only_a_forgotten_or_archived_record_can_be_restored(world: World) -> None:
    record_id = user_fact(world)["record_id"]
    answer = _restore(world, record_id)
    assert answer["error"]["code"] == "invalid_input"
    assert "neither forgotten nor archived" in answer["error"]["message"]


def test_a_record_restored_beside_a_newer_value_is_linked_as_a_conflict(world: World) -> None:
    old = user_fact(world)["record_id"]
    _forget(world, old)
    new = user_fact(world, "Aditya prefers detailed architecture explanations.")["record_id"]
    answer = _restore(world, old)
    assert answer["status"] == "confirmed" and "conflicts" in answer["note"]
    got = tools(world).call("memory_get", world.p, {"ids": [old]})["records"][0]
    assert [c["id"] for c in got["conflicts"]] == [new]


def test_the_retain_sweep_erases_what_was_not_restored_in_time(world: World) -> None:
    kept = user_fact(world)["record_id"]
    written = world.write(content=f"Aditya's locker code word is {CANARY}.", attribute="locker_word")
    assert written.record_id is not None
    _forget(world, written.record_id)
    world.clock.advance(timedelta(days=30, hours=1))
    result = world.rt.operations.retain("admin")
    assert result.forgotten_erased == 1
    world.rt.close()
    assert CANARY.encode() not in stored_bytes(world.target)
    assert rows(world.target, "SELECT status, content FROM records WHERE id = ?",
                written.record_id) == [("deleted", "")]
    assert rows(world.target, "SELECT status FROM records WHERE id = ?", kept) == [("confirmed",)]


def test_an_erased_record_cannot_be_restored(world: World) -> None:
    record_id = user_fact(world)["record_id"]
    _forget(world, record_id)
    world.rt.operations.erase_record(record_id, "asked for erasure")
    answer = _restore(world, record_id)
    assert answer["error"] == {"code": "not_found",
                               "message": f"memory {record_id} was erased and cannot be restored"}


def test_cli_restore_brings_a_record_back_and_refuses_in_one_line(
    world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    world.clock.set(datetime.now(UTC))  # the CLI reads the real clock
    record_id = user_fact(world)["record_id"]
    _forget(world, record_id)
    world.rt.close()
    config = tmp_path / "cli.yaml"
    config.write_text("embedding:\n  model: fake\n  version: fake-1\n")
    base = ["--store", world.target, "--config", str(config)]
    assert main(["restore", record_id, "--reason", "mistake", *base]) == 0
    assert f"restored {record_id} as confirmed" in capsys.readouterr().out
    assert main(["restore", record_id, "--reason", "again", *base]) == EXIT_REFUSED
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "neither forgotten nor archived" in err
