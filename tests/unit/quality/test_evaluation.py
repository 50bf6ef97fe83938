"""Evaluation: the labelled items asked again through the store's own search path, and
what a person would want flagged: missed records, empty answers, stale and conflicting
results, leaks."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest

from retold import build_runtime
from retold.models import Principal, Scope, SearchRequest, SearchResponse
from retold.policy.grants import readable_scopes
from retold.quality.capture import capture
from retold.quality.evaluation import CANARY, Searcher, evaluate
from retold.quality.golden import GoldenSet, label
from retold.runtime import Runtime
from retold.store.location import add_tenant
from retold.testing import T0
from tests.golden_world import QUESTIONS, GoldenWorld
from tests.sql import execute

# What answers each question of the world: record keys, or nothing.
ANSWERS: dict[str, list[str]] = {"drink": ["drink"], "manager": ["manager"], "billing": ["marcus"],
                                 "phone": ["phone"], "tower": [], "deploy": ["deploy"], "cat": ["cat"],
                                 "allergy": []}


def labelled_set(gw: GoldenWorld) -> GoldenSet:
    """The world's questions captured from its log and labelled with ANSWERS."""
    gw.ask_all()
    golden = capture(gw.world.rt.store, size=50, seed=0, now=T0, source="test").golden
    keys = {question: key for key, _, _, question in QUESTIONS}
    for item in golden.items:
        answer = [gw.ids[k] for k in ANSWERS[keys[item.question[0]]]]
        golden = label(golden, item.id, expected=answer, nothing_stored=not answer)
    return golden


def searcher(rt: Runtime) -> Searcher:
    return Searcher(rt.store, lambda p, r: rt.retriever.search(p, r).response)


@pytest.fixture
def reader(golden_world: GoldenWorld) -> Iterator[Runtime]:
    """The world's store opened read-only, as ``retold eval`` opens it."""
    world = golden_world.world
    config = world.rt.config.replace({"store": {"read_only": True}})
    with build_runtime(config, embedder=world.embedder, clock=world.clock) as rt:
        yield rt


def item_of(golden: GoldenSet, question: str) -> str:
    return next(item.id for item in golden.items if item.question[0] == question)


def test_a_healthy_store_finds_what_is_expected_and_writes_nothing(golden_world: GoldenWorld,
                                                                     reader: Runtime) -> None:
    golden = labelled_set(golden_world)
    before = golden_world.world.counts()
    run = evaluate(golden, searcher(reader), k=10)
    assert golden_world.world.counts() == before  # not one search-log row, nothing else either
    overall = run.overall
    assert overall.items == len(QUESTIONS) and overall.answerable == 6 and overall.nothing_stored == 2
    assert overall.recall_at_k == 1.0 and overall.empty_rate == 0.0 and overall.abstention == 1.0
    assert overall.stale_rate == 0.0 and overall.leaks == 0
    # The phone number and the agent's guess at it are an open conflict; wherever both come
    # back, the item counts a contradiction.
    phone, guess = golden_world.ids["phone"], golden_world.ids["phone_guess"]
    both = {r.id for r in run.items if phone in r.returned and guess in r.returned}
    assert both and {r.id for r in run.items if r.contradictions} == both
    assert overall.contradiction_rate == round(len(both) / len(QUESTIONS), 4)
    assert run.scopes["user:aditya"].open_conflicts_per_1k is not None
    assert run.scopes["user:aditya"].open_conflicts_per_1k > 0
    assert run.scopes["user:mei"].open_conflicts_per_1k == 0
    assert set(run.scopes) == {"user:aditya", "user:mei", "project:atlas"}
    assert run.scope_probes == len(QUESTIONS)
    assert overall.tokens_per_search and overall.search_p50_ms is not None


def test_a_superseded_record_made_current_again_is_stale(golden_world: GoldenWorld) -> None:
    golden = labelled_set(golden_world)
    dana = golden_world.ids["dana"]
    execute(golden_world.world.rt.store, "UPDATE records SET status = 'confirmed' WHERE id = ?", dana)
    config = golden_world.world.rt.config.replace({"store": {"read_only": True}})
    with build_runtime(config, embedder=golden_world.world.embedder, clock=golden_world.world.clock) as fresh:
        run = evaluate(golden, searcher(fresh), k=10)
    asked = item_of(golden, "who is the billing contact for Acme North?")
    billing = next(r for r in run.items if r.id == asked)
    assert dana in billing.returned and billing.stale == [dana]
    assert run.overall.stale_rate is not None and run.overall.stale_rate > 0


def test_history_is_stale_only_when_it_ranks_above_what_replaced_it(golden_world: GoldenWorld,
                                                                     reader: Runtime) -> None:
    golden = labelled_set(golden_world)
    billing = item_of(golden, "who is the billing contact for Acme North?")
    item = golden.item(billing)
    history = replace(item, filters=replace(item.filters, include_history=True))
    golden = replace(golden, items=tuple(history if i.id == billing else i for i in golden.items))
    run = evaluate(golden, searcher(reader), k=10)
    result = next(r for r in run.items if r.id == billing)
    dana, marcus = golden_world.ids["dana"], golden_world.ids["marcus"]
    assert result.returned.index(marcus) < result.returned.index(dana)
    assert result.stale == []


