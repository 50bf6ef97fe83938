"""Time as Retold keeps it: the injectable clock, the store's timestamp text, stage timers,
and UUIDv7 ids, which sort by the time they were made."""

from __future__ import annotations

import functools
import os
import random
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol

__all__ = [
    "Clock",
    "ManualClock",
    "SystemClock",
    "Timer",
    "from_iso",
    "new_id",
    "to_iso",
]

_id_lock = threading.Lock()
_last_ms = 0
_seq = 0
# The ids' random bits come from a generator seeded from the system's entropy by the
# first id a process makes, and again by the first in a forked child (which would
# otherwise repeat its parent's sequence). The bits keep ids from different processes
# apart; nothing relies on them being unguessable. Asking the system for them on every
# id released the interpreter lock in the middle of each search, and the search then
# waited for whichever thread took the lock (an encoder, the search-log writer) to hand
# it back.
_bits = random.Random(0)
_bits_pid = -1  # the process that seeded _bits


def new_id() -> str:
    """Return a new UUIDv7 string; ids sort by creation time.

    Within one millisecond a 12-bit counter keeps ids from this process strictly
    increasing, so ``ORDER BY id`` is creation order even for bursts of writes.
    """
    global _last_ms, _seq, _bits_pid
    with _id_lock:
        if _bits_pid != os.getpid():
            _bits.seed(os.urandom(32))
            _bits_pid = os.getpid()
        ms = time.time_ns() // 1_000_000
        if ms <= _last_ms:
            _seq += 1
            if _seq > 0xFFF:  # counter exhausted: borrow the next millisecond
                _last_ms += 1
                _seq = 0
            ms = _last_ms
        else:
            _last_ms, _seq = ms, 0
        seq = _seq
        rand = _bits.getrandbits(62)
    value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | seq << 64 | 0b10 << 62 | rand
    return str(uuid.UUID(int=value))


def to_iso(moment: datetime) -> str:
    """Format a datetime as the store's fixed-width ISO 8601 UTC text.

    Fixed width (microseconds, ``Z``) makes string comparison in SQL equal to time
    comparison, which the eligibility filter's expiry and time-window checks rely on.
    """
    if moment.tzinfo is UTC:
        return _utc_text(moment)
    if moment.tzinfo is None:
        raise ValueError("timestamps must be timezone-aware")
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@functools.lru_cache(maxsize=16384)
def _utc_text(moment: datetime) -> str:
    # Remembered for UTC datetimes only (what from_iso returns): a search formats the same
    # records' timestamps again and again. Two UTC datetimes are equal only when they are
    # the same instant, so a remembered text is always the right one; in other zones two
    # equal datetimes can differ by their fold, so those are formatted every time.
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@functools.lru_cache(maxsize=16384)
def from_iso(text: str) -> datetime:
    """Parse a stored timestamp (or any ISO 8601 string with an offset) as UTC.

    Remembered per text (datetimes are immutable): searches read the same records'
    timestamps again and again.
    """
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


class Clock(Protocol):
    """Where every component reads the current time, so tests can move it."""

    def now(self) -> datetime: ...


class SystemClock:
    """The wall clock, in UTC."""

    def now(self) -> datetime:
        return datetime.now(UTC)


class ManualClock:
    """A clock that only moves when a test moves it."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)
        if self._now.tzinfo is None:
            raise ValueError("ManualClock needs a timezone-aware start")

    def now(self) -> datetime:
        return self._now

    def set(self, moment: datetime) -> None:
        self._now = moment

    def advance(self, delta: timedelta | None = None, **parts: float) -> datetime:
        """Move forward by ``delta`` or by ``timedelta(**parts)``; return the new time."""
        self._now += delta if delta is not None else timedelta(**parts)
        return self._now


class Timer:
    """Named stage timings in milliseconds, recorded with each write and search.

    ``mark(name)`` closes the stage that began at the previous mark; marking the
    same name twice adds up, so a stage run once per query reports its total.
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._start = clock()
        self._last = self._start
        self._marks: dict[str, float] = {}

    def mark(self, name: str) -> float:
        """Record the time since the previous mark under ``name``; return it in ms."""
        now = self._clock()
        spent = (now - self._last) * 1000.0
        self._marks[name] = self._marks.get(name, 0.0) + spent
        self._last = now
        return spent

    def record(self, name: str, ms: float) -> None:
        """Record ``ms`` under ``name`` for work timed elsewhere (another thread), without
        closing the current stage."""
        self._marks[name] = self._marks.get(name, 0.0) + ms

    def skip(self, name: str) -> None:
        """Record a stage that did not run, as 0 ms, without closing the current one."""
        self._marks.setdefault(name, 0.0)

    def total_ms(self) -> float:
        return (self._clock() - self._start) * 1000.0

    def as_dict(self) -> dict[str, float]:
        """Every mark in order, plus ``total``, rounded to microseconds."""
        out = {name: round(ms, 3) for name, ms in self._marks.items()}
        out["total"] = round(self.total_ms(), 3)
        return out
