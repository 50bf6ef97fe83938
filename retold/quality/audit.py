"""The weekly extraction audit: a person reads a sample of what extraction wrote and says
whether each record is true, atomic and worth keeping.

:func:`sample_for_audit` samples one tenant's records written by extraction in the week
before ``now`` into the audit queue: the memory pack's ``write_policy.review_sample_rate``
share of them, or, when the rate is 0, :data:`WEEKLY_QUOTA` of them. Both choices come
from each record id's hash (:func:`retold.activation.policy.sample_position`), never a
random draw: the rate picks the same records the activation policy sends to review, and
the quota takes the records a small rate would pick first. The quota counts what is
already sampled from the week, so sampling again (beat, then ``retold audit sample``)
adds nothing, and a sampled record is never sampled again.

:func:`audit_summary` is what the metrics and the evaluation report show: the three
rates over the items sampled in the last :data:`RATE_WINDOW_DAYS` days that have an
answer, and the age of the longest-waiting unanswered item. See docs/decisions.md, "The
extraction audit".
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from retold.activation.policy import sample_position
from retold.errors import RetoldError
from retold.ingest.evidence import turn_of
from retold.models import Record, Turn
from retold.store import Store
from retold.store.audit import AuditItem, AuditRule, Chooser, ExtractionWrite, Verdicts

__all__ = [
    "RATE_WINDOW_DAYS", "WEEKLY_QUOTA", "AuditEntry", "AuditError", "AuditSample", "AuditSummary",
    "answer_audit", "audit_entries", "audit_summary", "choose_for_audit", "sample_for_audit",
]

WEEK = timedelta(days=7)
WEEKLY_QUOTA = 20  # records a tenant's week gives the audit when the pack's rate is 0
RATE_WINDOW_DAYS = 28  # the rates read the answers to the last four weekly samples


class AuditError(RetoldError):
    """An audit answer was refused (the record was never sampled, or its text is erased);
    nothing changed."""


@dataclass(frozen=True)
class AuditSample:
    """One sampling run for one tenant: the window it read, how many records extraction
    wrote in it, the rule it sampled by and the records it added to the queue."""

    tenant: str
    since: datetime
    until: datetime
    written: int
    rule: AuditRule
    rate: float  # the pack's review_sample_rate (0: the weekly quota applies)
    added: tuple[str, ...]


@dataclass(frozen=True)
class AuditSummary:
    """One tenant's audit: the share of answered items (sampled in the last
    ``window_days`` days) a person called true, atomic and worth keeping (None before
    any answer), and the open queue with the age of its longest-waiting item."""

    tenant: str
    window_days: int
    answered: int
    true_rate: float | None
    atomic_rate: float | None
    keep_rate: float | None
    open: int
    queue_age_seconds: float | None  # None: nothing waits for an answer


@dataclass(frozen=True)
class AuditEntry:
    """What a person judges: the sampled item, its record and the turn its evidence was
    quoted from (None when the transcript is gone, blanked by retention or erased)."""

    item: AuditItem
    record: Record
    turn: Turn | None


def choose_for_audit(rate: float, quota: int = WEEKLY_QUOTA) -> Chooser:
    """The chooser :meth:`~retold.store.audit.AuditMixin.sample_for_audit` applies: every
    write whose position falls under ``rate``, or, with no rate, the writes with the
    lowest positions until ``quota`` of the window's writes are sampled."""

    def choose(written: list[ExtractionWrite], held: set[str]) -> list[tuple[ExtractionWrite, AuditRule]]:
        if rate > 0:
            return [(w, "rate") for w in written if sample_position(w.record_id) < rate]
        room = quota - sum(1 for w in written if w.record_id in held)
        ordered = sorted((w for w in written if w.record_id not in held),
                         key=lambda w: (sample_position(w.record_id), w.record_id))
        return [(w, "weekly") for w in ordered[:max(room, 0)]]

    return choose


def sample_for_audit(store: Store, rate: float, now: datetime | None = None, *,
                     actor: str = "admin") -> AuditSample:
    """Sample the records extraction wrote into ``store``'s tenant in the week before
    ``now`` (default: the store's clock) into the audit queue; ``rate`` is the tenant's
    ``write_policy.review_sample_rate``. Idempotent: a record is sampled once."""
    until = now or store.clock.now()
    since = until - WEEK
    written, added = store.sample_for_audit(since, until, choose_for_audit(rate), actor)
    return AuditSample(store.tenant, since, until, written, "rate" if rate > 0 else "weekly", rate,
                       tuple(item.record_id for item in added))


def audit_entries(store: Store, *, answered: bool | None = False, limit: int = 50) -> list[AuditEntry]:
    """The queue's items with their records and evidence turns: open ones
    (``answered=False``) longest waiting first, answered ones (True) latest answer first,
    or all (None) in the order they were sampled. Reads only."""
    items = store.audit_items(answered=answered, limit=limit)
    records = {record.id: record for record in store.records([item.record_id for item in items])}
    transcripts: dict[str, list[Turn]] = {}
    entries = []
    for item in items:
        record = records.get(item.record_id)
        if record is None:
            continue
        where = turn_of(record.source_ref)
        turn = None
        if where is not None:
            session, number = where
            if session not in transcripts:
                transcripts[session] = store.turns(session)
            turn = next((t for t in transcripts[session] if t.turn == number and t.content), None)
        entries.append(AuditEntry(item, record, turn))
    return entries


def answer_audit(store: Store, record_id: str, verdicts: Verdicts, by: str) -> AuditItem:
    """Record ``by``'s three answers about a sampled record; raises :class:`AuditError`
    when the record is not in the queue."""
    item = store.answer_audit(record_id, verdicts, by)
    if item is None:
        known = store.audit_item(record_id)
        raise AuditError(f"memory {record_id} was never sampled for the audit" if known is None
                         else f"memory {record_id} is erased: there is nothing left to judge")
    return item


def audit_summary(store: Store, tenant: str | None = None, *, now: datetime | None = None) -> AuditSummary:
    """The audit rates and queue age of ``tenant`` (default: the store's own; a store
    reads only its own tenant, so naming another is an error), at ``now`` (default: the
    store's clock). Reads only."""
    if tenant is not None and tenant != store.tenant:
        raise AuditError(f"this store serves tenant {store.tenant!r}, not {tenant!r}: open the store for"
                         f" {tenant!r} to read its audit")
    at = now or store.clock.now()
    counts = store.audit_counts(at - timedelta(days=RATE_WINDOW_DAYS))

    def rate(yes: int) -> float | None:
        return round(yes / counts.answered, 4) if counts.answered else None

    age = None if counts.oldest_open is None else max((at - counts.oldest_open).total_seconds(), 0.0)
    return AuditSummary(store.tenant, RATE_WINDOW_DAYS, counts.answered, rate(counts.true),
                        rate(counts.atomic), rate(counts.keep), counts.open, age)
