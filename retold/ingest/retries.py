"""When a session's extraction is tried again.

A failed run counts an attempt and waits before the next one, twice as long after each
failure, until the attempt limit parks the session as failed (``retold retry`` or
``retold extract`` starts it again). A run that finds no hosted model is not a failure of
the session: it is blocked under the process's model setup, a fingerprint of what decides
whether a hosted model exists, and waits without retries until a process with another
setup (a key added, a model renamed) looks at it. The ``recover`` sweep hands the queue
only sessions that are due and not already waiting there, in bounded batches
(docs/decisions.md, "Failed extractions are retried, then parked").
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from retold.clock import Clock, to_iso
from retold.config import IngestionConfig, QueueConfig
from retold.ingest.lease import ClaimLease
from retold.store import Store
from retold.store.claims import ClaimOutcome, ClaimTerms, ResumeStage
from retold.store.sessions import SessionRow, Stage

__all__ = ["Attempts", "ConfigNotice", "ModelSetup", "RecoverTerms", "RetryPolicy", "refusal_reason",
           "stable_digest"]

log = logging.getLogger(__name__)

_STAGES: tuple[Stage, ...] = ("extract", "review")


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


class Attempts:
    """The claim, attempt and recovery bookkeeping of one extraction runner: the claim
    terms from ``ingestion``, the retry policy, and ``setup_id``, the fingerprint of the
    model setup (with the names of the runner's models) a not-configured run is blocked
    under."""

    def __init__(self, store: Store, clock: Clock, cfg: IngestionConfig, setup: ModelSetup,
                 recover: RecoverTerms, notice: ConfigNotice, model_names: list[str], *, actor: str) -> None:
        self.store, self.clock, self.setup, self.recover, self.notice = store, clock, setup, recover, notice
        self.terms = ClaimTerms(timedelta(minutes=cfg.extraction_claim_timeout_minutes),
                                timedelta(seconds=cfg.extraction_lease_seconds))
        self.policy = RetryPolicy.from_config(cfg)
        self.setup_id = setup.fingerprint(*model_names)
        self.actor = actor

    def claim(self, session_id: str, token: str, *, force: bool) -> ClaimOutcome:
        """Claim the session now under ``token`` (see :meth:`Store.claim_session`)."""
        return self.store.claim_session(session_id, self.clock.now(), self.terms, token=token,
                                        setup=self.setup_id, force=force)

    def note_claim(self, claim: ClaimOutcome, before: SessionRow, *, force: bool) -> None:
        """Append what a claim took over: a finished session's re-run
        (``extraction.rerun``) or a stale claim (``extraction.reclaimed``)."""
        if force and before.extracted_at is not None:
            self.store.append_event("extraction.rerun", self.actor, {
                "session_id": before.id, "previous_extracted_at": to_iso(before.extracted_at)})
        if claim == "reclaimed":
            stale, beat = before.extraction_started_at, before.claim_heartbeat_at
            self.store.append_event("extraction.reclaimed", self.actor, {
                "session_id": before.id, "stale_claim": None if stale is None else to_iso(stale),
                "last_heartbeat": None if beat is None else to_iso(beat),
                "claim_timeout_minutes": round(self.terms.timeout.total_seconds() / 60),
                "lease_seconds": None if self.terms.lease is None else self.terms.lease.total_seconds()})

    def lease(self, session_id: str, token: str) -> ClaimLease:
        """The heartbeat that keeps the claim ``token`` while a run works."""
        assert self.terms.lease is not None
        return ClaimLease(self.store, session_id, token, self.clock, self.terms.lease)

    def record(self, session_id: str, token: str, outcome: str, stage: str, kind: str, message: str,
               error: Exception, *, forced: bool = False) -> str:
        """Record a run that applied nothing: a failure counts an attempt (parking the
        session after the last), a missing model blocks it under this setup, a lost claim
        changes nothing. Appends ``extraction.<failed|not_configured|claim_lost>``, which
        names the failure but never transcript or candidate text; returns its id.

        A ``forced`` run is an operator's command whose caller reports the outcome, so it
        logs at info level instead of warning a second time."""
        persisted = [s for s in _STAGES if self.store.stage_row(session_id, s) is not None]
        payload: dict[str, Any] = {"session_id": session_id, "stage": stage, "kind": kind,
                                   "message": message, "persisted_stages": persisted}
        reason = f"{stage} {kind}: {message}"
        if outcome == "busy":  # the claim's new holder decides what happens next
            log.warning("extraction of session %s stopped at %s: its claim was taken over", session_id, stage)
        elif outcome == "not_configured":
            self.store.block_session(session_id, token, self.setup_id, reason)
            if not forced:
                self.notice.tell(self.setup_id, message)
        else:
            attempt = self.store.fail_attempt(session_id, token, self.clock.now(), reason[:500],
                                              self.policy.delay_after)
            next_at = attempt and attempt.next_attempt_at
            payload.update(attempt=attempt and attempt.attempts, max_attempts=self.policy.max_attempts,
                           next_attempt_at=next_at and to_iso(next_at),
                           parked=bool(attempt and attempt.parked))
            log.log(logging.INFO if forced else logging.WARNING,
                    "extraction of session %s failed at %s (attempt %s of %d)%s", session_id, stage,
                    payload["attempt"], self.policy.max_attempts,
                    "; parked as failed until `retold retry`" if payload["parked"] else "",
                    exc_info=error if kind == "error" else None)  # a bug, not a provider's failure
        kind_name = "claim_lost" if outcome == "busy" else outcome
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


def refusal_reason(claim: ClaimOutcome, before: SessionRow | None) -> str:
    """Why a run did not start, from the claim's answer and the row read before it."""
    if before is not None and claim == "parked":
        return f"parked after {before.attempts} failed attempts; last: {before.last_error}"
    if before is not None and claim == "blocked" and before.last_error:
        return before.last_error
    if before is not None and claim == "waiting" and before.next_attempt_at is not None:
        return f"next attempt due at {to_iso(before.next_attempt_at)}"
    return f"claim {claim}"
