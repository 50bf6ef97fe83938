"""Record activation: whether a record is in the profile, found by search only, or
waiting in the review queue.

One row per record that the activation policy (or a person) has judged; a record without
a row is ``conditional``. Activation is always read together with the record's status
and expiry, so a superseded, forgotten, expired or erased record leaves the profile and
the review queue the moment its status changes, whatever its row still says.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from retold.clock import to_iso
from retold.errors import StoreError
from retold.models import Activation, Record, Scope
from retold.store.base import NewEvent, chunks, dt, marks, scope_clause
from retold.store.records import RecordsMixin
from retold.store.upserts import Upsert

__all__ = ["ActivationMixin", "ActivationRow", "AmbientLine", "ReviewBacklog", "delete_activation_rows"]

_LIVE = "r.status IN ('provisional', 'confirmed') AND (r.expires_at IS NULL OR r.expires_at >= ?)"
_COLUMNS = "record_id, activation, rule, reason, category, decided_by, decided_at, review_opened_at"
# A record's activation decision, replacing the last; its scope and liveness stay as they
# were (the record's writes keep them).
_DECIDE = Upsert("record_activation", ("scope_kind", "scope_id", "live", *_COLUMNS.split(", ")),
                 update=tuple(_COLUMNS.split(", ")[1:]))


@dataclass(frozen=True)
class ActivationRow:
    """One record's activation and who decided it (``policy`` or ``operator:<name>``)."""

    record_id: str
    activation: Activation
    rule: str  # the policy rule that decided, or ``manual``
    reason: str
    category: str | None
    decided_by: str
    decided_at: datetime
    review_opened_at: datetime | None  # set while the record waits in the review queue

    @property
    def manual(self) -> bool:
        """Decided by a person; the policy does not judge such a record again."""
        return self.decided_by != "policy"


@dataclass(frozen=True)
class AmbientLine:
    """What the profile shows of one ambient record."""

    record_id: str
    content: str  # the record's masked text where its tenant's pack masked it
    category: str | None
    scope_kind: str


@dataclass(frozen=True)
class ReviewBacklog:
    """How many live records wait for review and since when the oldest has waited."""

    open: int
    oldest_opened_at: datetime | None


def _row(values: Sequence[object]) -> ActivationRow:
    decided_at = dt(str(values[6]))
    assert decided_at is not None
    return ActivationRow(str(values[0]), values[1], str(values[2]), str(values[3]),  # type: ignore[arg-type]
                         None if values[4] is None else str(values[4]), str(values[5]), decided_at,
                         dt(None if values[7] is None else str(values[7])))


def delete_activation_rows(conn: sqlite3.Connection, record_ids: Sequence[str]) -> int:
    """Drop the activation rows of erased records (their reasons may quote an operator
    about the record); called inside the erasure's own transaction."""
    removed = 0
    for chunk in chunks(list(record_ids)):
        removed += conn.execute(
            f"DELETE FROM record_activation WHERE record_id IN ({marks(chunk)})", chunk).rowcount
    return removed


