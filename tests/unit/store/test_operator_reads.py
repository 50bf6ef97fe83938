"""What an operator reads from a real store: each session's state with its extraction
attempts and last error, filtered event queries, and the counts behind ``retold metrics``.
Sessions go through the real hooks and the real extraction runner, with a fake extractor
that succeeds or a failing one at the model boundary."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

import pytest

from retold.hosted import HostedError
from retold.ingest.extractor import FakeExtractor
from retold.ingest.reviewer import TableReviewer
from retold.models import (
    ExtractionContext,
    ExtractionOutput,
    Principal,
    SearchRequest,
    SessionSummary,
    Turn,
)
from retold.store.claims import ClaimTerms
from retold.store.event_log import EventQuery
from retold.store.session_states import SessionQuery
from retold.testing import AGENT, World
from tests.sql import execute

LEASE = timedelta(seconds=30)  # ingestion.extraction_lease_seconds
TERMS = ClaimTerms(timedelta(minutes=30), LEASE)
RETRY_WAIT = timedelta(minutes=5)  # past the first backoff (ingestion.extraction_retry_seconds)
QUIET = ExtractionOutput([], SessionSummary("They talked about the weather.", [], []))


@dataclass
class TimingOut:
    """An extractor whose hosted call times out."""

    name: str = "timing-out"
    prompt_version: str = "test-1"
    calls: list[int] = field(default_factory=list)

    def extract(self, transcript: list[Turn], context: ExtractionContext) -> ExtractionOutput:
        self.calls.append(len(transcript))
        raise HostedError("timeout", "extract call exceeded 60000 ms")


def _session(world: World, session_id: str, *, user: str = "aditya", end: bool = True) -> str:
    principal = Principal(AGENT, user, session_id, None)
    world.rt.hooks.on_session_start(principal)
    world.rt.hooks.on_turn(principal, "user", "What a sunny day it is in Berlin today.")
    world.rt.hooks.on_turn(principal, "assistant", "It is indeed sunny.")
    if end:
        world.rt.hooks.on_session_end(principal)
    world.clock.advance(timedelta(seconds=10))
    return session_id


def _extract(world: World, session_id: str, *, fail: bool) -> str:
    extractor = TimingOut() if fail else FakeExtractor(QUIET)
    outcome = world.rt.session_end.using(extractor, TableReviewer()).run(session_id).outcome
    world.clock.advance(timedelta(seconds=5))
    return outcome


def _statuses(world: World, **query: object) -> dict[str, tuple[str, int, str | None]]:
    found = world.rt.store.session_statuses(SessionQuery(**query),  # type: ignore[arg-type]
                                            world.clock.now() - LEASE)
    return {s.id: (s.state, s.attempts, s.last_error) for s in found}


@pytest.fixture
def sessions(world: World) -> World:
    """s1 open; failing: two timed-out attempts; recovered: a failure then a success;
    claimed: a live claim; other-user: ended, never tried."""
    world.say("user", "Just checking in about nothing in particular today.")
    world.clock.advance(timedelta(seconds=10))
    _session(world, "failing")
    assert _extract(world, "failing", fail=True) == "failed"
    world.clock.advance(RETRY_WAIT)  # a failed session is not due again before its backoff
    assert _extract(world, "failing", fail=True) == "failed"
    _session(world, "recovered")
    assert _extract(world, "recovered", fail=True) == "failed"
    world.clock.advance(RETRY_WAIT)
    assert _extract(world, "recovered", fail=False) == "extracted"
    _session(world, "claimed")
    assert world.rt.store.claim_session("claimed", world.clock.now(), TERMS, token="worker-1") == "claimed"
    _session(world, "other-user", user="bea")
    return world


def test_each_session_shows_its_state_attempts_and_last_error(sessions: World) -> None:
    assert _statuses(sessions) == {
        "s1": ("open", 0, None),
        "failing": ("pending", 2, "extract timeout: extract call exceeded 60000 ms"),
        "recovered": ("extracted", 1, None),  # the later success clears the error
        "claimed": ("extracting", 0, None),
        "other-user": ("pending", 0, None),
    }
    listed = sessions.rt.store.session_statuses(SessionQuery(), sessions.clock.now())
    assert [s.id for s in listed] == ["s1", "failing", "recovered", "claimed", "other-user"]  # by start
    failing = next(s for s in listed if s.id == "failing")
    assert failing.ended_at is not None and failing.extracted_at is None and failing.last_error_at


def test_a_claim_whose_lease_lapsed_counts_as_pending_again(sessions: World) -> None:
    sessions.clock.advance(LEASE + timedelta(seconds=1))  # its worker stopped renewing it
    assert _statuses(sessions)["claimed"][0] == "pending"


def test_filters_select_failing_pending_one_user_and_the_newest(sessions: World) -> None:
    assert set(_statuses(sessions, failing=True)) == {"failing"}
    assert set(_statuses(sessions, states=("pending", "extracting"))) == {"failing", "claimed", "other-user"}
    assert set(_statuses(sessions, user_id="bea")) == {"other-user"}
    assert set(_statuses(sessions, agent_id="nobody")) == set()
    assert list(_statuses(sessions, limit=2)) == ["claimed", "other-user"]  # newest two, oldest first


def test_parked_and_blocked_sessions_and_renewed_claims_show_as_such(sessions: World) -> None:
    store = sessions.rt.store
    for _ in range(4):  # attempts 3, 4 and 5 of 5: the last one parks the session
        sessions.clock.advance(timedelta(hours=2))
        _extract(sessions, "failing", fail=True)
    execute(store.path, "UPDATE sessions SET extraction_blocked_by = 'no API key' WHERE id = 'other-user'")
    sessions.clock.advance(LEASE)  # the claim's start is stale now...
    assert store.renew_claim("claimed", "worker-1", sessions.clock.now())  # ...but its holder renewed it
    statuses = _statuses(sessions)
    assert statuses["failing"][:2] == ("failed", 5)
    assert statuses["other-user"][0] == "blocked" and statuses["claimed"][0] == "extracting"
    assert set(_statuses(sessions, states=("failed",))) == {"failing"}
    assert set(_statuses(sessions, failing=True)) == {"failing", "other-user"}
    counts = store.session_state_counts(sessions.clock.now() - LEASE)
    assert counts == {"open": 1, "pending": 0, "extracting": 1, "extracted": 1, "failed": 1, "blocked": 1}


def test_state_counts_and_lags(sessions: World) -> None:
    counts = sessions.rt.store.session_state_counts(sessions.clock.now() - LEASE)
    assert counts == {"open": 1, "pending": 2, "extracting": 1, "extracted": 1, "failed": 0, "blocked": 0}
    # "recovered" ended 10 s before its failed try; the success came 5 s + RETRY_WAIT later.
    assert sessions.rt.store.extraction_lags() == [pytest.approx(15.0 + RETRY_WAIT.total_seconds())]
    assert sessions.rt.store.extraction_lags(sessions.clock.now()) == []


def test_events_filter_by_kind_prefix_time_record_and_session(sessions: World) -> None:
    store = sessions.rt.store

    def kinds(**query: object) -> list[str]:
        return [e.kind for e in store.find_events(EventQuery(**query))]  # type: ignore[arg-type]

    assert kinds(kind="extraction.failed") == ["extraction.failed"] * 3
    assert kinds(kind="extraction.*") == kinds(kind="extraction.") == [
        "extraction.failed", "extraction.failed", "extraction.failed", "extraction.run"]
    assert kinds(kind="extraction") == []  # no kind is exactly that
    recovered = store.find_events(EventQuery(session_id="recovered"))
    assert [e.kind for e in recovered] == ["extraction.failed", "extraction.run"]
    summary_id = recovered[1].payload["summary"]["record_id"]
    assert summary_id and [e.kind for e in store.find_events(EventQuery(record_id=summary_id))] == [
        "record.created"]
    assert kinds(since=recovered[-1].at, kind="extraction.*") == ["extraction.run"]
    newest = store.find_events(EventQuery(limit=2))
    everything = store.find_events(EventQuery(limit=1000))
    assert newest == everything[-2:] and newest[0].at <= newest[1].at
    assert recovered[0].payload["stage"] == "extract"


def test_counts_of_writes_extractions_and_searches(world: World) -> None:
    world.say("user", "Please keep every answer short, I read them on my phone.")
    evidence = "keep every answer short"
    for _ in range(2):  # the same claim from the same quote again only counts as seen
        assert world.write(content="Aditya prefers short answers.", attribute="answer_style",
                           source_kind="user_statement", evidence=evidence).error is None
    world.rt.retriever.search(world.p, SearchRequest(["short answers"]))
    world.rt.retriever.search(world.p, SearchRequest(["quantum chromodynamics lecture notes"]))
    world.rt.flush_search_log()
    store = world.rt.store
    assert store.write_outcome_counts() == {"created": 1, "already_reinforced": 1}
    assert store.write_outcome_counts(world.clock.now() + timedelta(seconds=1)) == {}
    assert store.search_counts() == {"tool": (2, 1)}
    _session(world, "failing")
    _extract(world, "failing", fail=True)
    assert store.event_kind_counts("extraction.") == {"failed": 1}

