"""Capture: a golden set sampled from the logged searches, stratified, reproducible from
its seed, and read without changing the store."""

from __future__ import annotations

import random

from retold.models import Scope
from retold.quality.capture import allocate, capture
from retold.testing import T0
from tests.golden_world import QUESTIONS, GoldenWorld


def _capture(gw: GoldenWorld, size: int = 50, seed: int = 0, scopes: list[Scope] | None = None):  # type: ignore[no-untyped-def]
    return capture(gw.world.rt.store, size=size, seed=seed, now=T0, source="test", scopes=scopes or [])


def test_capture_takes_each_question_once_with_its_principal_and_candidates(
        golden_world: GoldenWorld) -> None:
    found = golden_world.ask_all()
    golden_world.ask_all()  # every question asked twice: one item each
    before = golden_world.world.counts()
    result = _capture(golden_world)
    assert golden_world.world.counts() == before  # a read changes nothing, search_log included
    items = {item.question[0]: item for item in result.golden.items}
    assert len(items) == len(QUESTIONS) == len(result.golden.items)
    assert result.searches == 2 * len(QUESTIONS) and result.questions == len(QUESTIONS)
    for key, user, project, question in QUESTIONS:
        item = items[question]
        assert (item.principal.user_id, item.principal.project_id) == (user, project)
        assert [c.id for c in item.candidates] == found[key]
        assert [c.rank for c in item.candidates] == list(range(1, len(found[key]) + 1))
        assert not item.labelled and not item.expected
    deploy = items["when does the Atlas deploy run?"]
    assert deploy.scope == "project:atlas" and deploy.stratum == "project:atlas|semantic|answered"
    assert deploy.candidates[0].text == "The Atlas deploy runs on Friday mornings."
    assert items["how tall is the Eiffel tower?"].stratum == "user:aditya|none|empty"
    assert items["which allergy does Mei have?"].stratum == "user:mei|none|empty"
    assert result.golden.header.tenant == golden_world.world.rt.tenant


def test_the_same_seed_gives_the_same_set_and_a_small_set_spans_the_strata(golden_world: GoldenWorld) -> None:
    golden_world.ask_all()
    everything = _capture(golden_world)
    strata = {item.stratum for item in everything.golden.items}
    small = _capture(golden_world, size=len(strata), seed=7)
    assert {item.stratum for item in small.golden.items} == strata
    assert _capture(golden_world, size=3, seed=7).golden == _capture(golden_world, size=3, seed=7).golden
    picks = {tuple(i.search_id for i in _capture(golden_world, size=3, seed=seed).golden.items)
             for seed in range(12)}
    assert len(picks) > 1  # the seed, not the log order, decides


def test_capture_keeps_to_the_scopes_asked_for(golden_world: GoldenWorld) -> None:
    golden_world.ask_all()
    mei = _capture(golden_world, scopes=[Scope("user", "mei")]).golden.items
    assert {item.question[0] for item in mei} == {q for _, user, _, q in QUESTIONS if user == "mei"}
    assert {item.scope for item in mei} == {"user:mei"}


def test_allocation_gives_every_stratum_one_then_shares_the_rest() -> None:
    sizes = {"a": 50, "b": 5, "c": 1, "d": 0}
    taken = allocate(sizes, 20, random.Random(1))
    assert sum(taken.values()) == 20 and set(taken) == {"a", "b", "c"}
    assert all(1 <= taken[name] <= sizes[name] for name in taken)
    assert taken["a"] > taken["b"]
    assert allocate(sizes, 500, random.Random(1)) == {"a": 50, "b": 5, "c": 1}
    assert sum(allocate(sizes, 2, random.Random(1)).values()) == 2
