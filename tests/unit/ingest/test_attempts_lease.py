"""A claim is a lease: it lives while its holder's heartbeat does, a lapsed one is taken
over, and a holder that lost its claim applies nothing.

A real store file and a manual clock; the heartbeat thread's own test waits on the row
it writes, with a deadline.
"""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import timedelta
from typing import Any

from retold.ingest.attempts import Claim
from retold.ingest.extractor import FakeExtractor
from retold.ingest.reviewer import TableReviewer
from retold.models import CandidateRecord, ExtractionOutput, SessionSummary
from retold.store.claims import ClaimTerms
from retold.testing import T0, World

TERMS = ClaimTerms(timeout=timedelta(minutes=30), lease=timedelta(seconds=30))
PREFERS = CandidateRecord(type="semantic", content="Aditya prefers short technical answers.",
                          attribute="answer_style", source_kind="user_statement",
                          evidence="keep every answer short and technical", evidence_turn=1,
                          entity_mentions=[])
OUTPUT = ExtractionOutput([PREFERS], SessionSummary("Aditya asked for short answers.", [], []))


def ended(world: World) -> str:
    world.say("user", "Please keep every answer short and technical, I read them on my phone.")
    world.say("assistant", "Understood.")
    world.rt.hooks.on_session_end(world.p)
    assert world.p.session_id is not None
    return world.p.session_id


def test_a_claim_lives_while_its_heartbeat_does_and_is_taken_over_after(world: World) -> None:
    store, sid = world.rt.store, ended(world)
    at = lambda seconds: T0 + timedelta(seconds=seconds)  # noqa: E731
    assert store.claim_session(sid, at(0), TERMS, token="a") == "claimed"
    assert store.claim_session(sid, at(20), TERMS, token="b") == "busy"
    assert store.renew_claim(sid, "a", at(20))
    assert store.claim_session(sid, at(45), TERMS, token="b") == "busy"  # beat 25 s ago
    assert world.rt.session_end.pending() == []
    world.clock.set(at(51))
    assert world.rt.session_end.pending() == [(sid, "extract")]  # beat 31 s ago: a dead worker
    assert store.claim_session(sid, at(51), TERMS, token="b") == "reclaimed"
    assert not store.renew_claim(sid, "a", at(52)) and not store.holds_claim(sid, "a")
    assert store.holds_claim(sid, "b")
    # A holder that beats forever still loses the claim once the run outlives the timeout.
    assert store.renew_claim(sid, "b", at(51 + 30 * 60 - 1))
    assert store.claim_session(sid, at(51 + 30 * 60 + 1), TERMS, token="c") == "reclaimed"


def test_a_worker_whose_lease_lapsed_before_apply_applies_nothing(world: World) -> None:
    sid = ended(world)
    slow = world.rt.session_end.using(FakeExtractor(OUTPUT), TableReviewer())
    other = world.rt.session_end.using(FakeExtractor(OUTPUT), TableReviewer())
    embedder = slow.parts.embedder

    class Stalls:
        """The slow worker's summary embedding, during which its lease lapses and another
        worker takes the session over and finishes it."""

        def __getattr__(self, name: str) -> Any:
            return getattr(embedder, name)

        def embed_documents(self, texts: list[str]) -> Any:
            world.clock.advance(seconds=31)
            assert other.run(sid).outcome == "extracted"
            return embedder.embed_documents(texts)

    slow.parts = replace(slow.parts, embedder=Stalls())
    result = slow.run(sid)
    assert result.outcome == "busy" and not result.failed
    assert [r.content for r in world.rt.store.find_records(content=PREFERS.content)] == [PREFERS.content]
    assert len(world.events("extraction.run")) == 1 and len(world.events("extraction.reclaimed")) == 1
    lost = world.events("extraction.claim_lost")
    assert len(lost) == 1 and lost[0]["payload"]["stage"] == "apply"
    row = world.rt.store.get_session(sid)
    assert row is not None and row.extracted_at is not None and row.attempts == 0


def test_a_worker_whose_lease_lapsed_saves_no_stage(world: World) -> None:
    sid = ended(world)
    assert world.rt.store.claim_session(sid, T0, TERMS, token="a") == "claimed"
    assert world.rt.store.claim_session(sid, T0 + timedelta(seconds=31), TERMS, token="b") == "reclaimed"
    assert not world.rt.store.save_stage(sid, "extract", {"x": 1}, "m", "v1", claim_token="a")
    assert world.rt.store.stage_row(sid, "extract") is None
    assert world.rt.store.save_stage(sid, "extract", {"x": 1}, "m", "v1", claim_token="b")


def test_the_lease_thread_renews_the_heartbeat_until_the_claim_is_lost(world: World) -> None:
    store, sid = world.rt.store, ended(world)
    assert store.claim_session(sid, T0, TERMS, token="a") == "claimed"
    world.clock.advance(seconds=20)

    def beat() -> Any:
        row = store.get_session(sid)
        return row and row.claim_heartbeat_at

    attempts = world.rt.session_end.attempts
    attempts.terms = replace(attempts.terms, lease=timedelta(seconds=0.03))
    with attempts.lease(Claim(sid, "a", forced=False)) as lost:
        deadline = time.monotonic() + 10
        while beat() != T0 + timedelta(seconds=20) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert beat() == T0 + timedelta(seconds=20)
        # The thread beats at the manual clock's T0+20s, so at T0+51s the beat is stale.
        assert store.claim_session(sid, T0 + timedelta(seconds=51), TERMS, token="b") == "reclaimed"
        assert lost.wait(timeout=deadline - time.monotonic())
    assert store.holds_claim(sid, "b")
