"""Extraction claims and attempts: who extracts a session now, and when it is tried again.

A worker claims an ended session under a token of its own before extracting it. The
claim is live while both hold: it was taken less than ``timeout`` ago (a cap on one run,
whatever its heartbeats say), and its holder's last heartbeat is younger than ``lease``
(a dead worker stops beating, so its session is free again one lease later). Every
decision runs under one ``BEGIN IMMEDIATE``, so two workers never both win a claim, and
a holder whose lease lapsed finds its token gone when it saves a stage or applies.

A run that applies nothing ends one of two ways: a failure counts an attempt and sets
when the next one is due (or parks the session after the last allowed attempt), and a
missing hosted model blocks the session under that model setup until the setup changes.
``extraction_enqueued_at`` remembers the last hand-off to the queue, so the ``recover``
sweep does not publish a session that is still waiting there (docs/decisions.md,
"Failed extractions are retried, then parked").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from retold.clock import to_iso
from retold.store.base import StoreBase, marks
from retold.store.upserts import Upsert

__all__ = ["ClaimOutcome", "ClaimTerms", "ClaimsMixin", "FailedAttempt", "ResumeStage"]

_PUT_META = Upsert("store_meta", ("key", "value"), update=("value",))

ClaimOutcome = Literal[
    "claimed", "reclaimed", "busy", "done", "missing", "open", "parked", "waiting", "blocked"]
ResumeStage = tuple[str, Literal["extract", "review"]]
"""A session id with the stage its extraction resumes at."""

_CLEAR_CLAIM = "claim_token = NULL, claim_heartbeat_at = NULL, extraction_started_at = NULL"
_CLEAR_ATTEMPTS = ("extraction_attempts = 0, extraction_last_error = NULL,"
                   " extraction_next_attempt_at = NULL, extraction_failed_at = NULL,"
                   " extraction_blocked_by = NULL")
_NOT_LIVE = ("(s.extraction_started_at IS NULL OR s.extraction_started_at < ?"
             " OR coalesce(s.claim_heartbeat_at, s.extraction_started_at) < ?)")
_RESUMES_AT_REVIEW = ("EXISTS (SELECT 1 FROM extraction_stages x"
                      " WHERE x.session_id = s.id AND x.stage = 'extract')")


@dataclass(frozen=True)
class ClaimTerms:
    """How long a claim lives: ``timeout`` after it was taken, and ``lease`` after its
    holder's last heartbeat (None: no heartbeat is expected, the timeout alone counts)."""

    timeout: timedelta
    lease: timedelta | None = None

    def cutoffs(self, now: datetime) -> tuple[str, str]:
        """The stored times before which a claim's start, and its last heartbeat, are stale."""
        return to_iso(now - self.timeout), to_iso(now - (self.lease or self.timeout))


@dataclass(frozen=True)
class FailedAttempt:
    """A failed run as counted: attempts so far, and when the next is due (None: parked)."""

    attempts: int
    next_attempt_at: datetime | None

    @property
    def parked(self) -> bool:
        """True when no automatic attempt follows."""
        return self.next_attempt_at is None


