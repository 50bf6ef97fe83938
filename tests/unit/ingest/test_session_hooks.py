"""Session hooks on a real store: start, turns, end, and the idle split."""

from __future__ import annotations

import logging
from datetime import timedelta
from pathlib import Path

import pytest

from retold.clock import ManualClock
from retold.ingest.session import InProcessScheduler, SessionBuffer, SessionHooks
from retold.models import Principal
from retold.store import Store, open_store
from retold.store.claims import ClaimTerms
from retold.testing import T0
from tests.conditions import FullDiskStore, write_lock_held

IDLE = timedelta(minutes=30)
P = Principal(agent_id="research-agent", user_id="aditya", session_id="s1", project_id="retold")


class BrokenScheduler:
    """A queue that is down."""

    deferred = True

    def __init__(self) -> None:
        self.calls = 0

    def schedule(self, session_id: str) -> None:
        self.calls += 1
        raise ConnectionError("broker unreachable")


@pytest.fixture
def scheduler() -> InProcessScheduler:
    return InProcessScheduler()


@pytest.fixture
def hooks(store: Store, scheduler: InProcessScheduler, clock: ManualClock) -> SessionHooks:
    return SessionHooks(store, scheduler, IDLE, clock)


def test_start_creates_the_session_for_the_principal(hooks: SessionHooks, store: Store) -> None:
    hooks.on_session_start(P)
    hooks.on_session_start(P)  # idempotent
    row = store.get_session("s1")
    assert row is not None
    assert (row.agent_id, row.user_id, row.project_id, row.started_at) == (
        "research-agent", "aditya", "retold", T0,
    )


def test_hooks_need_a_session_id(hooks: SessionHooks) -> None:
    anonymous = Principal(agent_id="research-agent", user_id="aditya")
    with pytest.raises(ValueError, match="session_id"):
        hooks.on_session_start(anonymous)
    with pytest.raises(ValueError, match="session_id"):
        hooks.on_turn(anonymous, "user", "hello there")
    with pytest.raises(ValueError, match="session_id"):
        hooks.on_session_end(anonymous)


def test_turns_are_numbered_and_tool_turns_keep_the_result_text(
    hooks: SessionHooks, store: Store, clock: ManualClock
) -> None:
    hooks.on_session_start(P)
    assert hooks.on_turn(P, "user", "Run the tests please.") is P
    clock.advance(seconds=10)
    assert hooks.on_turn(P, "tool", "42 passed, 0 failed") is P
    clock.advance(seconds=10)
    assert hooks.on_turn(P, "assistant", "All 42 tests pass.") is P
    turns = SessionBuffer(store).turns("s1")
    assert [(t.turn, t.role, t.content) for t in turns] == [
        (1, "user", "Run the tests please."),
        (2, "tool", "42 passed, 0 failed"),
        (3, "assistant", "All 42 tests pass."),
    ]
    assert turns[2].at == T0 + timedelta(seconds=20)


def test_a_turn_starts_an_unknown_session_implicitly(hooks: SessionHooks, store: Store) -> None:
    assert hooks.on_turn(P, "user", "No start hook was called.") is P
    row = store.get_session("s1")
    assert row is not None and row.started_at == T0
    assert [t.turn for t in store.turns("s1")] == [1]


def test_unknown_role_is_refused(hooks: SessionHooks, store: Store) -> None:
    hooks.on_session_start(P)
    with pytest.raises(ValueError, match="role"):
        hooks.on_turn(P, "system", "You are a helpful agent.")
    assert store.turns("s1") == []


def test_end_marks_the_session_and_schedules_exactly_once(
    hooks: SessionHooks, store: Store, scheduler: InProcessScheduler, clock: ManualClock
) -> None:
    hooks.on_session_start(P)
    hooks.on_turn(P, "user", "Keep answers concise.")
    clock.advance(minutes=2)
    hooks.on_session_end(P)
    hooks.on_session_end(P)
    row = store.get_session("s1")
    assert row is not None and row.ended_at == T0 + timedelta(minutes=2)
    assert scheduler.scheduled == ["s1"]


