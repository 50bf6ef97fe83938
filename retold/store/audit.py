"""The extraction audit's queue: records extraction wrote, sampled for a person's check.

Which records extraction wrote is read from the ``extraction.run`` events, whose outcomes
name each record a run wrote; a record reinforced by a run was written before it and is
not counted. Sampling reads the window's writes, what is already sampled and the
caller's choice in one write transaction, so two samplers running at once never sample
a record twice or pick past a quota. An answer is three yes/no verdicts with who gave
them and when; giving it again replaces it, and each answer is one ``audit.answered``
event. An erased record leaves the open queue (there is nothing left to judge) but keeps
an answer it already had. See docs/decisions.md, "The extraction audit".
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from retold.clock import from_iso, to_iso
from retold.store.base import NewEvent, StoreBase, chunks, marks
from retold.store.upserts import Upsert

__all__ = ["AuditCounts", "AuditItem", "AuditMixin", "AuditRule", "ExtractionWrite", "Verdicts"]

# A sampled record; one sampled already keeps its sampling (and any answers).
_SAMPLE = Upsert("audit_items", ("record_id", "session_id", "written_at", "sampled_at", "rule"))

AuditRule = Literal["rate", "weekly"]  # picked by review_sample_rate, or by the weekly quota
# The outcomes of a write that stored a new row (ingestor outcomes, before any ":<id>").
_NEW_ROW = frozenset({"created", "superseded", "superseded_on_arrival", "conflict"})
# A record whose text is still there: an erased one is a tombstone with nothing to judge,
# a forgotten one (deleted, restorable for a while) is still the record extraction wrote.
_WITH_TEXT = "record_id IN (SELECT id FROM records WHERE NOT (status = 'deleted' AND content = ''))"
_SAMPLED_ORDER = "sampled_at, written_at, record_id"
_COLUMNS = ("record_id", "session_id", "written_at", "sampled_at", "rule", "verdict_true", "verdict_atomic",
            "verdict_keep", "answered_by", "answered_at")


@dataclass(frozen=True)
class ExtractionWrite:
    """One record an extraction run wrote: the session it came from and when."""

    record_id: str
    session_id: str
    written_at: datetime


@dataclass(frozen=True)
class Verdicts:
    """A person's three answers about one record."""

    true: bool  # what it says is so
    atomic: bool  # it says one thing
    keep: bool  # worth keeping as a memory


@dataclass(frozen=True)
class AuditItem:
    """One sampled record; ``verdicts`` is None until someone answers."""

    record_id: str
    session_id: str
    written_at: datetime
    sampled_at: datetime
    rule: AuditRule
    verdicts: Verdicts | None
    answered_by: str | None
    answered_at: datetime | None


@dataclass(frozen=True)
class AuditCounts:
    """Answered items sampled since a time, how many said yes to each question, and the
    open queue (never answered, record not erased) whatever its age."""

    answered: int
    true: int
    atomic: int
    keep: int
    open: int
    oldest_open: datetime | None  # when the longest-waiting open item was sampled


Chooser = Callable[[list[ExtractionWrite], set[str]], list[tuple[ExtractionWrite, AuditRule]]]
"""Given the window's writes and the ids already sampled, the writes to sample now."""


