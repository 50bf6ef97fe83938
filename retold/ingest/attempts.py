"""A session's extraction attempts: the claim a run holds, how a run stops, and when the
session is tried again.

A run takes an ended session under a claim token of its own (:meth:`Attempts.claim`) and
keeps it with a lease: a daemon thread renews the claim's heartbeat three times per lease
(:meth:`Attempts.lease`), so a live worker waiting on a slow model keeps its session, and a
dead one (whose thread died with it) loses it one lease after its last heartbeat. A
heartbeat that cannot be written (the store busy with another process's long write) is
tried again at the next beat: at worst the lease lapses and another worker takes the
session over, which the claim token makes harmless (docs/decisions.md, "A claim is a
lease").

A model call that fails, an answer or stored stage that does not fit its schema, and a
write refused because another worker took the claim over each end the run with a
:class:`StageStop`, closed: nothing is applied. :meth:`Attempts.record` then settles what
follows. A failure counts an attempt and waits before the next one, twice as long after
each failure, until the attempt limit parks the session as failed (``retold retry`` or
``retold extract`` starts it again). A run that finds no hosted model is not a failure of
the session: it is blocked under the process's model setup, a fingerprint of what decides
whether a hosted model exists, and waits without retries until a process with another
setup (a key added, a model renamed) looks at it. A lost claim changes nothing: its new
holder decides. The ``recover`` sweep (:meth:`Attempts.enqueue_due`) hands the queue only
sessions that are due and not already waiting there, in bounded batches
(docs/decisions.md, "Failed extractions are retried, then parked").
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from retold.clock import Clock, new_id, to_iso
from retold.config import IngestionConfig, QueueConfig
from retold.hosted import HostedError
from retold.ingest.extractor import ExtractionOutputError
from retold.store import Store
from retold.store.claims import ClaimOutcome, ClaimTerms, ResumeStage
from retold.store.sessions import SessionRow, Stage

__all__ = [
    "BEATS_PER_LEASE", "MALFORMED", "Attempts", "Claim", "ConfigNotice", "ExtractionOutcome",
    "ModelSetup", "RecoverTerms", "RetryPolicy", "StageStop", "stable_digest",
]

log = logging.getLogger(__name__)

ExtractionOutcome = Literal[
    "extracted", "already_extracted", "not_configured", "failed", "parked", "deferred", "busy",
    "missing", "not_ended",
]
"""What one extraction run came to."""

_REFUSALS: dict[str, ExtractionOutcome] = {
    "missing": "missing", "open": "not_ended", "done": "already_extracted", "busy": "busy",
    "parked": "parked", "waiting": "deferred", "blocked": "not_configured"}
_STAGES: tuple[Stage, ...] = ("extract", "review")

BEATS_PER_LEASE = 3
"""Heartbeats per lease: two may be missed (a busy store, a paused process) without loss."""

MALFORMED: tuple[type[Exception], ...] = (
    ExtractionOutputError, KeyError, TypeError, ValueError, AttributeError)
"""What converting a model answer or a stored stage raises when it does not fit the schema."""


# -- how a run stops ------------------------------------------------------------------------------


class StageStop(Exception):
    """Ends a run without writing: ``not_configured``, ``failed`` or, when the claim was
    taken over, ``busy`` (kind + message)."""

    def __init__(self, outcome: ExtractionOutcome, stage: str, kind: str, message: str) -> None:
        super().__init__(f"{stage} {kind}: {message}")
        self.outcome, self.stage, self.kind, self.message = outcome, stage, kind, message

    @classmethod
    def model_failed(cls, stage: str, exc: Exception) -> StageStop:
        """A model call that raised: a provider's error by its kind (no hosted model is
        ``not_configured``), anything else closed by its type only."""
        if isinstance(exc, HostedError):
            outcome: ExtractionOutcome = "not_configured" if exc.kind == "not_configured" else "failed"
            return cls(outcome, stage, exc.kind, str(exc))
        return cls("failed", stage, "error", type(exc).__name__)

    @classmethod
    def malformed(cls, stage: str, exc: Exception) -> StageStop:
        """A model answer or persisted stage that does not fit the schema (one of :data:`MALFORMED`)."""
        return cls("failed", stage, "malformed", f"{type(exc).__name__}: {exc}"[:300])

    @classmethod
    def claim_lost(cls, stage: str) -> StageStop:
        """A write refused because the claim changed hands: the run applies nothing."""
        return cls("busy", stage, "claim_lost", "another worker took the claim over")

    @classmethod
    def of(cls, exc: Exception, stage: str = "run") -> StageStop:
        """``exc`` itself when it is a stop, else an unexpected error at ``stage``, by type only."""
        return exc if isinstance(exc, StageStop) else cls("failed", stage, "error", type(exc).__name__)


# -- the terms of a session's attempts ------------------------------------------------------------


def stable_digest(value: object) -> str:
    """A short digest of plain data that is the same in every process."""
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class RetryPolicy:
    """``max_attempts`` failed runs are allowed; the wait after the n-th is
    ``first_delay * 2**(n-1)``."""

    max_attempts: int
    first_delay: timedelta

    @classmethod
    def from_config(cls, cfg: IngestionConfig) -> RetryPolicy:
        return cls(cfg.extraction_max_attempts, timedelta(seconds=cfg.extraction_retry_seconds))

    def delay_after(self, attempts: int) -> timedelta | None:
        """The wait before the next attempt after ``attempts`` failures; None: park it."""
        if attempts >= self.max_attempts:
            return None
        factor: int = 2 ** max(attempts - 1, 0)
        return self.first_delay * factor


@dataclass(frozen=True)
class ModelSetup:
    """What decides whether this process has hosted models, without any secret:
    ``digest`` changes with it, and ``missing`` says what to set when none is configured."""

    digest: str = ""
    missing: str = "no hosted model is configured"

    def fingerprint(self, *model_names: str) -> str:
        """The setup together with the models a runner was actually given."""
        return stable_digest([self.digest, *model_names])


@dataclass(frozen=True)
class RecoverTerms:
    """How the ``recover`` sweep hands sessions to the queue: at most ``batch_size`` per
    sweep, and a session again only ``requeue_after`` its last hand-off."""

    batch_size: int = 100
    requeue_after: timedelta = timedelta(hours=2)

    @classmethod
    def from_config(cls, cfg: QueueConfig) -> RecoverTerms:
        return cls(cfg.recover_batch_size, timedelta(minutes=cfg.requeue_after_minutes))


class ConfigNotice:
    """Says once per process and model setup that extraction is not configured; the
    sessions that find it so are recorded as blocked, each with one event."""

    def __init__(self) -> None:
        self._told: set[str] = set()
        self._lock = threading.Lock()

    def tell(self, fingerprint: str, message: str) -> None:
        with self._lock:
            first = fingerprint not in self._told
            self._told.add(fingerprint)
        if first:
            log.warning("extraction is not configured: %s. Ended sessions wait, without retries,"
                        " until a process with another configuration looks at them (not logged"
                        " again by this process)", message)
        else:
            log.debug("extraction is not configured: %s", message)


# -- the claim and its lease ----------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    """What claiming a session came to: the run holds it under ``token`` unless
    ``refused`` says why it does not start (``reason`` the details); nothing is recorded
    for a refused run."""

    session_id: str
    token: str
    forced: bool
    refused: ExtractionOutcome | None = None
    reason: str | None = None


# -- the bookkeeping ------------------------------------------------------------------------------


class Attempts:
    """The claim, attempt and recovery bookkeeping of one session end: the claim
    terms from ``ingestion``, the retry policy, and ``setup_id``, the fingerprint of the
    model setup (with the names of its models) a not-configured run is blocked
    under."""

    def __init__(self, store: Store, clock: Clock, cfg: IngestionConfig, setup: ModelSetup,
                 recover: RecoverTerms, notice: ConfigNotice, model_names: list[str], *, actor: str) -> None:
        self.store, self.clock, self.setup, self.recover, self.notice = store, clock, setup, recover, notice
        self.terms = ClaimTerms(timedelta(minutes=cfg.extraction_claim_timeout_minutes),
                                timedelta(seconds=cfg.extraction_lease_seconds))
        self.policy = RetryPolicy.from_config(cfg)
        self.setup_id = setup.fingerprint(*model_names)
        self.actor = actor

    def claim(self, session_id: str, *, force: bool) -> Claim:
        """Claim the session now under a new token (see :meth:`Store.claim_session`). A
        claim that takes over a finished session (``force``) or a stale claim appends
        ``extraction.rerun`` or ``extraction.reclaimed``."""
        token = new_id()
        before = self.store.get_session(session_id)
        outcome = self.store.claim_session(session_id, self.clock.now(), self.terms, token=token,
                                           setup=self.setup_id, force=force)
        if before is None or outcome in _REFUSALS:
            refused = _REFUSALS.get(outcome, "missing")
            return Claim(session_id, token, force, refused, _refusal(outcome, before))
        if force and before.extracted_at is not None:
            self.store.append_event("extraction.rerun", self.actor, {
                "session_id": before.id, "previous_extracted_at": to_iso(before.extracted_at)})
        if outcome == "reclaimed":
            stale, beat = before.extraction_started_at, before.claim_heartbeat_at
            self.store.append_event("extraction.reclaimed", self.actor, {
                "session_id": before.id, "stale_claim": None if stale is None else to_iso(stale),
                "last_heartbeat": None if beat is None else to_iso(beat),
                "claim_timeout_minutes": round(self.terms.timeout.total_seconds() / 60),
                "lease_seconds": None if self.terms.lease is None else self.terms.lease.total_seconds()})
        return Claim(session_id, token, force)

    @contextmanager
    def lease(self, claim: Claim) -> Iterator[threading.Event]:
        """Keep ``claim`` while the block runs: a daemon thread renews its heartbeat every
        ``lease / BEATS_PER_LEASE``. The event it yields is set once a renewal finds the
        claim taken over (the heartbeat then stops)."""
        assert self.terms.lease is not None
        every_s = self.terms.lease.total_seconds() / BEATS_PER_LEASE
        done, lost = threading.Event(), threading.Event()
        thread = threading.Thread(target=self._beat, args=(claim, every_s, done, lost),
                                  name=f"retold-lease-{claim.session_id}", daemon=True)
        thread.start()
        try:
            yield lost
        finally:
            done.set()
            thread.join()

    def _beat(self, claim: Claim, every_s: float, done: threading.Event, lost: threading.Event) -> None:
        """The lease thread: one heartbeat per ``every_s`` until ``done`` or the claim is lost."""
        while not done.wait(every_s):
            try:
                held = self.store.renew_claim(claim.session_id, claim.token, self.clock.now())
            except Exception as exc:  # a missed beat is not fatal; the next one may land
                log.debug("heartbeat for session %s not written: %s", claim.session_id, exc)
                continue
            if not held:
                lost.set()
                log.info("the claim on session %s was taken over; its heartbeat stops", claim.session_id)
                return

    def record(self, claim: Claim, stop: StageStop, error: Exception) -> str:
        """Record a run that applied nothing: a failure counts an attempt (parking the
        session after the last), a missing model blocks it under this setup, a lost claim
        changes nothing. Appends ``extraction.<failed|not_configured|claim_lost>``, which
        names the failure but never transcript or candidate text; returns its id.

        A forced run is an operator's command whose caller reports the outcome, so it
        logs at info level instead of warning a second time."""
        session_id, stage, forced = claim.session_id, stop.stage, claim.forced
        persisted = [s for s in _STAGES if self.store.stage_row(session_id, s) is not None]
        payload: dict[str, Any] = {"session_id": session_id, "stage": stage, "kind": stop.kind,
                                   "message": stop.message, "persisted_stages": persisted}
        reason = f"{stage} {stop.kind}: {stop.message}"
        if stop.outcome == "busy":  # the claim's new holder decides what happens next
            log.warning("extraction of session %s stopped at %s: its claim was taken over", session_id, stage)
        elif stop.outcome == "not_configured":
            self.store.block_session(session_id, claim.token, self.setup_id, reason)
            if not forced:
                self.notice.tell(self.setup_id, stop.message)
        else:
            attempt = self.store.fail_attempt(session_id, claim.token, self.clock.now(), reason[:500],
                                              self.policy.delay_after)
            next_at = attempt and attempt.next_attempt_at
            payload.update(attempt=attempt and attempt.attempts, max_attempts=self.policy.max_attempts,
                           next_attempt_at=next_at and to_iso(next_at),
                           parked=bool(attempt and attempt.parked))
            log.log(logging.INFO if forced else logging.WARNING,
                    "extraction of session %s failed at %s (attempt %s of %d)%s", session_id, stage,
                    payload["attempt"], self.policy.max_attempts,
                    "; parked as failed until `retold retry`" if payload["parked"] else "",
                    exc_info=error if stop.kind == "error" else None)  # a bug, not a provider's failure
        kind_name = "claim_lost" if stop.outcome == "busy" else stop.outcome
        return self.store.append_event(f"extraction.{kind_name}", self.actor, payload)

    def pending(self) -> list[ResumeStage]:
        """Ended sessions still to extract and not under a live claim (waiting, parked and
        blocked ones included), each with the stage it resumes at."""
        return self.store.pending_sessions(self.clock.now(), self.terms)

    def enqueue_due(self, send: Callable[[str, Stage], None], broker: str | None = None,
                    waiting: frozenset[str] | None = None) -> list[str]:
        """Hand each due session (at most ``recover.batch_size``, oldest end first) to
        ``send`` with the stage it resumes at; return the ids handed over.

        ``broker`` names the running broker instance (:func:`retold.broker.identity.broker_instance`);
        when it is not the instance the last sweep reached, the broker restarted and may
        have forgotten what it held, so every queued session is due again at once (one
        ``queue.broker_restarted`` event).

        ``waiting`` holds the sessions whose messages wait in the queue now
        (:func:`retold.broker.waiting.waiting_sessions`). A session marked queued longer
        than a claim's lease, unclaimed and not among them was taken by a worker that died
        before it claimed it, and is due again at once (one ``queue.orphans_requeued``
        event); None, when the broker cannot say, leaves it to ``requeue_after``.

        Each is marked enqueued before it is sent, so a worker that takes it at once
        clears a mark that is already there. When ``send`` raises (the broker is down),
        the marks of that session and the rest are undone, so the next sweep tries them
        again, and the error propagates.
        """
        now = self.clock.now()
        if broker is not None:
            requeued = self.store.broker_seen(broker)
            if requeued:
                log.warning("the broker restarted (instance %s); %d queued sessions are handed over"
                            " again", broker, requeued)
                self.store.append_event("queue.broker_restarted", self.actor,
                                        {"instance": broker, "requeued": requeued})
        due = self.store.due_sessions(now, self.terms, setup=self.setup_id,
                                      enqueued_before=now - self.recover.requeue_after,
                                      limit=self.recover.batch_size)
        if waiting is not None and len(due) < self.recover.batch_size:
            grace = self.terms.lease or self.terms.timeout
            chosen = {session_id for session_id, _ in due}
            orphans = [(session_id, stage) for session_id, stage in self.store.due_sessions(
                now, self.terms, setup=self.setup_id, enqueued_before=now - grace,
                limit=self.recover.batch_size) if session_id not in chosen and session_id not in waiting]
            orphans = orphans[:self.recover.batch_size - len(due)]
            if orphans:
                log.warning("%d queued sessions have no message in the queue and no worker's claim;"
                            " they are handed over again", len(orphans))
                self.store.append_event("queue.orphans_requeued", self.actor,
                                        {"sessions": [session_id for session_id, _ in orphans]})
                due += orphans
        ids = [session_id for session_id, _ in due]
        self.store.mark_enqueued(ids, now)
        for index, (session_id, stage) in enumerate(due):
            try:
                send(session_id, stage)
            except Exception:
                self.store.unmark_enqueued(ids[index:], now)
                raise
        return ids


def _refusal(claim: ClaimOutcome, before: SessionRow | None) -> str:
    """Why a run did not start, from the claim's answer and the row read before it."""
    if before is not None and claim == "parked":
        return f"parked after {before.attempts} failed attempts; last: {before.last_error}"
    if before is not None and claim == "blocked" and before.last_error:
        return before.last_error
    if before is not None and claim == "waiting" and before.next_attempt_at is not None:
        return f"next attempt due at {to_iso(before.next_attempt_at)}"
    return f"claim {claim}"
