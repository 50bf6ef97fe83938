"""Sessions and numbered turns on a real SQLite file."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from retold.errors import StoreError
from retold.store import Store, open_store
from retold.store.sessions import IdleSession, SessionRow
from retold.testing import T0


def _start(store: Store, session_id: str = "s1") -> None:
    assert store.create_session(session_id, "research-agent", "aditya", "retold", T0)


def test_create_session_round_trips_every_column(store: Store) -> None:
    _start(store)
    assert store.get_session("s1") == SessionRow(
        id="s1", agent_id="research-agent", user_id="aditya", project_id="retold",
        started_at=T0, ended_at=None, extraction_started_at=None, extracted_at=None,
    )
    assert store.get_session("missing") is None


def test_create_session_is_idempotent_and_never_overwrites(store: Store) -> None:
    _start(store)
    assert store.create_session("s1", "other-agent", "someone", None, T0 + timedelta(hours=1)) is False
    row = store.get_session("s1")
    assert row is not None
    assert (row.agent_id, row.user_id, row.project_id, row.started_at) == (
        "research-agent", "aditya", "retold", T0,
    )


def test_turns_are_numbered_from_one_in_order(store: Store) -> None:
    _start(store)
    _start(store, "s2")
    first = store.append_turn("s1", "user", "Keep answers concise.", T0)
    second = store.append_turn("s1", "assistant", "Understood.", T0 + timedelta(seconds=5))
    third = store.append_turn("s1", "tool", '{"status": "ok"}', T0 + timedelta(seconds=9))
    other = store.append_turn("s2", "user", "Another session.", T0)
    assert [first.turn, second.turn, third.turn] == [1, 2, 3]
    assert other.turn == 1  # numbering is per session
    turns = store.turns("s1")
    assert turns == [first, second, third]
    assert [t.role for t in turns] == ["user", "assistant", "tool"]
    assert turns[2].content == '{"status": "ok"}'
    assert store.last_turn_at("s1") == T0 + timedelta(seconds=9)


def test_empty_session_has_no_turns_and_no_last_turn(store: Store) -> None:
    _start(store)
    assert store.turns("s1") == []
    assert store.last_turn_at("s1") is None


def test_unknown_role_is_refused_and_writes_nothing(store: Store) -> None:
    _start(store)
    with pytest.raises(ValueError, match="role"):
        store.append_turn("s1", "system", "You are helpful.", T0)
    assert store.turns("s1") == []


def test_turn_for_unknown_session_is_refused(store: Store) -> None:
    with pytest.raises(StoreError, match="no session"):
        store.append_turn("nope", "user", "hello there", T0)


def test_end_session_sets_ended_at_once(store: Store) -> None:
    _start(store)
    assert store.end_session("s1", T0 + timedelta(minutes=5)) is True
    assert store.end_session("s1", T0 + timedelta(minutes=9)) is False
    row = store.get_session("s1")
    assert row is not None and row.ended_at == T0 + timedelta(minutes=5)
    assert store.end_session("missing", T0) is False


def test_idle_sessions_are_open_sessions_quiet_since_before_the_cutoff(store: Store) -> None:
    _start(store, "quiet")  # no turns: idle since T0
    _start(store, "talked")
    store.append_turn("talked", "user", "hello", T0 + timedelta(minutes=10))
    _start(store, "ended")
    store.end_session("ended", T0)
    assert store.idle_sessions(T0) == []  # a session last active exactly at the cutoff is not idle
    cutoff = T0 + timedelta(minutes=10, microseconds=1)
    assert store.idle_sessions(cutoff) == [
        IdleSession("quiet", "research-agent", T0),
        IdleSession("talked", "research-agent", T0 + timedelta(minutes=10)),
    ]


def test_concurrent_appenders_on_one_store_never_collide(store_target: str) -> None:
    first, second = open_store(store_target), open_store(store_target)
    try:
        assert first.create_session("s1", "research-agent", "aditya", None, T0)
        per_writer = 40
        errors: list[BaseException] = []
        gate = threading.Barrier(2)

        def write(store: Store, label: str) -> None:
            try:
                gate.wait()
                for i in range(per_writer):
                    store.append_turn("s1", "user", f"{label} {i}", T0 + timedelta(seconds=i))
            except BaseException as exc:  # surfaced below, not lost in the thread
                errors.append(exc)

        threads = [
            threading.Thread(target=write, args=(first, "a")),
            threading.Thread(target=write, args=(second, "b")),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        turns = first.turns("s1")
        assert [t.turn for t in turns] == list(range(1, 2 * per_writer + 1))
        assert sorted(t.content for t in turns) == sorted(
            f"{label} {i}" for label in "ab" for i in range(per_writer)
        )
    finally:
        first.close()
        second.close()
