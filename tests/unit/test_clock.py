"""Store timestamps: one fixed-width UTC text per instant, whatever zone a datetime is in."""

from __future__ import annotations

import multiprocessing
import uuid
from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from retold.clock import from_iso, new_id, to_iso


def test_every_zone_formats_the_same_instant_as_the_same_text() -> None:
    moment = datetime(2026, 3, 4, 5, 6, 7, 8, tzinfo=UTC)
    texts = {to_iso(moment), to_iso(moment.astimezone(timezone(timedelta(hours=-7)))),
             to_iso(from_iso("2026-03-04T05:06:07.000008Z")),
             to_iso(from_iso("2026-03-04T07:06:07.000008+02:00"))}
    assert texts == {"2026-03-04T05:06:07.000008Z"}
    assert to_iso(moment) == to_iso(moment)  # a second formatting of one value agrees


def test_the_repeated_hour_of_a_dst_change_gives_two_instants() -> None:
    # 01:30 happens twice in New York on 2026-11-01; the two datetimes compare equal,
    # yet they are an hour apart, and their texts must say so.
    zone = ZoneInfo("America/New_York")
    first = datetime(2026, 11, 1, 1, 30, tzinfo=zone, fold=0)
    second = datetime(2026, 11, 1, 1, 30, tzinfo=zone, fold=1)
    assert first == second
    assert to_iso(first) == "2026-11-01T05:30:00.000000Z"
    assert to_iso(second) == "2026-11-01T06:30:00.000000Z"


def test_a_naive_datetime_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        to_iso(datetime(2026, 1, 1))


def _random_tails(count: int) -> set[int]:
    """The random bits of ``count`` new ids (the time and counter bits left out)."""
    return {uuid.UUID(new_id()).int & ((1 << 62) - 1) for _ in range(count)}


def _child_tails(out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    out.put(_random_tails(200))


def test_a_forked_worker_never_repeats_its_parents_ids() -> None:
    # A worker pool forks children from a parent that has already made ids; each child must
    # draw its own random bits, or two children writing in the same millisecond could make
    # the same id.
    new_id()
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    children = [context.Process(target=_child_tails, args=(out,)) for _ in range(2)]
    for child in children:
        child.start()
    first, second = out.get(timeout=30), out.get(timeout=30)
    for child in children:
        child.join(30)
    mine = _random_tails(200)
    assert len(first) == len(second) == len(mine) == 200
    assert not first & second and not first & mine and not second & mine
