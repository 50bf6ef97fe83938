"""Store behaviour that must read the same on SQLite and PostgreSQL: lexical matching
(stems, exact names, eligibility before the limit, forgotten records), concurrent
decide-and-write, delta refresh by records_version, and erasure leaving no residue."""

from __future__ import annotations

import threading
from datetime import timedelta

import numpy as np

from retold.models import Scope
from retold.store import Embedding, Store, open_store
from retold.testing import T0, make_record

ADITYA = Scope("user", "aditya")
VERA = Scope("user", "vera")
CANARY = "zqcanary7f3a"


def _ids(store: Store, match: str, scopes: list[Scope], limit: int = 10) -> list[str]:
    return [row.record_id for row in store.fts_candidates(match, store.eligible_ids(scopes), limit)]


def test_lexical_search_stems_words_and_ranks_the_subject_above_the_text(store: Store) -> None:
    in_text = make_record(content="We deploy the service every Tuesday.")
    other = make_record(content="Lunch is at noon.")
    store.write_record(in_text)
    store.write_record(other)
    assert _ids(store, '"deploying"', [ADITYA]) == [in_text.id]
    assert store.count_fts_matches('"deploying"') == 1
    assert _ids(store, '"breakfast"', [ADITYA]) == []


def test_lexical_search_applies_eligibility_before_the_limit(store: Store) -> None:
    for _ in range(5):
        store.write_record(make_record(content="kafka cluster notes", scope=VERA))
    mine = make_record(content="kafka cluster notes")
    store.write_record(mine)
    assert _ids(store, '"kafka"', [ADITYA], limit=1) == [mine.id]


def test_a_forgotten_record_is_not_found_by_its_words(store: Store) -> None:
    rec = make_record(content="The deploy pipeline uses bge-m3 embeddings")
    store.write_record(rec)
    assert _ids(store, '"pipeline"', [ADITYA]) == [rec.id]
    assert store.transition(rec.id, "deleted", from_statuses=("confirmed",)) is not None
    assert store.count_fts_matches('"pipeline"') == 0


def test_an_identifier_matches_as_a_phrase(store: Store) -> None:
    rec = make_record(content="The deploy pipeline uses bge-m3 embeddings")
    store.write_record(rec)
    store.write_record(make_record(content="m3 is a motorway; bge is not mentioned"))
    assert _ids(store, '"bge m3"', [ADITYA]) == [rec.id]


def test_another_connection_sees_a_write_by_delta(store: Store, store_target: str) -> None:
    other = open_store(store_target, migrate_schema=False)
    try:
        loaded = other.records_version()
        rec = make_record()
        store.write_record(rec, embedding=Embedding("m", "1", np.ones(4, dtype=np.float32) / 2))
        version, changes = other.index_changes(loaded, "m", "1", 4)
        assert version == loaded + 1
        assert [(c.record_id, c.index_version) for c in changes] == [(rec.id, version)]
        assert changes[0].vector is not None
    finally:
        other.close()


def test_concurrent_supersessions_of_one_record_let_exactly_one_win(store: Store, store_target: str) -> None:
    target = make_record()
    store.write_record(target)
    wins: list[bool] = []

    def supersede() -> None:
        mine = open_store(store_target, migrate_schema=False)
        try:
            # decide (is it still live?) and write, in one transaction
            with mine.atomic():
                done = mine.transition(target.id, "superseded", from_statuses=("confirmed",))
                if done is not None:
                    mine.write_record(make_record(supersedes_id=target.id))
            wins.append(done is not None)
        finally:
            mine.close()

    threads = [threading.Thread(target=supersede) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(wins) == [False, False, False, True]
    assert len(store.find_records(supersedes_id=target.id)) == 1


def test_erasing_a_user_leaves_no_canary_in_any_live_table(store: Store) -> None:
    store.create_session("s-u", "agent-a", "aditya", None, T0)
    store.append_turn("s-u", "user", f"my codename is {CANARY}", T0 + timedelta(seconds=1))
    entity = store.create_entity("person", f"{CANARY} person", ADITYA)
    store.add_alias(entity.id, f"{CANARY} alias")
    rec = make_record(content=f"uses the codename {CANARY}", evidence=f"codename is {CANARY}",
                      source_ref="session:s-u<turn:1>", tags=[CANARY])
    store.write_record(rec, links=[(entity.id, "about")],
                       embedding=Embedding("m", "1", np.ones(4, dtype=np.float32) / 2))
    store.append_event("note", "test", {"user_id": "aditya", "said": CANARY})
    kept = make_record(content="vera keeps her notes", scope=VERA)
    store.write_record(kept)

    result = store.erase_user("aditya", "admin", "request")

    assert rec.id in result.record_ids
    with store.snapshot() as conn:
        for table in ("records", "records_fts", "entities", "entity_aliases", "events",
                      "session_turns", "search_log", "profile_blocks", "embeddings"):
            text = repr(conn.execute(f"SELECT * FROM {table}").fetchall())
            assert CANARY not in text, table
    assert store.get_record(kept.id) is not None
    assert _ids(store, '"notes"', [VERA]) == [kept.id]
    store.compact()


def test_words_inside_paths_and_ids_are_found_as_fts5_cuts_them(store: Store) -> None:
    rec = make_record(content="Edit config/settings.py before each deploy.")
    store.write_record(rec)
    assert _ids(store, '"settings"', [ADITYA]) == [rec.id]
    assert _ids(store, '"explanation style"', [ADITYA]) == [rec.id]  # subject 'ent_aditya/explanation_style'


def test_entity_scopes_names_each_existing_entity_once_and_skips_unknown_ids(store: Store) -> None:
    mine = store.create_entity("person", "Aditya", ADITYA, status="confirmed")
    hers = store.create_entity("person", "Vera", VERA, status="provisional")
    found = store.entity_scopes([hers.id, mine.id, "ent_missing", mine.id])
    assert found == {mine.id: ADITYA, hers.id: VERA}
    assert store.entity_scopes([]) == {}


def test_aliases_found_in_one_lookup_keep_alias_then_id_order(store: Store) -> None:
    first = store.create_entity("person", "Aditya", ADITYA, status="confirmed")
    second = store.create_entity("project", "Atlas", ADITYA, status="confirmed")
    store.add_alias(first.id, "adi")
    store.add_alias(second.id, "adi")
    store.add_alias(second.id, "atlas")
    foreign = store.create_entity("person", "Adi", VERA, status="confirmed")
    store.add_alias(foreign.id, "adi")
    found = store.entities_by_aliases(["atlas", "adi", "nobody", "adi", ""], scopes=[ADITYA])
    assert list(found) == ["adi", "atlas"]
    assert [e.id for e in found["adi"]] == sorted([first.id, second.id])
    assert [e.id for e in found["atlas"]] == [second.id]
    assert set(found["atlas"][0].aliases) >= {"adi", "atlas"}
