"""What happens to a session whose extraction applied nothing: backoff, the attempt limit
and parking, the not-configured block, and the recover sweep that hands the queue only
what is due and not already waiting there.

A real store file and the fakes at the model boundaries; a manual clock moves time.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from retold.hosted import HostedError
from retold.ingest.extractor import FakeExtractor
from retold.ingest.reviewer import TableReviewer
from retold.ingest.session import SessionHooks
from retold.ingest.session_end import SessionEnd
from retold.models import CandidateRecord, ExtractionOutput, ReviewContext, ReviewDecision, SessionSummary
from retold.store.sessions import Stage
from retold.testing import World, make_world

USER_SAYS = "Please keep every answer short and technical, I read them on my phone."
PREFERS = CandidateRecord(type="semantic", content="Aditya prefers short technical answers.",
                          attribute="answer_style", source_kind="user_statement",
                          evidence="keep every answer short and technical", evidence_turn=1,
                          entity_mentions=[])
OUTPUT = ExtractionOutput([PREFERS], SessionSummary("Aditya asked for short answers.", [], []))


class DownReviewer:
    """A reviewer whose provider keeps answering 503."""

    name = "down"
    prompt_version = "review-test"

    def review_batch(self, items: list[tuple[CandidateRecord, ReviewContext]]) -> list[ReviewDecision]:
        raise HostedError("provider", "503 Service Unavailable", retryable=True)


class Queue:
    """A broker: records what it was sent, or refuses everything while ``down``."""

    deferred = True

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.down = False

    def schedule(self, session_id: str) -> None:
        self.send(session_id, "extract")

    def send(self, session_id: str, stage: Stage) -> None:
        if self.down:
            raise ConnectionError("broker unreachable")
        self.sent.append(session_id)


def end(world: World, session_id: str, hooks: SessionHooks | None = None) -> str:
    p = replace(world.p, session_id=session_id)
    world.rt.hooks.on_turn(p, "user", USER_SAYS)
    world.rt.hooks.on_turn(p, "assistant", "Understood.")
    (hooks or world.rt.hooks).on_session_end(p)
    return session_id


def session(world: World, session_id: str) -> Any:
    row = world.rt.store.get_session(session_id)
    assert row is not None
    return row


def failing(world: World) -> SessionEnd:
    return world.rt.session_end.using(FakeExtractor(OUTPUT), DownReviewer())


def working(world: World) -> SessionEnd:
    return world.rt.session_end.using(FakeExtractor(OUTPUT), TableReviewer())


@pytest.fixture
def world(tmp_path: Path, store_target: str) -> Any:
    made = make_world(tmp_path, store=store_target, extraction_max_attempts=3, extraction_retry_seconds=60)
    try:
        yield made
    finally:
        made.rt.close()


# -- failed runs: backoff, then parked ---------------------------------------------------------


def test_failed_runs_back_off_doubling_then_park_the_session(world: World) -> None:
    sid = end(world, "s-fail")
    waits = []
    for attempt in (1, 2):
        result = failing(world).run(sid)
        assert result.outcome == "failed" and "503" in (result.reason or "")
        row = session(world, sid)
        assert (row.attempts, row.failed_at) == (attempt, None) and "503" in row.last_error
        waits.append(row.next_attempt_at - world.clock.now())
        assert failing(world).run(sid).outcome == "deferred"  # not due: nothing recorded
        world.clock.advance(waits[-1])
    assert waits == [timedelta(seconds=60), timedelta(seconds=120)]
    assert failing(world).run(sid).outcome == "failed"
    row = session(world, sid)
    assert row.attempts == 3 and row.failed_at == world.clock.now() and row.next_attempt_at is None
    failed = [e["payload"] for e in world.events("extraction.failed")]
    assert [(f["attempt"], f["parked"]) for f in failed] == [(1, False), (2, False), (3, True)]
    world.clock.advance(days=30)
    parked = working(world).run(sid)
    assert parked.outcome == "parked" and parked.failed and "after 3 failed attempts" in (parked.reason or "")
    assert Queue().sent == [] and world.rt.session_end.enqueue_due(Queue().send) == []
    # An operator's retry starts the count again; the stored extract stage is reused.
    assert world.rt.session_end.reset(sid)
    assert world.rt.session_end.enqueue_due(Queue().send) == [sid]
    assert working(world).run(sid).outcome == "extracted"
    row = session(world, sid)
    assert (row.attempts, row.last_error, row.failed_at) == (0, None, None)


def test_a_forced_run_re_runs_a_parked_session(world: World) -> None:
    sid = end(world, "s-parked")
    for _ in range(3):
        failing(world).run(sid)
        world.clock.advance(hours=1)
    assert session(world, sid).failed_at is not None
    assert working(world).run(sid, force=True).outcome == "extracted"


# -- not configured: blocked under the model setup --------------------------------------------


def test_not_configured_warns_once_names_the_key_and_blocks_until_the_setup_changes(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    first, second = end(world, "s-a"), end(world, "s-b")
    with caplog.at_level(logging.WARNING, logger="retold"):
        results = [world.rt.session_end.run(sid) for sid in (first, second, first)]
    assert [r.outcome for r in results] == ["not_configured"] * 3 and all(r.failed for r in results)
    assert "ANTHROPIC_API_KEY" in (results[2].reason or "")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "ANTHROPIC_API_KEY" in warnings[0] and "hosted.api_key_env" in warnings[0]
    events = world.events("extraction.not_configured")
    assert [e["payload"]["session_id"] for e in events] == [first, second]  # none for the repeat
    assert session(world, first).attempts == 0  # not a failure of the session
    # The same setup sends nothing, however long it waits; another setup takes them.
    world.clock.advance(days=1)
    queue = Queue()
    assert world.rt.session_end.enqueue_due(queue.send) == []
    configured = working(world)
    assert configured.enqueue_due(queue.send) == [first, second]
    assert configured.run(first).outcome == "extracted"


# -- the recover sweep ---------------------------------------------------------------------------


def test_recover_hands_over_due_sessions_in_batches_and_never_twice_while_queued(
    tmp_path: Path, store_target: str,
) -> None:
    world = make_world(tmp_path, store=store_target)
    try:
        attempts = world.rt.session_end.attempts
        attempts.recover = replace(attempts.recover, batch_size=2, requeue_after=timedelta(minutes=120))
        ids = [end(world, f"s-{n}") for n in range(5)]
        queue = Queue()
        sweeps = [world.rt.session_end.enqueue_due(queue.send) for _ in range(4)]
        assert sweeps == [ids[:2], ids[2:4], ids[4:], []]  # oldest first, each once
        assert working(world).run(ids[0]).outcome == "extracted"
        assert failing(world).run(ids[1]).outcome == "failed"
        world.clock.advance(seconds=61)  # the failed one is due again after its backoff
        assert world.rt.session_end.enqueue_due(queue.send) == [ids[1]]
        # A message that never reached a worker is handed over again after requeue_after.
        world.clock.advance(minutes=121)
        assert world.rt.session_end.enqueue_due(queue.send) == ids[1:3]
        assert queue.sent == [*ids, ids[1], *ids[1:3]]
    finally:
        world.rt.close()


def test_a_session_the_queue_took_is_not_sent_again_and_one_it_refused_is(world: World) -> None:
    queue = Queue()
    hooks = SessionHooks(world.rt.store, queue, timedelta(minutes=30), world.clock)
    taken = end(world, "s-taken", hooks)
    queue.down = True
    refused = end(world, "s-refused", hooks)
    queue.down = False
    assert queue.sent == [taken]
    assert session(world, taken).enqueued_at == world.clock.now()
    assert session(world, refused).enqueued_at is None
    assert world.rt.session_end.enqueue_due(queue.send) == [refused]
    # The worker that takes a message clears its mark, so a failed run waits for its backoff only.
    assert failing(world).run(taken).outcome == "failed"
    assert session(world, taken).enqueued_at is None
    world.clock.advance(seconds=60)
    assert world.rt.session_end.enqueue_due(queue.send) == [taken]


def test_a_broker_failure_mid_sweep_leaves_the_rest_due(world: World) -> None:
    ids = [end(world, f"s-{n}") for n in range(3)]
    queue, sent = Queue(), []

    def send(session_id: str, stage: Stage) -> None:
        queue.down = len(sent) == 1  # the second publish fails
        queue.send(session_id, stage)
        sent.append(session_id)

    with pytest.raises(ConnectionError):
        world.rt.session_end.enqueue_due(send)
    assert sent == ids[:1]
    queue.down = False
    assert world.rt.session_end.enqueue_due(queue.send) == ids[1:]


def test_a_broker_that_restarted_gets_what_it_held_at_the_next_sweep_once(world: World) -> None:
    queue = Queue()
    hooks = SessionHooks(world.rt.store, queue, timedelta(minutes=30), world.clock)
    held = [end(world, f"s-{n}", hooks) for n in range(2)]
    assert queue.sent == held  # published, marked queued
    # The first sweep only learns which broker instance it reached: nothing is due.
    assert world.rt.session_end.enqueue_due(queue.send, "instance-1") == []
    assert world.rt.session_end.enqueue_due(queue.send, "instance-1") == []
    assert world.rt.session_end.enqueue_due(queue.send) == []  # a sweep that could not tell
    # The broker restarted and forgot its messages: the next sweep hands them over again,
    # well before requeue_after, and the sweep after that does not repeat it.
    world.clock.advance(seconds=30)
    assert world.rt.session_end.enqueue_due(queue.send, "instance-2") == held
    assert world.rt.session_end.enqueue_due(queue.send, "instance-2") == []
    assert queue.sent == [*held, *held]
    [event] = world.events("queue.broker_restarted")
    assert event["payload"] == {"instance": "instance-2", "requeued": 2}
    # Handed over twice, extracted once: the first run claims it, the second finds it done.
    assert working(world).run(held[0]).outcome == "extracted"
    assert working(world).run(held[0]).outcome != "extracted"


def test_a_queued_session_whose_message_nobody_holds_is_handed_over_after_one_lease(world: World) -> None:
    queue = Queue()
    hooks = SessionHooks(world.rt.store, queue, timedelta(minutes=30), world.clock)
    waiting_id, orphan = end(world, "s-waiting", hooks), end(world, "s-orphan", hooks)
    lease = world.rt.config.ingestion.extraction_lease_seconds
    # Within one lease a worker may still be starting the task: nothing is due yet.
    world.clock.advance(seconds=lease // 2)
    assert world.rt.session_end.enqueue_due(queue.send, waiting=frozenset()) == []
    world.clock.advance(seconds=lease)
    # A broker that cannot say what waits leaves both to requeue_after, as before.
    assert world.rt.session_end.enqueue_due(queue.send) == []
    # s-waiting's message still waits for a worker; s-orphan's was taken by one that died.
    assert world.rt.session_end.enqueue_due(queue.send, waiting=frozenset({waiting_id})) == [orphan]
    assert world.rt.session_end.enqueue_due(queue.send, waiting=frozenset({waiting_id, orphan})) == []
    [event] = world.events("queue.orphans_requeued")
    assert event["payload"] == {"sessions": [orphan]}
    # A session a live worker has claimed is never an orphan, whatever the queue holds.
    world.clock.advance(seconds=2 * lease)
    assert working(world).run(orphan).outcome == "extracted"
    assert orphan not in world.rt.session_end.enqueue_due(queue.send, waiting=frozenset())
