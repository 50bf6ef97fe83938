"""The dense, lexical and entity candidate generators over real store files."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from retold.index.vector import VectorIndex
from retold.models import Scope
from retold.policy.grants import readable_scopes
from retold.retrieve import generators as generators_module
from retold.retrieve.generators import (
    dense_candidates,
    entity_candidates,
    lexical_candidates,
    linked_candidates,
    query_shape,
    resolve_entity_aliases,
)
from retold.store import EligibleSet, Store
from retold.store import search as search_module
from retold.testing import ADITYA, T0, World, make_record, make_world
from tests.sql import rows

OTHER = Scope("user", "someone-else")
K = 30  # retrieval.per_generator_k
BIG, SMALL = 10**9, 0  # temp_table_max forcing the TEMP-table plan or the streaming plan


@pytest.fixture
def world(tmp_path: Path, store_target: str) -> Iterator[World]:
    made = make_world(tmp_path, store=store_target)
    yield made
    made.rt.close()


def eligible_for(store: Store, *scopes: Scope) -> EligibleSet:
    return store.eligible_ids(list(scopes))


def remember(world: World, content: str, **fields: Any) -> str:
    """Write one semantic memory through the real ingestor; its own attribute keeps it
    from reinforcing or superseding the others."""
    fields.setdefault("attribute", f"note_{len(world.results)}")
    result = world.write(content=content, **fields)
    assert result.record_id is not None, result
    return result.record_id


# -- dense ---------------------------------------------------------------------------------


def test_dense_union_keeps_best_cosine_and_caps_after_the_union(store: Store) -> None:
    dims = 16
    basis = np.eye(dims, dtype=np.float32)

    def toward(axis: int, cos: float, noise_axis: int) -> np.ndarray:
        vector: np.ndarray = cos * basis[axis] + np.sqrt(1 - cos**2) * basis[noise_axis]
        return vector.astype(np.float32)

    # Query 1 points along axis 0, query 2 along axis 1; each has its own top two.
    vectors = {
        "a": toward(0, 0.90, 2), "b": toward(0, 0.80, 3),  # query 1's top two
        "c": toward(1, 0.95, 4), "d": toward(1, 0.70, 5),  # query 2's top two
        "e": toward(0, 0.10, 6),
    }
    ids = {}
    for name, vector in vectors.items():
        record = make_record(content=f"record {name}")
        with store.atomic():
            store.write_record(record)
            store.put_embedding(record.id, "m", "1", vector)
        ids[record.id] = name
    index = VectorIndex("m", "1", dims)
    index.load(store)
    eligible = eligible_for(store, ADITYA)
    qvecs = np.stack([basis[0], basis[1]])

    separate = [[ids[rid] for rid, _ in index.search(q, eligible, 2)] for q in qvecs]
    assert separate == [["a", "b"], ["c", "d"]]
    hits = dense_candidates(index, qvecs, eligible, 2)
    assert [ids[rid] for rid, _ in hits] == ["c", "a"]  # the union, capped at k afterwards
    assert [round(cos, 2) for _, cos in hits] == [0.95, 0.90]
    assert dense_candidates(index, np.zeros((0, dims), dtype=np.float32), eligible, 2) == []


# -- lexical: eligibility before the limit ---------------------------------------------------


@dataclass
class Crowded:
    store: Store
    target: str
    outranking: int


@pytest.fixture(scope="module")
def crowded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Crowded]:
    """5,000 records: 200 ineligible ERR42 matches outrank the single eligible one."""
    store = Store(tmp_path_factory.mktemp("crowded") / "memory.sqlite")
    target = make_record(
        content="A long note about the nightly batch, retries, dashboards, paging rules, owners, "
        "escalation, runbooks and, once, the ERR42 code seen during the spring migration."
    )
    with store.atomic():
        for i in range(200):
            store.write_record(make_record(content=f"ERR42 ERR42 crash {i}", subject="ERR42/crash",
                                            scope=OTHER))
        store.write_record(target)
        for i in range(4_799):
            store.write_record(make_record(content=f"filler note {i} about lunch and weather",
                                            scope=ADITYA if i % 2 else OTHER))
    ranked = [rid for (rid,) in rows(
        store, "SELECT record_id FROM records_fts WHERE records_fts MATCH '\"err42\"'"
        " ORDER BY bm25(records_fts, 0.0, 1.0, 2.0, 3.0)")]
    yield Crowded(store, target.id, ranked.index(target.id))
    store.close()


@pytest.mark.parametrize("temp_table_max", [BIG, SMALL], ids=["temp-table", "streaming"])
def test_an_eligible_match_survives_more_than_3k_better_ineligible_matches(
    crowded: Crowded, temp_table_max: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = crowded.store
    assert crowded.outranking > 3 * K  # the test's precondition: the target is crowded out
    eligible = eligible_for(store, ADITYA)
    assert len(eligible) > 2_000

    rows = store.fts_candidates('"err42"', eligible, K, temp_table_max=temp_table_max)
    assert [row.record_id for row in rows] == [crowded.target]
    assert rows[0].bm25 < 0  # SQLite's bm25, lower is better, as given

    monkeypatch.setattr(search_module, "ELIGIBLE_TEMP_TABLE_MAX", temp_table_max)
    hits = lexical_candidates(store, ["what does ERR42 mean?"], eligible, K)
    assert [(hit.record_id, hit.rank) for hit in hits] == [(crowded.target, 1)]
    assert [(t.value, t.is_identifier) for t in hits[0].match.terms] == [("err42", True)]


@pytest.mark.parametrize("temp_table_max", [BIG, SMALL], ids=["temp-table", "streaming"])
def test_both_plans_rank_identically(crowded: Crowded, temp_table_max: int) -> None:
    store = crowded.store
    eligible = eligible_for(store, ADITYA, OTHER)
    rows = store.fts_candidates('"err42" OR "lunch"', eligible, 50, temp_table_max=temp_table_max)
    reference = store.fts_candidates('"err42" OR "lunch"', eligible, 50, temp_table_max=BIG)
    assert [r.record_id for r in rows] == [r.record_id for r in reference]
    assert [r.bm25 for r in rows] == sorted(r.bm25 for r in rows)
    assert len(rows) == 50 and all(row.content for row in rows)


# -- lexical: coverage -----------------------------------------------------------------------


def test_lexical_match_keeps_the_best_query_and_flags_identifiers_and_aliases(world: World) -> None:
    store = world.rt.store
    written = remember(world, "Deploy ERR42 fix to the Atlas cluster.",
                          entities=[("project", "Atlas", "about")])
    queries = ["ERR42 Atlas x", "deploy pipeline rollback staging"]
    scopes = readable_scopes(store, world.p)
    aliases = resolve_entity_aliases(store, None, queries, scopes, 4)
    assert "atlas" in aliases

    hits = lexical_candidates(store, queries, eligible_for(store, *scopes), K, frozenset(aliases))

    assert [hit.record_id for hit in hits] == [written]
    match = hits[0].match
    # Query 1 covers 2 of 2 terms ("x" is one character and dropped); query 2 covers 1 of 4.
    assert match.total_terms == 2
    assert [(t.value, t.is_identifier, t.is_entity_alias) for t in match.terms] == [
        ("err42", True, False), ("atlas", False, True),
    ]


def test_a_multi_token_term_matches_only_where_its_tokens_are_adjacent(world: World) -> None:
    store = world.rt.store
    apart = remember(world, "Follow the release process, then wrap up the week.")
    together = remember(world, "Schedule a follow-up call about the process.")
    eligible = eligible_for(store, *readable_scopes(store, world.p))

    hits = {hit.record_id: hit.match for hit in lexical_candidates(store, ["follow-up process"], eligible, K)}

    assert [t.value for t in hits[apart].terms] == ["process"]
    assert [t.value for t in hits[together].terms] == ["follow up", "process"]
    assert hits[apart].total_terms == hits[together].total_terms == 2
    only_phrase = lexical_candidates(store, ["follow-up"], eligible, K)
    assert [hit.record_id for hit in only_phrase] == [together]


def test_plain_words_match_by_their_stem(world: World) -> None:
    store = world.rt.store
    deploys = remember(world, "Priya deploys the billing services on Fridays.")
    prefers = remember(world, "Her preference is a dark editor theme.")
    eligible = eligible_for(store, *readable_scopes(store, world.p))

    (hit,) = lexical_candidates(store, ["deploying billing service"], eligible, K)
    assert hit.record_id == deploys
    assert [t.value for t in hit.match.terms] == ["deploying", "billing", "service"]
    (hit,) = lexical_candidates(store, ["editor preferences"], eligible, K)
    assert hit.record_id == prefers and len(hit.match.terms) == 2


def test_a_word_that_stems_counts_as_much_as_one_that_does_not(world: World) -> None:
    # "allergic" is stored as its stem, "kayak" as written; one occurrence of either, in
    # records of the same length, is worth the same. PostgreSQL's ts_rank once halved the
    # first, so a speaker's name on every record outranked the word a question asked for.
    store = world.rt.store
    allergy = remember(world, "Viktor is allergic to sesame.")
    kayak = remember(world, "Viktor owns a red kayak.")
    eligible = eligible_for(store, *readable_scopes(store, world.p))

    scores = {hit.record_id: hit.bm25 for hit in lexical_candidates(store, ["allergic kayak"], eligible, K)}

    assert scores[allergy] == pytest.approx(scores[kayak], rel=0.05)


def test_a_word_counts_by_its_stem_not_by_a_list_of_other_words(world: World) -> None:
    store = world.rt.store
    plan = remember(world, "Priya moved the Acme account to the Team plan.")
    eligible = eligible_for(store, *readable_scopes(store, world.p))
    found = {hit.record_id: hit.match for hit in lexical_candidates(store, ["Acme plans"], eligible, K)}
    assert [t.value for t in found[plan].terms] == ["acme", "plans"]
    # Another word for the same thing is the dense channel's to find, not the lexical one's.
    found = {hit.record_id: hit.match for hit in lexical_candidates(store, ["Acme subscription tier"],
                                                                    eligible, K)}
    assert [t.value for t in found[plan].terms] == ["acme"]


def test_identifiers_and_names_count_only_where_spelled_as_queried(world: World) -> None:
    store = world.rt.store
    exact = remember(world, "Edit deploy.yml before the release.")
    inflected = remember(world, "The deploys yml folder is empty.")
    named = remember(world, "Rivers owns the roadmap.")
    common = remember(world, "The river roadmap is drafted.")
    eligible = eligible_for(store, *readable_scopes(store, world.p))

    # The index stems both records into "deploy yml"; only one spells the identifier.
    found = {hit.record_id: hit.match for hit in lexical_candidates(store, ["deploy.yml"], eligible, K)}
    assert set(found) == {exact, inflected}
    assert [(t.value, t.is_identifier) for t in found[exact].terms] == [("deploy yml", True)]
    assert found[inflected].terms == ()

    found = {hit.record_id: hit.match
             for hit in lexical_candidates(store, ["roadmap by Rivers"], eligible, K)}
    assert [t.value for t in found[named].terms] == ["roadmap", "rivers"]
    assert [t.value for t in found[common].terms] == ["roadmap"]  # "river" is not the name


def test_a_number_tells_numbered_names_apart(world: World) -> None:
    store = world.rt.store
    numbered = remember(world, "Acme North 2 pays by wire transfer.",
                        entities=[("org", "Acme North 2", "about")])
    plain = remember(world, "Acme North pays by card.", entities=[("org", "Acme North", "about")])
    query = "How does Acme North 2 pay?"
    scopes = readable_scopes(store, world.p)
    # The longer name wins: "acme north" inside "acme north 2" is not a mention of Acme North.
    assert set(resolve_entity_aliases(store, None, [query], scopes, 4)) == {"acme north 2"}
    both = resolve_entity_aliases(store, ["Acme North"], [query], scopes, 4)
    assert set(both) == {"acme north 2", "acme north"}  # unless the request names it

    hits = lexical_candidates(store, [query], eligible_for(store, *scopes), K)

    assert [hit.record_id for hit in hits] == [numbered, plain]
    assert [t.value for t in hits[0].match.terms] == ["acme", "north", "2", "pay"]
    assert [t.value for t in hits[1].match.terms] == ["acme", "north", "pay"]
    assert hits[0].match.total_terms == hits[1].match.total_terms == 4


@pytest.mark.parametrize(
    "query",
    ['"unbalanced', "deploy*", "(open", "NEAR(a b)", "-excluded", "content:secret", "a AND OR NOT",
     "^start {x} + ' \" : *", "ERR42\"); DROP TABLE records; --"],
)
def test_fts_syntax_in_queries_never_raises(world: World, query: str) -> None:
    store = world.rt.store
    remember(world, "The content secret is excluded from deploy notes, ERR42 start.")
    eligible = eligible_for(store, *readable_scopes(store, world.p))
    hits = lexical_candidates(store, [query, "deploy"], eligible, K)
    assert isinstance(hits, list) and hits


def test_queries_without_terms_never_touch_fts(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    store = world.rt.store
    remember(world, "It is what it is.")
    eligible = eligible_for(store, *readable_scopes(store, world.p))

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("FTS must not run without terms")

    monkeypatch.setattr(store, "fts_candidates", refuse)
    assert lexical_candidates(store, ["what is it?", "I'm a"], eligible, K) == []


def test_an_empty_match_returns_nothing(store: Store) -> None:
    store.write_record(make_record(content="anything"))
    eligible = eligible_for(store, ADITYA)
    assert store.fts_candidates("", eligible, K) == []
    assert store.fts_candidates("   ", eligible, K) == []


# -- entities ----------------------------------------------------------------------------------


def test_entity_alias_lookup_batches_every_ngram_into_one_store_call(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = world.rt.store
    remember(world, "Atlas ships on Fridays.", entities=[("project", "Project Atlas", "about")])
    calls: list[list[str]] = []
    real = store.entities_by_aliases

    def spy(alias_norms: list[str], **kwargs: Any) -> Any:
        calls.append(list(alias_norms))
        return real(alias_norms, **kwargs)

    monkeypatch.setattr(store, "entities_by_aliases", spy)
    long_query = " ".join(f"word{i}" for i in range(300))
    queries = ["When does Project Atlas ship?", "Aditya's plans for it", long_query]

    found = resolve_entity_aliases(store, ["  ADITYA "], queries, readable_scopes(store, world.p), 4)

    assert len(calls) == 1
    assert {"project atlas", "aditya", "word0 word1 word2 word3"} <= set(calls[0])
    assert len(calls[0]) <= 4 * (300 + 9) + 1
    assert set(found) == {"project atlas", "aditya"}


def test_entity_aliases_follow_merges_and_stay_in_readable_scopes(world: World) -> None:
    store = world.rt.store
    hidden = store.create_entity("project", "Hidden", OTHER)
    store.add_alias(hidden.id, "hidden")
    old = store.create_entity("project", "Atlas", ADITYA)
    new = store.create_entity("project", "Atlas Two", ADITYA)
    store.add_alias(old.id, "atlas")
    store.merge_entities(old.id, new.id, "test", "same project")
    scopes = readable_scopes(store, world.p)

    found = resolve_entity_aliases(store, ["Hidden"], ["tell me about Atlas"], scopes, 4)

    assert found == {"atlas": [new.id]}


@pytest.mark.parametrize("temp_table_max", [BIG, SMALL], ids=["temp-table", "streaming"])
def test_records_for_entities_applies_eligibility_before_the_limit(
    store: Store, temp_table_max: int
) -> None:
    entity = store.create_entity("project", "Atlas", ADITYA)
    other = store.create_entity("project", "Orion", ADITYA)
    # 50 newer links in an unreadable scope would fill any limit taken first.
    for day in range(50):
        hidden = make_record(content=f"hidden {day}", scope=OTHER, event_at=T0 + timedelta(days=day + 10))
        store.write_record(hidden)
        store.link_record(hidden.id, [(entity.id, "about")])
    old_about = make_record(content="old about", event_at=T0)
    new_mention = make_record(content="new mention", event_at=T0 + timedelta(days=5))
    both = make_record(content="linked to both", event_at=T0 + timedelta(days=1))
    newer_about = make_record(content="newer about", event_at=T0 + timedelta(days=3))
    for record in (old_about, new_mention, both, newer_about):
        store.write_record(record)
    store.link_record(old_about.id, [(entity.id, "about")])
    store.link_record(new_mention.id, [(entity.id, "mentions")])
    store.link_record(both.id, [(entity.id, "mentions"), (other.id, "about")])
    store.link_record(newer_about.id, [(entity.id, "about")])
    eligible = eligible_for(store, ADITYA)

    ranked = store.records_for_entities([entity.id, other.id], eligible, 3, temp_table_max=temp_table_max)

    # about before mentions, newest first; "both" appears once, through its about link.
    assert ranked == [(newer_about.id, entity.id), (both.id, other.id), (old_about.id, entity.id)]
    everything = store.records_for_entities(
        [entity.id, other.id], eligible, 10, temp_table_max=temp_table_max
    )
    assert everything[-1] == (new_mention.id, entity.id) and len(everything) == 4


def test_entity_candidates_use_the_resolved_aliases(world: World) -> None:
    store = world.rt.store
    written = remember(world, "Atlas ships on Fridays.", entities=[("project", "Atlas", "about")])
    scopes = readable_scopes(store, world.p)
    aliases = resolve_entity_aliases(store, None, ["When does Atlas ship?"], scopes, 4)

    hits = entity_candidates(store, aliases, eligible_for(store, *scopes), K)

    assert [record_id for record_id, _ in hits] == [written]
    assert entity_candidates(store, {}, eligible_for(store, *scopes), K) == []


def test_an_often_updated_entity_is_not_broad_for_its_superseded_records(world: World) -> None:
    store = world.rt.store
    for contact in ("Ana", "Ben", "Cy", "Dee", "Eve", "Fay", "Gus"):  # six supersessions
        remember(world, f"The billing contact for Acme North 2 is {contact}.", attribute="billing_contact",
                 entities=[("org", "Acme North 2", "about")])
    for topic in ("pricing", "renewal", "support", "security", "onboarding", "travel"):
        remember(world, f"Acme West has a {topic} plan.", entities=[("org", "Acme West", "about")])
    scopes = readable_scopes(store, world.p)
    query = "Who is the billing contact for Acme North 2 or Acme West?"

    found = resolve_entity_aliases(store, None, [query], scopes, 4, broad_links=5)

    # Seven records link "Acme North 2" but one is active; "Acme West" has six active.
    assert "acme north 2" in found and "acme west" not in found


def test_link_counts_leave_out_every_record_that_is_not_active(store: Store) -> None:
    entity = store.create_entity("org", "Acme North", ADITYA)
    records = [
        make_record(content="active"),
        make_record(content="provisional", status="provisional", expires_at=T0 + timedelta(days=9)),
        make_record(content="superseded", status="superseded"),
        make_record(content="expired", status="expired"),
        make_record(content="past its expiry", expires_at=T0 - timedelta(days=1)),
        make_record(content="deleted", status="deleted"),
    ]
    for record in records:
        store.write_record(record, links=[(entity.id, "about")])

    assert store.link_counts([entity.id], 10, now=T0) == {entity.id: 2}
    assert store.link_counts([entity.id], 10, now=T0 + timedelta(days=10)) == {entity.id: 1}
    assert store.link_counts([entity.id], 0, now=T0) == {entity.id: 1}  # counted up to cap + 1


def test_the_query_shape_groups_names_as_they_stand_in_the_question() -> None:
    # Names on adjacent words are one name; names with other words between are separate.
    assert query_shape(["Why did Oskar travel to Tucson?"], []).name_groups == (("oskar",), ("tucson",))
    assert query_shape(["Whom do I send Northwind Foods 2's invoices to?"], []).name_groups == (
        ("northwind", "foods", "2"),)
    # An entity alias counts as a name even in lower case; a month is a date, not a name.
    shape = query_shape(["did tobias see Mateo in March"], [], frozenset({"tobias"}))
    assert shape.name_groups == (("tobias",), ("mateo",))
    assert query_shape(["peanuts"], []).name_groups == ()
    # One joining word keeps a name whole; "Oskar and Mateo" joins too (the stricter margin).
    assert query_shape(["Where is Bank of America headquartered?"], []).name_groups == (
        ("bank", "america"),)
    assert query_shape(["Did Oskar and Mateo fly to Tucson?"], []).name_groups == (
        ("oskar", "mateo"), ("tucson",))


# -- link hop --------------------------------------------------------------------------------


def test_the_link_hop_reaches_records_about_what_a_candidate_mentions(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = world.rt.store
    relation = remember(world, "Ayla's brother is Quentin.",
                        entities=[("person", "Ayla", "about"), ("person", "Quentin", "mentions")])
    job = remember(world, "Quentin works as a firefighter.", entities=[("person", "Quentin", "about")])
    remember(world, "Ayla grew up in Tallinn.", entities=[("person", "Ayla", "about")])
    # Mentioning Quentin is not being about him.
    remember(world, "Quentin came to Ayla's party.",
             entities=[("person", "Ayla", "about"), ("person", "Quentin", "mentions")])
    eligible = eligible_for(store, ADITYA)

    assert linked_candidates(store, [relation], eligible, K) == [(job, relation)]
    # Only eligible records, and never through an entity linked to many records.
    nobody = eligible_for(store, Scope("user", "nobody"))
    assert linked_candidates(store, [relation], nobody, K) == []
    monkeypatch.setattr(generators_module, "_BROAD", 3)  # Quentin has three links
    assert linked_candidates(store, [relation], eligible, K) == []


# -- terms too common to weigh -----------------------------------------------------------


@pytest.mark.sqlite_only("PostgreSQL weighs every phrase by its own inverse document frequency")
def test_a_term_in_most_rows_no_longer_makes_every_row_a_lexical_candidate(store: Store) -> None:
    """A scope about one project: its name is in every row, so bm25 gives it no weight, and
    matching on it would score and sort the whole scope for each search that names it."""
    rows_total = generators_module.WEIGHTLESS_MIN_ROWS + 200
    ids = []
    with store.atomic():
        for i in range(rows_total):
            topic = "the kubernetes upgrade" if i % 400 == 7 else f"standup number {i}"
            record = make_record(content=f"Atlas note: {topic} was discussed.", scope=ADITYA)
            store.write_record(record)
            ids.append(record.id)
    total, counts = store.fts_document_counts(["atla", "kubernet", "absent"])
    assert total == rows_total and counts == {"atla": rows_total, "kubernet": 3}
    eligible = eligible_for(store, ADITYA)
    hits = lexical_candidates(store, ["Atlas kubernetes upgrade"], eligible, K)
    upgrade = {ids[i] for i in range(rows_total) if i % 400 == 7}
    assert {hit.record_id for hit in hits} == upgrade  # not the 1,197 standups that only say Atlas
    # Coverage still counts the left-out name where a candidate holds it.
    assert all("atlas" in {t.value for t in hit.match.terms} for hit in hits)
    # A query of nothing but the common term still finds rows.
    assert len(lexical_candidates(store, ["Atlas"], eligible, K)) == K
    # The row count follows the index: an erased record's row is gone from it.
    store.erase_record(ids[0], "tester", "test")
    assert store.fts_document_counts(["atla"]) == (rows_total - 1, {"atla": rows_total - 1})


def test_a_small_index_keeps_every_term(store: Store) -> None:
    with store.atomic():
        for i in range(20):
            store.write_record(make_record(content=f"Atlas note {i}.", scope=ADITYA))
        store.write_record(make_record(content="Hermes note.", scope=ADITYA))
    hits = lexical_candidates(store, ["Atlas Hermes"], eligible_for(store, ADITYA), K)
    assert len(hits) == 21