class AuditMixin(StoreBase):
    """Sample extraction's writes into the audit queue, answer them, count the answers."""

    def sample_for_audit(self, since: datetime, until: datetime, choose: Chooser,
                         actor: str) -> tuple[int, list[AuditItem]]:
        """Add what ``choose`` picks from the records extraction wrote in ``[since, until]``
        (live or history, not erased) to the queue, with one ``audit.sampled`` event; how
        many records the window holds, and the items added (none when every pick was
        sampled before)."""
        now = self.clock.now()
        with self.atomic() as conn:
            written = self._extraction_writes(conn, since, until)
            held: set[str] = set()
            for chunk in chunks([w.record_id for w in written]):
                held.update(rid for (rid,) in conn.execute(
                    f"SELECT record_id FROM audit_items WHERE record_id IN ({marks(chunk)})", chunk))
            added = [AuditItem(w.record_id, w.session_id, w.written_at, now, rule, None, None, None)
                     for w, rule in choose(written, held) if w.record_id not in held]
            for item in added:
                _SAMPLE.execute(conn, (item.record_id, item.session_id, to_iso(item.written_at),
                                       to_iso(now), item.rule))
            if added:
                self._insert_event(conn, NewEvent("audit.sampled", actor, {
                    "since": to_iso(since), "until": to_iso(until), "written": len(written),
                    "records": [item.record_id for item in added]}))
        return len(written), added

    def _extraction_writes(self, conn: sqlite3.Connection, since: datetime,
                           until: datetime) -> list[ExtractionWrite]:
        """The records extraction runs in ``[since, until]`` wrote that still hold their
        text, in the order they were written."""
        found: dict[str, ExtractionWrite] = {}
        for at, payload in conn.execute(
                "SELECT at, payload FROM events WHERE kind = 'extraction.run' AND at >= ? AND at <= ?"
                " ORDER BY at, id", (to_iso(since), to_iso(until))).fetchall():
            body = json.loads(payload)
            session = str(body.get("session_id") or "")
            for outcome in body.get("outcomes") or []:
                if not isinstance(outcome, dict) or not outcome.get("record_id"):
                    continue
                if str(outcome.get("outcome", "")).split(":", 1)[0] in _NEW_ROW:
                    found.setdefault(str(outcome["record_id"]), ExtractionWrite(
                        str(outcome["record_id"]), session, from_iso(at)))
        kept: set[str] = set()
        for chunk in chunks(list(found)):
            kept.update(rid for (rid,) in conn.execute(
                f"SELECT id FROM records WHERE id IN ({marks(chunk)}) AND NOT (status = 'deleted'"
                " AND content = '')", chunk))
        return [write for rid, write in found.items() if rid in kept]

    def answer_audit(self, record_id: str, verdicts: Verdicts, by: str) -> AuditItem | None:
        """Record ``by``'s answers about a sampled record (replacing earlier ones), with an
        ``audit.answered`` event; None when the record was never sampled or is erased."""
        now = self.clock.now()
        with self.atomic() as conn:
            row = conn.execute(f"SELECT record_id FROM audit_items WHERE record_id = ? AND {_WITH_TEXT}",
                               (record_id,)).fetchone()
            if row is None:
                return None
            conn.execute("UPDATE audit_items SET verdict_true = ?, verdict_atomic = ?, verdict_keep = ?,"
                         " answered_by = ?, answered_at = ? WHERE record_id = ?",
                         (int(verdicts.true), int(verdicts.atomic), int(verdicts.keep), by, to_iso(now),
                          record_id))
            self._insert_event(conn, NewEvent("audit.answered", by, {
                "true": verdicts.true, "atomic": verdicts.atomic, "keep": verdicts.keep}, record_id))
            item = self._audit_rows(conn, "record_id = ?", [record_id], 1)
        return item[0]

    def audit_items(self, *, answered: bool | None = False, limit: int = 50) -> list[AuditItem]:
        """Sampled items of records not erased: open ones (``answered=False``) longest
        waiting first, answered ones (True) latest answer first, or all (None) in the
        order they were sampled."""
        where = {False: "answered_at IS NULL", True: "answered_at IS NOT NULL", None: "1 = 1"}[answered]
        order = "answered_at DESC, record_id" if answered else _SAMPLED_ORDER
        with self._lock:
            return self._audit_rows(self._conn, f"{where} AND {_WITH_TEXT}", [], limit, order)

    def audit_item(self, record_id: str) -> AuditItem | None:
        """One sampled record's item, erased or not, or None when it was never sampled."""
        with self._lock:
            found = self._audit_rows(self._conn, "record_id = ?", [record_id], 1)
        return found[0] if found else None

    def _audit_rows(self, conn: sqlite3.Connection, where: str, params: Sequence[object], limit: int,
                    order: str = _SAMPLED_ORDER) -> list[AuditItem]:
        rows = conn.execute(f"SELECT {', '.join(_COLUMNS)} FROM audit_items WHERE {where} ORDER BY {order}"
                            " LIMIT ?", [*params, limit]).fetchall()
        return [AuditItem(rid, session, from_iso(written), from_iso(sampled), rule,
                          None if true is None else Verdicts(bool(true), bool(atomic), bool(keep)),
                          by, None if at is None else from_iso(at))
                for rid, session, written, sampled, rule, true, atomic, keep, by, at in rows]

    def audit_counts(self, since: datetime | None) -> AuditCounts:
        """The answers to items sampled at or after ``since`` (all when None) and the open
        queue. Reads only."""
        with self._lock:
            answered, true, atomic, keep = self._conn.execute(
                "SELECT count(*), coalesce(sum(verdict_true), 0), coalesce(sum(verdict_atomic), 0),"
                " coalesce(sum(verdict_keep), 0) FROM audit_items WHERE answered_at IS NOT NULL"
                " AND sampled_at >= ?", ("" if since is None else to_iso(since),)).fetchone()
            waiting, oldest = self._conn.execute(
                f"SELECT count(*), min(sampled_at) FROM audit_items WHERE answered_at IS NULL"
                f" AND {_WITH_TEXT}").fetchone()
        return AuditCounts(int(answered), int(true), int(atomic), int(keep), int(waiting),
                           None if oldest is None else from_iso(oldest))