class ClaimsMixin(StoreBase):
    """The claim and attempt columns of ``sessions``."""

    def claim_session(
        self, session_id: str, now: datetime, terms: ClaimTerms, *, token: str,
        setup: str | None = None, force: bool = False,
    ) -> ClaimOutcome:
        """Claim an ended session for extraction under ``token``, atomically.

        ``claimed``: nobody held it; ``reclaimed``: an earlier claim went stale (its
        worker is presumed dead); ``busy``: a live claim exists; ``done``: already
        extracted; ``parked``: the attempts ran out; ``waiting``: the next attempt is not
        due yet; ``blocked``: the last run found no hosted model under this same ``setup``;
        ``missing``: no such session; ``open``: not ended yet. ``force`` claims a parked,
        waiting, blocked or extracted session too and starts its attempt count again.
        Any answer but ``missing`` and ``open`` means the message that asked was taken
        off the queue, so the session no longer counts as enqueued.
        """
        stamp = to_iso(now)
        started_cutoff, beat_cutoff = terms.cutoffs(now)
        with self.atomic() as conn:
            row = conn.execute(
                "SELECT ended_at, extracted_at, extraction_started_at, claim_heartbeat_at,"
                " extraction_failed_at, extraction_next_attempt_at, extraction_blocked_by"
                " FROM sessions WHERE id = ?", (session_id,)).fetchone()
            if row is None:
                return "missing"
            ended, extracted, started, beat, failed, next_at, blocked = row
            if ended is None:
                return "open"
            live = started is not None and started >= started_cutoff and (beat or started) >= beat_cutoff
            refusal: ClaimOutcome | None = "busy" if live else None
            if refusal is None and not force:
                refusal = ("done" if extracted is not None else "parked" if failed is not None
                           else "waiting" if next_at is not None and next_at > stamp
                           else "blocked" if setup is not None and blocked == setup else None)
            if refusal is not None:
                conn.execute("UPDATE sessions SET extraction_enqueued_at = NULL WHERE id = ?",
                             (session_id,))
                return refusal
            reset = f", {_CLEAR_ATTEMPTS}" if force else ""
            conn.execute(
                "UPDATE sessions SET claim_token = ?, extraction_started_at = ?,"
                f" claim_heartbeat_at = ?, extraction_enqueued_at = NULL{reset} WHERE id = ?",
                (token, stamp, stamp, session_id))
            return "claimed" if started is None else "reclaimed"

    def renew_claim(self, session_id: str, token: str, now: datetime) -> bool:
        """Record a heartbeat of the claim ``token``; False when it no longer holds the session."""
        with self.atomic() as conn:
            return conn.execute(
                "UPDATE sessions SET claim_heartbeat_at = ? WHERE id = ? AND claim_token = ?",
                (to_iso(now), session_id, token)).rowcount == 1

    def holds_claim(self, session_id: str, token: str) -> bool:
        """Whether ``token`` still holds the session; read inside the apply transaction, so
        the answer stands until it commits."""
        with self._lock:
            row = self._conn.execute(
                "SELECT 1 FROM sessions WHERE id = ? AND claim_token = ?", (session_id, token)).fetchone()
        return row is not None

    def finish_session(self, session_id: str, at: datetime, *, token: str | None = None) -> bool:
        """Set ``extracted_at`` and clear the claim and the attempts; called inside the
        apply transaction, so a session's writes, its summary and ``extracted_at`` commit
        together. With ``token``, only that claim may finish it."""
        sql = (f"UPDATE sessions SET extracted_at = ?, {_CLEAR_CLAIM}, extraction_last_error = NULL,"
               " extraction_next_attempt_at = NULL, extraction_failed_at = NULL,"
               " extraction_blocked_by = NULL, extraction_enqueued_at = NULL WHERE id = ?")
        params = [to_iso(at), session_id]
        if token is not None:
            sql += " AND claim_token = ?"
            params.append(token)
        with self.atomic() as conn:
            return conn.execute(sql, params).rowcount == 1

    def fail_attempt(
        self, session_id: str, token: str, at: datetime, error: str,
        backoff: Callable[[int], timedelta | None],
    ) -> FailedAttempt | None:
        """Count a failed run of the claim ``token`` and release it. ``backoff(attempts)``
        is the wait before the next attempt, or None to park the session. Returns None
        (and changes nothing) when the claim was taken over meanwhile."""
        with self.atomic() as conn:
            row = conn.execute("SELECT extraction_attempts FROM sessions WHERE id = ? AND claim_token = ?",
                               (session_id, token)).fetchone()
            if row is None:
                return None
            attempts = int(row[0]) + 1
            delay = backoff(attempts)
            next_at = None if delay is None else at + delay
            conn.execute(
                f"UPDATE sessions SET {_CLEAR_CLAIM}, extraction_attempts = ?, extraction_last_error = ?,"
                " extraction_next_attempt_at = ?, extraction_failed_at = ? WHERE id = ?",
                (attempts, error, None if next_at is None else to_iso(next_at),
                 to_iso(at) if next_at is None else None, session_id))
        return FailedAttempt(attempts, next_at)

    def block_session(self, session_id: str, token: str, setup: str, reason: str) -> bool:
        """Release the claim ``token`` and keep the session from being tried again while
        the model setup is still ``setup``; False when the claim was taken over."""
        with self.atomic() as conn:
            return conn.execute(
                f"UPDATE sessions SET {_CLEAR_CLAIM}, extraction_blocked_by = ?, extraction_last_error = ?"
                " WHERE id = ? AND claim_token = ?", (setup, reason, session_id, token)).rowcount == 1

    def reset_attempts(self, session_id: str) -> bool:
        """Forget the failed attempts, parked and blocked state of an ended, unextracted
        session, so it is due at once; False when there is no such session."""
        with self.atomic() as conn:
            return conn.execute(
                f"UPDATE sessions SET {_CLEAR_ATTEMPTS}, extraction_enqueued_at = NULL WHERE id = ?"
                " AND ended_at IS NOT NULL AND extracted_at IS NULL", (session_id,)).rowcount == 1

    def pending_sessions(self, now: datetime, terms: ClaimTerms) -> list[ResumeStage]:
        """Ended, unextracted sessions with no live claim (waiting, parked and blocked ones
        included), oldest end first, each with the stage it would resume at."""
        with self._lock:
            rows = self._conn.execute(
                f"SELECT s.id, {_RESUMES_AT_REVIEW} FROM sessions s"
                f" WHERE s.ended_at IS NOT NULL AND s.extracted_at IS NULL AND {_NOT_LIVE}"
                " ORDER BY s.ended_at, s.id", terms.cutoffs(now)).fetchall()
        return [(str(sid), "review" if at_review else "extract") for sid, at_review in rows]

    def due_sessions(
        self, now: datetime, terms: ClaimTerms, *, setup: str, enqueued_before: datetime, limit: int,
    ) -> list[ResumeStage]:
        """The pending sessions to hand to the queue now, at most ``limit``, oldest end
        first: not parked, next attempt due, not blocked under ``setup``, and not handed
        to the queue since ``enqueued_before``."""
        with self._lock:
            rows = self._conn.execute(
                f"SELECT s.id, {_RESUMES_AT_REVIEW} FROM sessions s"
                f" WHERE s.ended_at IS NOT NULL AND s.extracted_at IS NULL AND {_NOT_LIVE}"
                " AND s.extraction_failed_at IS NULL"
                " AND (s.extraction_next_attempt_at IS NULL OR s.extraction_next_attempt_at <= ?)"
                " AND (s.extraction_blocked_by IS NULL OR s.extraction_blocked_by != ?)"
                " AND (s.extraction_enqueued_at IS NULL OR s.extraction_enqueued_at < ?)"
                " ORDER BY s.ended_at, s.id LIMIT ?",
                (*terms.cutoffs(now), to_iso(now), setup, to_iso(enqueued_before), limit)).fetchall()
        return [(str(sid), "review" if at_review else "extract") for sid, at_review in rows]

    def mark_enqueued(self, session_ids: list[str], at: datetime) -> int:
        """Record that these unextracted sessions are being handed to the queue at ``at``."""
        if not session_ids:
            return 0
        with self.atomic() as conn:
            return conn.execute(
                f"UPDATE sessions SET extraction_enqueued_at = ? WHERE id IN ({marks(session_ids)})"
                " AND extracted_at IS NULL", (to_iso(at), *session_ids)).rowcount

    def broker_seen(self, instance: str) -> int | None:
        """Record the broker instance the recover sweep reached. When it is not the one
        recorded last, the broker restarted, and one that keeps nothing on disk forgot
        every message it held: each unextracted session's queued mark is cleared, so the
        sweep hands those sessions over again now rather than after ``requeue_after``.
        Returns how many marks were cleared, or None when no instance was recorded before.
        A session handed over twice is still extracted once: the run claims it."""
        with self.atomic() as conn:
            row = conn.execute("SELECT value FROM store_meta WHERE key = 'queue_broker'").fetchone()
            _PUT_META.execute(conn, ("queue_broker", instance))
            if row is None:
                return None
            if str(row[0]) == instance:
                return 0
            return int(conn.execute(
                "UPDATE sessions SET extraction_enqueued_at = NULL"
                " WHERE extracted_at IS NULL AND extraction_enqueued_at IS NOT NULL").rowcount)

    def unmark_enqueued(self, session_ids: list[str], at: datetime) -> int:
        """Undo :meth:`mark_enqueued` of ``at`` for sessions the queue refused (a mark a
        worker already cleared, or a later one, stays as it is)."""
        if not session_ids:
            return 0
        with self.atomic() as conn:
            return conn.execute(
                f"UPDATE sessions SET extraction_enqueued_at = NULL WHERE id IN ({marks(session_ids)})"
                " AND extraction_enqueued_at = ?", (*session_ids, to_iso(at))).rowcount
