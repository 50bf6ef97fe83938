"""ClaimLease: keeps an extraction claim alive while its holder works.

A worker renews its claim's heartbeat from a daemon thread three times per lease, so a
live worker waiting on a slow model keeps its session, and a dead one (whose thread died
with it) loses it one lease after its last heartbeat. A heartbeat that cannot be written
(the store busy with another process's long write) is tried again at the next beat: at
worst the lease lapses and another worker takes the session over, which the claim token
makes harmless (docs/decisions.md, "A claim is a lease").
"""

from __future__ import annotations

import logging
import threading
from datetime import timedelta

from retold.clock import Clock
from retold.store import Store

__all__ = ["ClaimLease"]

log = logging.getLogger(__name__)

BEATS_PER_LEASE = 3
"""Heartbeats per lease: two may be missed (a busy store, a paused process) without loss."""


class ClaimLease:
    """A context manager that renews the claim ``token`` on ``session_id`` every
    ``lease / BEATS_PER_LEASE`` until it exits. ``lost`` turns True once a renewal finds
    the claim taken over."""

    def __init__(self, store: Store, session_id: str, token: str, clock: Clock, lease: timedelta) -> None:
        self.store, self.session_id, self.token, self.clock = store, session_id, token, clock
        self.every_s = lease.total_seconds() / BEATS_PER_LEASE
        self.lost = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def renew(self) -> bool:
        """Write one heartbeat now; False once the claim is no longer this holder's."""
        try:
            held = self.store.renew_claim(self.session_id, self.token, self.clock.now())
        except Exception as exc:  # a missed beat is not fatal; the next one may land
            log.debug("heartbeat for session %s not written: %s", self.session_id, exc)
            return True
        if not held:
            self.lost = True
        return held

    def _beat(self) -> None:
        while not self._stop.wait(self.every_s):
            if not self.renew():
                log.info("the claim on session %s was taken over; its heartbeat stops", self.session_id)
                return

    def __enter__(self) -> ClaimLease:
        self._thread = threading.Thread(target=self._beat, name=f"retold-lease-{self.session_id}",
                                        daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