def test_a_search_that_lets_another_scope_through_is_a_leak(golden_world: GoldenWorld,
                                                            reader: Runtime) -> None:
    golden = labelled_set(golden_world)
    rt = reader
    # Mei's cat as a search result, to add to every answer: a scope filter that failed.
    mei = golden_world.principal("mei")
    cat = rt.retriever.search(mei, SearchRequest(["Mei's cat Miso"])).response.results[0]
    assert cat.record.id == golden_world.ids["cat"]

    def broken(principal: Principal, request: SearchRequest) -> SearchResponse:
        response = rt.retriever.search(principal, request).response
        if cat.record.id not in {hit.record.id for hit in response.results}:
            response.results.append(cat)
        return response

    run = evaluate(golden, Searcher(rt.store, broken), k=10)
    leaked = {(leak.item, leak.probe) for r in run.items for leak in r.leaks}
    assert run.overall.leaks == len(leaked) > 0
    aditya = {item.id for item in golden.items if item.principal.user_id == "aditya"}
    mei = {item.id for item in golden.items if item.principal.user_id == "mei"}
    assert {item for item, probe in leaked if probe == "item"} == aditya
    # Mei's own questions are asked again as someone who cannot read her scope: caught there.
    assert mei <= {item for item, probe in leaked if probe == "scope"}
    assert all(leak.record_id == cat.record.id for r in run.items for leak in r.leaks)


def test_every_scope_probe_asks_someone_who_cannot_read_the_item_scope(golden_world: GoldenWorld,
                                                                       reader: Runtime) -> None:
    golden = labelled_set(golden_world)
    rt = reader
    asked: list[tuple[str, Principal]] = []

    def recording(principal: Principal, request: SearchRequest) -> SearchResponse:
        asked.append((request.queries[0], principal))
        return rt.retriever.search(principal, request).response

    run = evaluate(golden, Searcher(rt.store, recording), k=10)
    assert run.overall.leaks == 0
    for item in golden.items:
        probes = [p for q, p in asked[len(golden.items):] if q == item.question[0]]
        assert len(probes) == 1 and probes[0] != CANARY
        assert item.scope not in {str(s) for s in readable_scopes(rt.store, probes[0])}
    # A set with one principal has nobody else to ask: an agent with no grant asks instead.
    mei_only = replace(golden, items=tuple(i for i in golden.items if i.principal.user_id == "mei"))
    asked.clear()
    evaluate(mei_only, Searcher(rt.store, recording), k=10)
    assert [p for _, p in asked[len(mei_only.items):]] == [CANARY] * len(mei_only.items)


def test_other_tenants_are_asked_every_question_and_must_show_nothing_of_this_one(
        golden_world: GoldenWorld, reader: Runtime) -> None:
    golden = labelled_set(golden_world)
    rt = reader
    add_tenant(rt.config.store.target, "acme")
    writable = golden_world.world.rt.config
    with build_runtime(writable, embedder=golden_world.world.embedder, tenant="acme") as acme:
        acme.host.grant("research-agent", Scope("user", "aditya"), read=True, write=True)
        asked: list[str] = []

        def in_acme(principal: Principal, request: SearchRequest) -> SearchResponse:
            asked.append(request.queries[0])
            return acme.retriever.search(principal, request).response

        run = evaluate(golden, searcher(rt), k=10, other_tenants={"acme": Searcher(acme.store, in_acme)})
        assert run.tenants_probed == ["acme"] and run.overall.leaks == 0
        assert sorted(asked) == sorted(item.question[0] for item in golden.items)

        def leaking(principal: Principal, request: SearchRequest) -> SearchResponse:
            # A tenant binding that failed: this tenant's answer served in the other.
            return rt.retriever.search(principal, request).response

        run = evaluate(golden, searcher(rt), k=10, other_tenants={"acme": Searcher(acme.store, leaking)})
    tenant_leaks = [leak for r in run.items for leak in r.leaks if leak.probe == "tenant"]
    answered = {r.id for r in run.items if r.returned}
    assert {leak.item for leak in tenant_leaks} == answered
    assert all("tenant acme" in leak.searcher for leak in tenant_leaks)


def test_recall_counts_only_the_first_k_results(golden_world: GoldenWorld, reader: Runtime) -> None:
    golden = labelled_set(golden_world)
    phone = item_of(golden, "what is Aditya's phone number?")
    wider = label(golden, phone, expected=[golden_world.ids["phone"], golden_world.ids["manager"]])
    run = evaluate(wider, searcher(reader), k=1)
    result = next(r for r in run.items if r.id == phone)
    assert result.returned == [golden_world.ids["phone"]] and result.recall == 0.5
