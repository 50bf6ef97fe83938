"""QueueOutage: what an agent remembers about a queue that refuses ended sessions.

A broker that is down turns every session end into a failed publish. Reporting each one
would bury the first warning, and trying each one would cost every session end the
publish timeout, so the first failure opens an outage: later failures are counted, not
logged, and for ``retry_after`` no publish is attempted at all. Nothing is lost either
way, because an ended session stays pending in SQLite until the ``recover`` task enqueues
it (docs/decisions.md, "Publishing never blocks an agent").
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime, timedelta

from retold.clock import Clock

__all__ = ["RETRY_AFTER", "OutageEnd", "QueueOutage"]

RETRY_AFTER = timedelta(seconds=30)
"""How long after a failed publish the queue is left alone."""


@dataclass(frozen=True, slots=True)
class OutageEnd:
    """An outage that just ended: when it began and how many sessions it left pending."""

    since: datetime
    left_pending: int


class QueueOutage:
    """The queue's state as this process has seen it; safe to share between threads."""

    def __init__(self, clock: Clock, retry_after: timedelta = RETRY_AFTER) -> None:
        self._clock = clock
        self._retry_after = retry_after
        self._lock = threading.Lock()
        self._since: datetime | None = None
        self._last_failure: datetime | None = None
        self._left_pending = 0

    @property
    def down(self) -> bool:
        """True from a failed publish until the next one succeeds."""
        with self._lock:
            return self._since is not None

    def should_try(self) -> bool:
        """Whether to publish now; False (and the session counted as left pending) while
        the last failure is more recent than ``retry_after``."""
        with self._lock:
            last = self._last_failure
            if last is None or self._clock.now() - last >= self._retry_after:
                return True
            self._left_pending += 1
            return False

    def failed(self) -> bool:
        """Record a failed publish; True when it opens an outage (the one to report)."""
        now = self._clock.now()
        with self._lock:
            first = self._since is None
            if first:
                self._since = now
            self._last_failure = now
            self._left_pending += 1
            return first

    def succeeded(self) -> OutageEnd | None:
        """Record a successful publish; the outage it ends, if one was open."""
        with self._lock:
            since, left = self._since, self._left_pending
            self._since, self._last_failure, self._left_pending = None, None, 0
        return None if since is None else OutageEnd(since, left)
