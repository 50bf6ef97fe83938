"""Records and sessions named by part of their id, on SQLite and PostgreSQL alike."""

from __future__ import annotations

from retold.store import Store
from retold.testing import T0, make_record

A = "0190aaaa-0000-7000-8000-0000dd628369"
B = "0190aaaa-0001-7000-8000-0000ee628369"
C = "0190bbbb-0000-7000-8000-00000000c0de"


def _records(store: Store) -> None:
    for record_id in (A, B, C):
        store.write_record(make_record(id=record_id, content=f"Aditya's fact {record_id}."))


def test_a_whole_id_a_start_or_an_end_names_its_record(store: Store) -> None:
    _records(store)
    assert store.record_ids_named(A, 6) == [A]
    assert store.record_ids_named("dd628369", 6) == [A]  # the short id results show
    assert store.record_ids_named("0190bbbb", 6) == [C]
    assert store.record_ids_named("628369", 6) == [A, B]
    assert store.record_ids_named("0190", 6) == [A, B, C]
    assert store.record_ids_named("0190", 2) == [A, B]
    assert store.record_ids_named("ffff0000", 6) == []


def test_what_is_typed_is_matched_literally(store: Store) -> None:
    _records(store)
    # LIKE's wildcards and SQLite's ASCII case folding must not widen a part.
    for typed in ("d_628369", "%628369", "%", "____", "DD628369", "0190AAAA"):
        assert store.record_ids_named(typed, 6) == [], typed
    assert store.record_ids_named("c0d", 6) == []  # shorter than four: only a whole id


def test_sessions_are_named_the_same_way(store: Store) -> None:
    for session in ("sess-alpha", "sess-beta", "abc"):
        assert store.create_session(session, "agent", "aditya", None, T0)
    assert store.session_ids_named("abc", 6) == ["abc"]
    assert store.session_ids_named("sess-al", 6) == ["sess-alpha"]
    assert store.session_ids_named("sess", 6) == ["sess-alpha", "sess-beta"]
    assert store.session_ids_named("beta", 6) == ["sess-beta"]
    assert store.session_ids_named("ab", 6) == []
