"""``retold hygiene`` finds a scope's repeated facts (the same words, or vectors at
``lifecycle.duplicate_cosine``), never pairs two records that conflict or a distinct fact,
and with --apply folds each cluster into its strongest record, reinforced, while the rest
are archived and restorable; it also reports provisional records nobody confirmed or used
and records nobody used in a long time, and ``retold metrics`` shows the shares."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from retold.cli import main
from retold.models import ACTIVE_STATUSES, Scope
from retold.testing import World
from tests.mixed_store import config_text
from tests.unit.tools.test_handlers import CONCISE, tools, user_fact

ADITYA = Scope("user", "aditya")
SAME = "aditya prefers concise,   technical explanations"


def _threshold(world: World, cosine: float) -> None:
    config = world.rt.config
    world.rt.operations.config = dataclasses.replace(config, lifecycle=dataclasses.replace(
        config.lifecycle, duplicate_cosine=cosine))


def _search(world: World, query: str) -> list[str]:
    return [r["id"] for r in tools(world).call("memory_search", world.p, {"queries": [query]})["results"]]


def test_repeated_facts_cluster_and_distinct_or_conflicting_ones_do_not(world: World) -> None:
    first = user_fact(world)["record_id"]
    again = user_fact(world, SAME, attribute="answer_style")["record_id"]
    oat = user_fact(world, "Aditya drinks oat milk flat whites every morning.", attribute="coffee")
    oat = oat["record_id"]
    oat2 = user_fact(world, "Aditya drinks oat milk flat whites each morning.", attribute="coffee_habit")
    user_fact(world, "Aditya edits code in the Helix editor.", attribute="editor")
    _threshold(world, 0.8)
    report = world.rt.operations.hygiene(ADITYA)
    assert {(frozenset((c.keep, *c.merge)), c.reason) for c in report.clusters} == {
        (frozenset((first, again)), "same words"), (frozenset((oat, oat2["record_id"])), "cosine >= 0.8")}
    coffee = next(c for c in report.clusters if oat in (c.keep, *c.merge))
    assert abs(report.duplicate_share - 2 / 5) < 1e-9 and not report.applied

    world.rt.store.add_conflict(*sorted((coffee.keep, coffee.merge[0])))
    assert len(world.rt.operations.hygiene(ADITYA).clusters) == 1  # a conflict is not a duplicate
    _threshold(world, 0.99)
    assert [c.reason for c in world.rt.operations.hygiene(ADITYA).clusters] == ["same words"]


def test_apply_keeps_the_strongest_reinforced_and_archives_the_rest_restorably(world: World) -> None:
    stated = user_fact(world)["record_id"]
    world.say("user", "Keep it short.")
    guessed = world.write(content=SAME, attribute="answer_style", source_kind="agent_inference").record_id
    assert guessed is not None
    before = world.record(stated).reinforcements
    report = world.rt.operations.hygiene(ADITYA, apply=True)
    assert [(c.keep, c.merge) for c in report.clusters] == [(stated, [guessed])]  # the user's words win
    assert report.merged == 1
    assert world.record(stated).reinforcements == before + 1
    assert world.record(guessed).status == "expired"
    archived = world.events("record.archived")[0]
    assert archived["payload"]["merged_into"] == stated and archived["record_id"] == guessed
    assert world.events("record.merged")[0]["payload"]["merged"] == [guessed]
    assert guessed not in _search(world, "concise technical explanations")
    answer = tools(world).call("memory_revise", world.p, {"id": guessed, "action": "restore", "reason": "x"})
    assert answer["status"] == "provisional"
    assert world.rt.operations.hygiene(ADITYA, apply=True).clusters[0].merge == [guessed]  # found again


def test_stale_and_unused_records_are_reported_not_changed(world: World) -> None:
    used = user_fact(world)["record_id"]
    guess = world.write(content="Aditya may be training for a marathon.", attribute="training").record_id
    world.clock.advance(timedelta(days=15))
    assert world.rt.operations.hygiene(ADITYA).stale_provisional == [guess]
    assert guess in _search(world, "is Aditya training for a marathon")
    report = world.rt.operations.hygiene(ADITYA)
    assert report.stale_provisional == [] and report.unused == []
    world.clock.advance(timedelta(days=200))
    assert sorted(world.rt.operations.hygiene(ADITYA).unused) == sorted([used, guess])
    assert {r.status for r in world.rt.store.find_records(scopes=[ADITYA])} <= set(ACTIVE_STATUSES)


def test_cli_hygiene_reports_then_merges_and_metrics_shows_the_share(
    world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    world.clock.set(datetime.now(UTC))  # the CLI reads the real clock
    user_fact(world)
    user_fact(world, SAME, attribute="answer_style")
    world.rt.close()
    config = tmp_path / "cli.yaml"
    config.write_text(config_text())
    base = ["--store", world.target, "--config", str(config)]
    assert main(["hygiene", "--scope", "user:aditya", *base]) == 0
    out = capsys.readouterr().out
    assert "duplicates: 1 clusters, 1 records that repeat another (50.0%)" in out
    assert "keep " in out and CONCISE in out and "[same words]" in out and "add --apply" in out
    assert main(["metrics", "--no-queue", *base]) == 0
    assert "hygiene:     duplicate/stale share, worst first: user:aditya 50%/0%" in capsys.readouterr().out
    assert main(["hygiene", "--scope", "user:aditya", "--apply", *base]) == 0
    assert "merged 1 records into the record kept" in capsys.readouterr().out
    assert main(["hygiene", "--scope", "user:aditya", *base]) == 0
    assert "duplicates: 0 clusters" in capsys.readouterr().out