def test_in_process_scheduler_runs_the_injected_callable(store: Store, clock: ManualClock) -> None:
    ran: list[str] = []
    scheduler = InProcessScheduler(run=ran.append)
    hooks = SessionHooks(store, scheduler, IDLE, clock)
    hooks.on_session_start(P)
    hooks.on_session_end(P)
    assert ran == ["s1"] and scheduler.scheduled == ["s1"]


def test_scheduler_failure_is_logged_not_raised(
    store: Store, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    broken = BrokenScheduler()
    hooks = SessionHooks(store, broken, IDLE, clock)
    hooks.on_session_start(P)
    with caplog.at_level(logging.WARNING, logger="retold.ingest.session"):
        hooks.on_session_end(P)  # must not raise
    warnings = [r for r in caplog.records if r.name == "retold.ingest.session"]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING
    assert "s1" in warnings[0].getMessage()
    row = store.get_session("s1")
    assert row is not None and row.ended_at is not None  # the end itself is kept
    hooks.on_session_end(P)
    assert broken.calls == 1  # already ended: nothing scheduled again


def test_turns_within_the_idle_timeout_do_not_split(
    hooks: SessionHooks, store: Store, scheduler: InProcessScheduler, clock: ManualClock
) -> None:
    hooks.on_session_start(P)
    for _ in range(3):
        clock.advance(IDLE)  # exactly the timeout is not "older than" it
        assert hooks.on_turn(P, "user", "still here") is P
    assert [t.turn for t in store.turns("s1")] == [1, 2, 3]
    assert store.get_session("s1~2") is None
    assert scheduler.scheduled == []


def test_idle_gap_splits_into_a_derived_session(
    hooks: SessionHooks, store: Store, scheduler: InProcessScheduler, clock: ManualClock
) -> None:
    hooks.on_session_start(P)
    hooks.on_turn(P, "user", "First segment, turn one.")
    hooks.on_turn(P, "assistant", "First segment, turn two.")
    clock.advance(minutes=45)
    split = hooks.on_turn(P, "user", "Back after lunch.")

    assert split.session_id == "s1~2"
    assert (split.agent_id, split.user_id, split.project_id) == (P.agent_id, P.user_id, P.project_id)
    old = store.get_session("s1")
    assert old is not None and old.ended_at == T0 + timedelta(minutes=45)
    assert scheduler.scheduled == ["s1"]
    new = store.get_session("s1~2")
    assert new is not None and new.ended_at is None and new.started_at == T0 + timedelta(minutes=45)
    assert (new.agent_id, new.user_id, new.project_id) == ("research-agent", "aditya", "retold")
    # The late turn lives only in the new session, numbered from 1 again.
    assert [t.turn for t in store.turns("s1")] == [1, 2]
    assert [(t.turn, t.content) for t in store.turns("s1~2")] == [(1, "Back after lunch.")]
    events = store.events(kind="session.split")
    assert len(events) == 1
    assert events[0]["actor"] == "research-agent"
    assert events[0]["payload"]["from"] == "s1" and events[0]["payload"]["to"] == "s1~2"
    assert events[0]["payload"]["idle_minutes"] == 45

    clock.advance(minutes=1)
    assert hooks.on_turn(split, "assistant", "Welcome back.") is split
    assert [t.turn for t in store.turns("s1~2")] == [1, 2]


def test_second_idle_split_gives_the_next_suffix(
    hooks: SessionHooks, store: Store, scheduler: InProcessScheduler, clock: ManualClock
) -> None:
    hooks.on_session_start(P)
    hooks.on_turn(P, "user", "Morning.")
    clock.advance(hours=2)
    second = hooks.on_turn(P, "user", "Noon.")
    clock.advance(hours=2)
    third = hooks.on_turn(second, "user", "Evening.")
    assert (second.session_id, third.session_id) == ("s1~2", "s1~3")
    assert scheduler.scheduled == ["s1", "s1~2"]
    assert [e["payload"]["to"] for e in store.events(kind="session.split")] == ["s1~2", "s1~3"]
    hooks.on_session_end(third)
    assert scheduler.scheduled == ["s1", "s1~2", "s1~3"]


def test_split_skips_derived_ids_that_already_exist(
    hooks: SessionHooks, store: Store, clock: ManualClock
) -> None:
    hooks.on_session_start(P)
    store.create_session("s1~2", "research-agent", "aditya", None, T0)
    store.create_session("s1~3", "research-agent", "aditya", None, T0)
    clock.advance(hours=1)
    assert hooks.on_turn(P, "user", "after a long pause").session_id == "s1~4"


def test_idle_is_measured_from_start_when_there_are_no_turns(
    hooks: SessionHooks, clock: ManualClock
) -> None:
    hooks.on_session_start(P)
    clock.advance(minutes=31)
    assert hooks.on_turn(P, "user", "first words, late").session_id == "s1~2"


def test_split_survives_a_broken_scheduler(
    store: Store, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    hooks = SessionHooks(store, BrokenScheduler(), IDLE, clock)
    hooks.on_turn(P, "user", "hello")
    clock.advance(hours=1)
    with caplog.at_level(logging.WARNING, logger="retold.ingest.session"):
        moved = hooks.on_turn(P, "user", "hello again")
    assert moved.session_id == "s1~2"
    assert [t.content for t in store.turns("s1~2")] == ["hello again"]
    assert len([r for r in caplog.records if r.name == "retold.ingest.session"]) == 1


def test_turn_after_explicit_end_continues_in_a_derived_session(
    hooks: SessionHooks, store: Store, scheduler: InProcessScheduler, clock: ManualClock
) -> None:
    # Extraction of an ended session may already be running; a late turn must not be
    # appended to it where extraction would never see it.
    hooks.on_turn(P, "user", "hello")
    hooks.on_session_end(P)
    clock.advance(minutes=1)
    moved = hooks.on_turn(P, "user", "one more thing")
    assert moved.session_id == "s1~2"
    assert [t.content for t in store.turns("s1")] == ["hello"]
    assert scheduler.scheduled == ["s1"]  # not scheduled twice


# -- the idle sweep -----------------------------------------------------------------------


def _open(hooks: SessionHooks, session_id: str, *, turn: bool = True) -> Principal:
    p = Principal("research-agent", "aditya", session_id, None)
    hooks.on_session_start(p)
    if turn:
        hooks.on_turn(p, "user", f"hello from {session_id}")
    return p


def test_end_idle_ends_and_schedules_only_sessions_idle_past_the_timeout(
    hooks: SessionHooks, store: Store, scheduler: InProcessScheduler, clock: ManualClock
) -> None:
    _open(hooks, "quiet", turn=False)  # idle since its start
    clock.advance(minutes=5)
    _open(hooks, "stale")
    done = _open(hooks, "done")
    hooks.on_session_end(done)
    clock.advance(minutes=20)
    _open(hooks, "busy")
    clock.advance(minutes=10, seconds=1)  # stale: 30m01s since its turn; busy: 10m01s
    assert hooks.end_idle() == ["quiet", "stale"]
    assert scheduler.scheduled == ["done", "quiet", "stale"]
    for session_id, ended in (("quiet", True), ("stale", True), ("busy", False)):
        row = store.get_session(session_id)
        assert row is not None and (row.ended_at == clock.now()) is ended
    events = store.events(kind="session.ended_idle")
    assert [(e["actor"], e["payload"]) for e in events] == [
        ("research-agent", {"session": "quiet", "idle_minutes": 35.02}),
        ("research-agent", {"session": "stale", "idle_minutes": 30.02}),
    ]
    assert hooks.end_idle() == []  # nothing ended twice
    assert scheduler.scheduled == ["done", "quiet", "stale"]


def test_a_turn_after_the_idle_sweep_goes_to_a_derived_session(
    hooks: SessionHooks, store: Store, clock: ManualClock
) -> None:
    p = _open(hooks, "s1")
    clock.advance(minutes=45)
    assert hooks.end_idle() == ["s1"]
    moved = hooks.on_turn(p, "user", "back again")
    assert moved.session_id == "s1~2"
    assert [t.content for t in store.turns("s1")] == ["hello from s1"]


def test_end_idle_stops_publishing_at_the_first_queue_failure(
    store: Store, clock: ManualClock
) -> None:
    broken = BrokenScheduler()
    hooks = SessionHooks(store, broken, IDLE, clock)
    for session_id in ("a", "b", "c"):
        _open(hooks, session_id)
    clock.advance(hours=1)
    assert hooks.end_idle() == ["a", "b", "c"]
    assert broken.calls == 1  # the rest wait for recover instead of each waiting on the broker
    pending = store.pending_sessions(clock.now(), ClaimTerms(timedelta(minutes=30)))
    assert [sid for sid, _stage in pending] == ["a", "b", "c"]


# -- a queue that is down ------------------------------------------------------------------


class FlakyScheduler:
    """A queue that is down until ``up`` is set."""

    deferred = True

    def __init__(self) -> None:
        self.up = False
        self.attempts: list[str] = []

    def schedule(self, session_id: str) -> None:
        self.attempts.append(session_id)
        if not self.up:
            raise ConnectionError("broker unreachable")


def test_a_queue_outage_is_logged_once_and_left_alone_for_a_while(
    store: Store, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    queue = FlakyScheduler()
    hooks = SessionHooks(store, queue, IDLE, clock, queue_retry_after=timedelta(seconds=30))
    with caplog.at_level(logging.INFO, logger="retold.ingest.session"):
        for session_id, wait in (("s1", 0), ("s2", 10), ("s3", 25), ("s4", 10)):
            clock.advance(seconds=wait)
            hooks.on_session_end(_open(hooks, session_id))
        assert queue.attempts == ["s1", "s3"]  # s2 and s4 fell inside the pause after a failure
        assert hooks.outage.down
        queue.up = True
        clock.advance(seconds=30)
        hooks.on_session_end(_open(hooks, "s5"))
    assert queue.attempts == ["s1", "s3", "s5"] and not hooks.outage.down
    messages = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert [level for level, _ in messages] == [logging.WARNING, logging.INFO]
    assert "could not schedule extraction of session s1" in messages[0][1]
    assert "accepts sessions again" in messages[1][1] and "4 sessions" in messages[1][1]
    pending = store.pending_sessions(clock.now(), ClaimTerms(timedelta(minutes=30)))
    assert [sid for sid, _stage in pending] == ["s1", "s2", "s3", "s4", "s5"]  # none lost


def test_a_full_disk_leaves_the_turn_out_and_the_agent_going(
    store_path: Path, scheduler: InProcessScheduler, clock: ManualClock, caplog: pytest.LogCaptureFixture,
) -> None:
    """A full disk (made with SQLite's page limit) never fails the host's turn: the turn
    is not half written, one warning says so for the whole outage, and the first turn the
    store takes again records how many were left out."""
    Store(store_path, clock=clock).close()
    full = FullDiskStore(store_path, clock=clock)
    hooks = SessionHooks(full, scheduler, IDLE, clock)
    with caplog.at_level(logging.WARNING, logger="retold.ingest.session"):
        for _ in range(3):
            assert hooks.on_turn(P, "user", "a long paste " * 20_000) == P
    assert full.get_session("s1") is None
    assert hooks.unrecorded == {"s1": 3}
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    assert "was not recorded" in caplog.records[0].getMessage()
    full.close()
    roomy = Store(store_path, clock=clock)
    hooks.store = roomy
    hooks.on_turn(P, "user", "Short again.")
    assert [t.content for t in roomy.turns("s1")] == ["Short again."]
    (event,) = roomy.events(kind="session.turns_unrecorded")
    assert event["payload"] == {"session": "s1", "turns": 3} and hooks.unrecorded == {}
    roomy.close()


def test_a_read_only_or_locked_store_never_fails_the_hooks(
    store_target: str, scheduler: InProcessScheduler, clock: ManualClock,
) -> None:
    """A read-only store and a held write lock each leave the session as it was instead of
    raising into the host; a session whose end was refused stays open for the idle sweep."""
    open_store(store_target, clock=clock).close()
    read_only = open_store(store_target, clock=clock, read_only=True)
    SessionHooks(read_only, scheduler, IDLE, clock).on_session_start(P)
    assert read_only.get_session("s1") is None
    read_only.close()
    busy = open_store(store_target, clock=clock, busy_timeout_seconds=0.1)
    SessionHooks(busy, scheduler, IDLE, clock).on_session_start(P)
    with write_lock_held(store_target):
        SessionHooks(busy, scheduler, IDLE, clock).on_session_end(P)
    session = busy.get_session("s1")
    assert session is not None and session.ended_at is None
    busy.close()