class ActivationMixin(RecordsMixin):
    """Rows of ``record_activation``, the profile's ambient records and the review queue."""

    def set_activation(
        self,
        record_id: str,
        activation: Activation,
        *,
        rule: str,
        reason: str,
        category: str | None,
        decided_by: str,
        event: NewEvent,
    ) -> ActivationRow:
        """Store a record's activation with its audit event, in one transaction.

        A record entering review is stamped with the time it entered; one staying in
        review keeps its first stamp, so the backlog age cannot be reset by re-judging.
        """
        now = to_iso(self.clock.now())
        # No version is bumped here, so on PostgreSQL the store's write lock is not needed:
        # the record's row lock orders this against a concurrent status change.
        with self.atomic(late_lock=True) as conn:
            found = conn.execute("SELECT scope_kind, scope_id, status IN ('provisional', 'confirmed')"
                                 f" FROM records WHERE id = ?{self._LOCK_ROW}", (record_id,)).fetchone()
            if found is None:
                raise StoreError(f"no record {record_id}")
            previous = conn.execute(
                "SELECT activation, review_opened_at FROM record_activation WHERE record_id = ?",
                (record_id,)).fetchone()
            opened: str | None = None
            if activation == "review":
                opened = previous[1] if previous is not None and previous[0] == "review" else now
            _DECIDE.execute(conn, (found[0], found[1], int(found[2]), record_id, activation, rule, reason,
                                   category, decided_by, now, opened))
            self._insert_event(conn, event)
            stored = conn.execute(f"SELECT {_COLUMNS} FROM record_activation WHERE record_id = ?",
                                  (record_id,)).fetchone()
        return _row(stored)

    def activation_of(self, record_id: str) -> ActivationRow | None:
        """The record's activation row, or None (the record is ``conditional``)."""
        with self._lock:
            found = self._conn.execute(f"SELECT {_COLUMNS} FROM record_activation WHERE record_id = ?",
                                       (record_id,)).fetchone()
        return None if found is None else _row(found)

    def ambient_lines(self, scopes: Sequence[Scope], now: datetime, *, categories: Sequence[str] = (),
                      limit: int | None = None) -> list[AmbientLine]:
        """The live ambient records in ``scopes``: those of ``categories`` first, in that
        order, then the user's own scope before shared ones, then oldest first; at most
        ``limit``."""
        if not scopes:
            return []
        where, params = scope_clause(scopes, "a.")
        rank = " ".join("WHEN ? THEN " + str(i) for i in range(len(categories)))
        order = (f"CASE a.category {rank} ELSE {len(categories)} END, " if categories else "") + (
            "CASE a.scope_kind WHEN 'user' THEN 0 WHEN 'agent' THEN 1 WHEN 'project' THEN 2 ELSE 3 END,"
            " r.seq")
        # A block is stored and shown as it is: a record's masked text, never its raw one.
        sql = ("SELECT a.record_id, coalesce(r.redacted_content, r.content), a.category, a.scope_kind"
               " FROM record_activation a"
               f" JOIN records r ON r.id = a.record_id WHERE a.activation = 'ambient' AND {where}"
               f" AND {_LIVE} ORDER BY {order}")
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        with self._lock:
            rows = self._conn.execute(sql, [*params, to_iso(now), *categories]).fetchall()
        return [AmbientLine(str(r[0]), str(r[1]), None if r[2] is None else str(r[2]), str(r[3]))
                for r in rows]

    def category_counts(self, scopes: Sequence[Scope], now: datetime) -> dict[str, tuple[int, int]]:
        """Live judged records in ``scopes`` per category (None counted as ``other``): how
        many, and how many of them are ambient.

        Each scope's rows whose record has a live status are counted from the scope index
        alone; the few live-status records already past their expiry (not swept yet) are
        then taken off.
        """
        counts: dict[str, list[int]] = {}

        def add(rows: Iterable[Sequence[object]], sign: int) -> None:
            for category, activation, count in rows:
                entry = counts.setdefault(str(category or "other"), [0, 0])
                entry[0] += sign * int(str(count))
                entry[1] += sign * int(str(count)) * (activation == "ambient")

        with self.snapshot() as conn:
            for scope in scopes:
                add(conn.execute("SELECT category, activation, count(*) FROM record_activation"
                                 " WHERE scope_kind = ? AND scope_id = ? AND live = 1"
                                 " GROUP BY category, activation", (scope.kind, scope.id)), 1)
            if scopes:
                where, params = scope_clause(scopes, "r.")
                add(conn.execute("SELECT a.category, a.activation, count(*) FROM records r"
                                 f" JOIN record_activation a ON a.record_id = r.id WHERE {where}"
                                 " AND r.status IN ('provisional', 'confirmed') AND r.expires_at < ?"
                                 " GROUP BY 1, 2", [*params, to_iso(now)]), -1)
        return {name: (total, ambient) for name, (total, ambient) in counts.items() if total > 0}

    def review_queue(self, now: datetime, limit: int | None = None) -> list[tuple[ActivationRow, Record]]:
        """Live records waiting for review, longest waiting first."""
        sql = (f"SELECT a.record_id FROM record_activation a JOIN records r ON r.id = a.record_id"
               f" WHERE a.activation = 'review' AND {_LIVE} ORDER BY a.review_opened_at, r.seq")
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        with self._lock:
            ids = [str(row[0]) for row in self._conn.execute(sql, (to_iso(now),)).fetchall()]
        rows = self._activation_rows(ids)
        records = {r.id: r for r in self.records(ids)}
        return [(rows[i], records[i]) for i in ids if i in rows and i in records]

    def review_backlog(self, now: datetime) -> ReviewBacklog:
        """The open review count and the oldest entry time, live records only."""
        with self._lock:
            count, oldest = self._conn.execute(
                "SELECT count(*), min(a.review_opened_at) FROM record_activation a"
                f" JOIN records r ON r.id = a.record_id WHERE a.activation = 'review' AND {_LIVE}",
                (to_iso(now),)).fetchone()
        return ReviewBacklog(int(count), dt(oldest))

    def _activation_rows(self, record_ids: Sequence[str]) -> dict[str, ActivationRow]:
        out: dict[str, ActivationRow] = {}
        with self._lock:
            for chunk in chunks(list(record_ids)):
                for values in self._conn.execute(
                        f"SELECT {_COLUMNS} FROM record_activation WHERE record_id IN ({marks(chunk)})",
                        chunk):
                    row = _row(values)
                    out[row.record_id] = row
        return out
