"""Two agents writing at once, each through its own runtime on one store.

On PostgreSQL a write decides before it takes the store's write lock; these tests hold
one writer inside its decision (its judge waits) while the other commits, and check that
the first decides again when the other write touched what it read, and not otherwise.
On SQLite the first writer holds the lock throughout, so the second simply waits.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta

import pytest

from retold.ingest.equivalence import FakeJudge, Verdict
from retold.ingest.ingestor import WriteRequest, WriteResult
from retold.ingest.session import InProcessScheduler
from retold.runtime import Runtime, build_runtime
from retold.testing import ADITYA, T0, World

INCUMBENT = "Aditya prefers concise technical explanations."
FIRST = "Aditya prefers detailed architecture explanations."
SECOND = "Aditya prefers explanations as bullet points."


class HeldJudge(FakeJudge):
    """A judge whose first call waits until the test lets it go: its writer is then
    inside its decision, before the store's write lock on PostgreSQL."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def judge_many(self, pairs: list[tuple[str, str]]) -> list[Verdict]:
        if not self.entered.is_set():
            self.entered.set()
            self.release.wait(5)
        return super().judge_many(pairs)


@pytest.fixture
def held(world: World) -> Iterator[tuple[Runtime, HeldJudge]]:
    judge = HeldJudge()
    rt = build_runtime(world.rt.config, clock=world.clock, embedder=world.embedder, judge=judge,
                       scheduler=InProcessScheduler(), environ={})
    yield rt, judge
    rt.close()


def _race(world: World, held: tuple[Runtime, HeldJudge], first: WriteRequest,
          second: WriteRequest) -> tuple[WriteResult, WriteResult]:
    """``first`` through the held runtime, ``second`` through the world's runtime while the
    first is deciding; on SQLite the second waits for the first's lock."""
    rt, judge = held
    results: dict[str, WriteResult] = {}
    world.clock.set(T0 + timedelta(minutes=1))
    one = threading.Thread(target=lambda: results.update(first=rt.ingestor.write(world.p, first)))
    one.start()
    assert judge.entered.wait(5)
    world.clock.set(T0 + timedelta(minutes=2))
    two = threading.Thread(target=lambda: results.update(second=world.rt.ingestor.write(world.p, second)))
    two.start()
    two.join(1.0)  # PostgreSQL: done by now; SQLite: still waiting for the first's lock
    judge.release.set()
    one.join(10)
    two.join(10)
    return results["first"], results["second"]


def _live(world: World, attribute: str) -> list[str]:
    return [r.id for r in world.rt.store.find_records(scopes=[ADITYA], statuses=("provisional", "confirmed"))
            if r.attribute == attribute]


def test_a_supersession_written_while_another_decides_is_never_lost(
    world: World, held: tuple[Runtime, HeldJudge], backend: str,
) -> None:
    incumbent = world.write(content=INCUMBENT, attribute="explanation_style")
    first, second = _race(world, held, WriteRequest("semantic", FIRST, "explanation_style"),
                          WriteRequest("semantic", SECOND, "explanation_style"))
    assert first.ok and second.ok
    # Exactly one current fact, and the incumbent was superseded once, not twice.
    assert _live(world, "explanation_style") == [second.record_id]
    assert len(world.rt.store.find_records(supersedes_id=incumbent.record_id)) == 1
    (event,) = [e for e in world.events("record.created") if e["record_id"] == first.record_id]
    if backend == "postgres":
        # The second write committed first; the first saw it and decided again: as the
        # older statement it is history on arrival.
        assert second.outcome == f"superseded:{incumbent.record_id}"
        assert first.outcome == f"superseded_on_arrival:{second.record_id}"
        assert event["payload"]["decided_again"] is True
    else:
        assert first.outcome == f"superseded:{incumbent.record_id}"
        assert second.outcome == f"superseded:{first.record_id}"
        assert "decided_again" not in event["payload"]


def test_a_write_about_something_else_does_not_make_a_decision_again(
    world: World, held: tuple[Runtime, HeldJudge],
) -> None:
    world.write(content=INCUMBENT, attribute="explanation_style")
    first, second = _race(world, held, WriteRequest("semantic", FIRST, "explanation_style"),
                          WriteRequest("semantic", "Aditya's editor is neovim.", "editor"))
    assert first.outcome.startswith("superseded:") and second.outcome == "created"
    (event,) = [e for e in world.events("record.created") if e["record_id"] == first.record_id]
    assert "decided_again" not in event["payload"]
    assert sorted(_live(world, "explanation_style") + _live(world, "editor")) == sorted(
        [first.record_id, second.record_id])
