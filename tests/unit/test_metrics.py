"""``collect_metrics`` on a real store: write outcomes, searches and their empty rate,
extraction outcomes, session states and the lag from a session's end to its extraction."""

from __future__ import annotations

from datetime import timedelta

from retold.broker.depth import QueueDepths
from retold.ingest.extractor import FakeExtractor
from retold.ingest.reviewer import TableReviewer
from retold.models import ExtractionOutput, Principal, SearchRequest, SessionSummary
from retold.observability import ExtractionLag, SearchCounts, collect_metrics
from retold.testing import AGENT, World

CLAIM_TIMEOUT = timedelta(minutes=30)
QUIET = ExtractionOutput([], SessionSummary("They talked about the weather.", [], []))


def _extracted_after(world: World, session_id: str, wait_seconds: int) -> None:
    principal = Principal(AGENT, "aditya", session_id, None)
    world.rt.hooks.on_turn(principal, "user", "What a sunny day it is in Berlin today.")
    world.rt.hooks.on_session_end(principal)
    world.clock.advance(timedelta(seconds=wait_seconds))
    runner = world.rt.session_end.using(FakeExtractor(QUIET), TableReviewer())
    assert runner.run(session_id).outcome == "extracted"


def test_an_empty_store_reads_as_zeros(world: World) -> None:
    metrics = collect_metrics(world.rt.store, world.clock.now(), CLAIM_TIMEOUT)
    assert metrics.writes == {} and metrics.extractions == {} and metrics.searches_by_trigger == {}
    assert metrics.searches == SearchCounts(0, 0, None)
    assert metrics.extraction_lag == ExtractionLag(0, 0.0, None, None, None)
    assert metrics.sessions == {"open": 1, "pending": 0, "extracting": 0, "extracted": 0, "failed": 0,
                                "blocked": 0}
    assert metrics.queue is None


def test_counts_rates_and_lag_percentiles(world: World) -> None:
    world.say("user", "Please keep every answer short, I read them on my phone.")
    assert world.write(content="Aditya prefers short answers.", attribute="answer_style",
                       source_kind="user_statement", evidence="keep every answer short").error is None
    for query in ("short answers", "quantum chromodynamics lecture notes", "medieval siege engines"):
        world.rt.retriever.search(world.p, SearchRequest([query]))
    world.rt.flush_search_log()
    for index, wait in enumerate((40, 10, 30, 20)):
        _extracted_after(world, f"done-{index}", wait)
    queue = QueueDepths("redis://broker:6379/0", True, {"extraction": 4, "maintenance": 0})
    metrics = collect_metrics(world.rt.store, world.clock.now(), CLAIM_TIMEOUT, queue=queue)
    assert metrics.writes["created"] == 5  # the explicit write and four session summaries
    assert metrics.searches == SearchCounts(3, 2, 0.6667)
    assert metrics.searches_by_trigger == {"tool": metrics.searches}
    assert metrics.extractions == {"extracted": 4}
    assert metrics.sessions["extracted"] == 4 and metrics.sessions["open"] == 1
    # Nearest rank over 10, 20, 30, 40 s: the median is a wait some session really had.
    assert metrics.extraction_lag == ExtractionLag(4, 100.0, 20.0, 40.0, 40.0)
    assert metrics.queue is queue
    later = collect_metrics(world.rt.store, world.clock.now(), CLAIM_TIMEOUT,
                            since=world.clock.now() - timedelta(seconds=45))
    assert later.extractions == {"extracted": 2} and later.extraction_lag.count == 2
    assert later.searches.total == 0 and later.sessions == metrics.sessions  # states stay current
