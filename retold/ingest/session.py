"""The session buffer and the adapter's ingestion hooks.

The adapter stores every turn as it arrives, so ``memory_write`` and the extractor see
the same transcript. Ending a session schedules extraction through an
:class:`ExtractionScheduler`; the queue only ever carries the session id (all state
lives in SQLite), and a queue failure never fails the agent: a beat task re-enqueues
ended sessions that were never extracted. A session whose framework never signals its end
is ended by the idle sweep (:meth:`SessionHooks.end_idle`). A store that cannot take the
hooks' writes (full, locked past the wait, read-only, damaged) does not fail the agent
either: the turn is left out, logged once per outage and counted, and the first turn the
store takes again records how many were left out. See ``docs/architecture.md``, "The
session path".
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Protocol, get_args

from retold.clock import Clock
from retold.errors import (
    RetoldError,
    StoreCorruptError,
    StoreFullError,
    StoreLockedError,
    StoreReadOnlyError,
)
from retold.ingest.outage import RETRY_AFTER, QueueOutage
from retold.models import Principal, Role, Turn
from retold.store import Store

__all__ = ["ExtractionScheduler", "InProcessScheduler", "SessionBuffer", "SessionHooks", "is_deferred"]

log = logging.getLogger(__name__)

_ROLES: tuple[str, ...] = get_args(Role)

# The store conditions a hook rides out: the agent's conversation matters more than its
# transcript, and the tools already answer these as store_unavailable.
_UNAVAILABLE = (StoreFullError, StoreLockedError, StoreReadOnlyError, StoreCorruptError)

# A derived session id ends in ``~<n>``: <session_id>~2, ~3, ...
_SUFFIX = re.compile(r"^(?P<base>.+)~(?P<n>\d+)$")


class ExtractionScheduler(Protocol):
    """Where ended sessions go to be extracted in the background.

    A queue sets a class attribute ``deferred = True`` (see :func:`is_deferred`): a
    session it accepted waits there for a worker, so it is marked enqueued and the
    ``recover`` sweep leaves it alone. Without it the scheduler is taken to run or merely
    record the session.
    """

    def schedule(self, session_id: str) -> None:
        """Enqueue extraction of one ended session; may raise if the queue is down."""
        ...


def is_deferred(scheduler: ExtractionScheduler) -> bool:
    """Whether ``scheduler`` hands sessions to a queue for a worker to take later."""
    return bool(getattr(scheduler, "deferred", False))


class InProcessScheduler:
    """A scheduler with no queue: records each id and optionally runs it right away.

    ``queue.scheduler: in_process`` runs extraction with it; tests use it without ``run``
    to record what was scheduled and run nothing.
    """

    deferred = False

    def __init__(self, run: Callable[[str], object] | None = None) -> None:
        self.scheduled: list[str] = []
        self._run = run

    def schedule(self, session_id: str) -> None:
        """Record ``session_id`` and call the injected ``run`` with it, if any."""
        self.scheduled.append(session_id)
        if self._run is not None:
            self._run(session_id)


class SessionBuffer:
    """The short-term transcript read by evidence validation and extraction.

    It is not the retrieval index: it reads the ``session_turns`` rows of the store.
    """

    def __init__(self, store: Store) -> None:
        self._store = store

    def turns(self, session_id: str) -> list[Turn]:
        """Every turn of the session in order (empty for an unknown session)."""
        return self._store.turns(session_id)


def _session_id(principal: Principal) -> str:
    if not principal.session_id:
        raise ValueError("principal.session_id is required for session hooks")
    return principal.session_id


class SessionHooks:
    """``on_session_start`` / ``on_turn`` / ``on_session_end`` for adapters."""

    def __init__(
        self,
        store: Store,
        scheduler: ExtractionScheduler,
        idle_timeout: timedelta,
        clock: Clock | None = None,
        *,
        queue_retry_after: timedelta = RETRY_AFTER,
    ) -> None:
        if idle_timeout <= timedelta(0):
            raise ValueError("idle_timeout must be positive")
        self.store = store
        self.scheduler = scheduler
        self.idle_timeout = idle_timeout
        self.clock: Clock = clock or store.clock
        self.outage = QueueOutage(self.clock, queue_retry_after)
        self._unrecorded_lock = threading.Lock()
        # session id -> turns the store could not take since its last recorded one
        self._unrecorded: dict[str, int] = {}

    @property
    def unrecorded(self) -> dict[str, int]:
        """The turns each session lost to a store that could not take them, not yet
        noted in the store (empty while the store takes every write)."""
        with self._unrecorded_lock:
            return dict(self._unrecorded)

    def on_session_start(self, principal: Principal) -> None:
        """Create the session tied to this principal; calling it again changes nothing."""
        session_id = _session_id(principal)
        try:
            self._start(principal, session_id, self.clock.now())
        except _UNAVAILABLE as exc:
            self._not_recorded("the session start", session_id, exc, turns=0)

    def on_turn(self, principal: Principal, role: str, content: str) -> Principal:
        """Append one numbered turn and return the principal to keep using.

        Tool turns carry the tool's result text, stored as given. An unknown session is
        started implicitly. When the session has been idle longer than ``idle_timeout``
        (or was already ended), the turn goes to a derived session ``<base>~n`` instead
        and the returned principal names it.
        """
        session_id = _session_id(principal)
        if role not in _ROLES:
            raise ValueError(f"role must be one of {', '.join(_ROLES)}, got {role!r}")
        try:
            kept = self._append(principal, session_id, role, content)
        except _UNAVAILABLE as exc:
            self._not_recorded("a turn", session_id, exc, turns=1)
            return principal
        self._note_unrecorded(principal, session_id)
        return kept

    def _append(self, principal: Principal, session_id: str, role: str, content: str) -> Principal:
        """:meth:`on_turn`'s write: the turn, after an idle split where one is due."""
        now = self.clock.now()
        # The split decision and the new session's first turn are one transaction, so a
        # second writer on the same file sees either the old session open or the split.
        with self.store.atomic():
            session = self.store.get_session(session_id)
            if session is None:
                self._start(principal, session_id, now)
                self.store.append_turn(session_id, role, content, now)
                return principal
            last = self.store.last_turn_at(session_id) or session.started_at
            idle = now - last
            if session.ended_at is None and idle <= self.idle_timeout:
                self.store.append_turn(session_id, role, content, now)
                return principal
            ended_here = self.store.end_session(session_id, now)
            new_id = self._next_session_id(session_id)
            self.store.create_session(
                new_id, principal.agent_id, principal.user_id, principal.project_id, now
            )
            self.store.append_event(
                "session.split",
                principal.agent_id,
                {
                    "from": session_id,
                    "to": new_id,
                    "idle_minutes": round(idle.total_seconds() / 60, 2),
                    "reason": "idle" if ended_here else "already_ended",
                },
            )
            self.store.append_turn(new_id, role, content, now)
        # Scheduling happens after the commit: the queue is never called inside a
        # transaction, and a session ended earlier was scheduled by whoever ended it.
        if ended_here:
            self._schedule(session_id)
        return replace(principal, session_id=new_id)

    def on_session_end(self, principal: Principal) -> None:
        """Mark the session ended and schedule its extraction, once.

        A second call, or a call for a session already ended by an idle split, schedules
        nothing. A scheduler failure is logged (once per outage), never raised: the
        ``recover`` task enqueues the session later.
        """
        session_id = _session_id(principal)
        try:
            ended = self.store.end_session(session_id, self.clock.now())
        except _UNAVAILABLE as exc:  # still open, so the idle sweep ends it later
            self._not_recorded("the session end", session_id, exc, turns=0)
            return
        if ended:
            self._schedule(session_id)

    def end_idle(self) -> list[str]:
        """End every open session idle longer than ``idle_timeout`` and schedule its
        extraction; return the ids ended, longest idle first.

        For a framework that never signals a session's end. A session that gets a turn
        while this runs either keeps it (and stays open) or is ended first (and the turn
        starts ``<id>~n``), because both sides decide under the store's write lock. Once a
        publish fails, the rest are left pending for ``recover`` instead of each waiting
        on the broker.
        """
        now = self.clock.now()
        with self.store.atomic():
            idle = self.store.idle_sessions(now - self.idle_timeout)
            for session in idle:
                self.store.end_session(session.id, now)
                self.store.append_event("session.ended_idle", session.agent_id, {
                    "session": session.id,
                    "idle_minutes": round((now - session.last_active_at).total_seconds() / 60, 2),
                })
        ended = [session.id for session in idle]
        for index, session_id in enumerate(ended):
            if not self._schedule(session_id):
                log.debug("%d idle sessions left pending for the recover task", len(ended) - index - 1)
                break
        return ended

    def schedule(self, session_id: str) -> bool:
        """Hand one ended session to the scheduler now (``retold retry`` does); False when
        the queue refused it and it stays pending for the ``recover`` sweep."""
        return self._schedule(session_id)

    # -- internals ------------------------------------------------------------------------

    def _not_recorded(self, what: str, session_id: str, exc: RetoldError, *, turns: int) -> None:
        """Count a write the store refused; warn only for the first of an outage."""
        with self._unrecorded_lock:
            first = not self._unrecorded
            self._unrecorded[session_id] = self._unrecorded.get(session_id, 0) + turns
        if first:
            log.warning("the store cannot take session writes (%s): %s of session %s was not "
                        "recorded; the agent goes on, and what else is left out is counted "
                        "until the store takes a turn again", exc, what, session_id)

    def _note_unrecorded(self, principal: Principal, session_id: str) -> None:
        """After a recorded turn: note in the store how many turns of this session were
        left out, so its transcript shows the gap and extraction is not misled by it."""
        with self._unrecorded_lock:
            lost = self._unrecorded.pop(session_id, None)
            ended = not self._unrecorded
        if lost is None:
            return
        try:
            self.store.append_event("session.turns_unrecorded", principal.agent_id,
                                    {"session": session_id, "turns": lost})
        except _UNAVAILABLE:
            with self._unrecorded_lock:
                self._unrecorded[session_id] = self._unrecorded.get(session_id, 0) + lost
            return
        if ended:
            log.info("the store takes session writes again; %d turns of session %s were not recorded",
                     lost, session_id)

    def _start(self, principal: Principal, session_id: str, at: datetime) -> None:
        self.store.create_session(
            session_id, principal.agent_id, principal.user_id, principal.project_id, at
        )

    def _next_session_id(self, session_id: str) -> str:
        """``<base>~(n+1)`` for ``<base>~n`` (``~2`` for an unsuffixed id), skipping ids
        whose session row already exists."""
        match = _SUFFIX.match(session_id)
        base, number = (match["base"], int(match["n"]) + 1) if match else (session_id, 2)
        while self.store.get_session(f"{base}~{number}") is not None:
            number += 1
        return f"{base}~{number}"

    def _schedule(self, session_id: str) -> bool:
        """Hand one ended session to the scheduler; False when it stays pending instead."""
        if not self.outage.should_try():
            log.debug("extraction queue down: session %s left pending for the recover task", session_id)
            return False
        queued_at = self._mark_enqueued(session_id)
        try:
            self.scheduler.schedule(session_id)
        except Exception as exc:  # the agent is never failed by the queue
            if queued_at is not None:
                self.store.unmark_enqueued([session_id], queued_at)
            if self.outage.failed():
                log.warning(
                    "could not schedule extraction of session %s (%s: %s); sessions ended while"
                    " the queue is down stay pending and the recover task enqueues them (not"
                    " logged again until the queue accepts a session)",
                    session_id, type(exc).__name__, exc,
                )
            else:
                log.debug("could not schedule extraction of session %s (%s)", session_id, exc)
            return False
        if (ended := self.outage.succeeded()) is not None:
            log.info(
                "the extraction queue accepts sessions again (down since %s); %d sessions"
                " ended meanwhile are left to the recover task",
                ended.since.isoformat(timespec="seconds"), ended.left_pending,
            )
        return True

    def _mark_enqueued(self, session_id: str) -> datetime | None:
        """Mark a session handed to a queue before publishing it, so a worker that takes
        it at once clears a mark that is already there; None when nothing was marked."""
        if not is_deferred(self.scheduler):
            return None
        now = self.clock.now()
        try:
            self.store.mark_enqueued([session_id], now)
        except RetoldError as exc:  # unmarked, recover may send it twice: harmless
            log.debug("session %s not marked enqueued: %s", session_id, exc)
            return None
        return now
