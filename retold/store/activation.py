"""Record activation: whether a record is in the profile, found by search only, or
waiting in the review queue.

One row per record that the activation policy (or a person) has judged; a record without
a row is ``conditional``. Activation is always read together with the record's status
and expiry, so a superseded, forgotten, expired or erased record leaves the profile and
the review queue the moment its status changes, whatever its row still says.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from retold.models import Activation, Record, Scope
from retold.store.base import NewEvent, chunks, dt, marks, scope_clause
from retold.store.records import RecordsMixin, record_from_row
from retold.util import to_iso

__all__ = ["ActivationMixin", "ActivationRow", "ReviewBacklog", "delete_activation_rows"]

_LIVE = ("r.status IN ('provisional', 'confirmed') AND (r.expires_at IS NULL OR r.expires_at >= ?)")
_COLUMNS = "record_id, activation, rule, reason, category, decided_by, decided_at, review_opened_at"


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
        with self.atomic() as conn:
            previous = conn.execute(
                "SELECT activation, review_opened_at FROM record_activation WHERE record_id = ?",
                (record_id,)).fetchone()
            opened: str | None = None
            if activation == "review":
                opened = previous[1] if previous is not None and previous[0] == "review" else now
            conn.execute(
                f"INSERT INTO record_activation({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT(record_id) DO UPDATE SET activation = excluded.activation,"
                " rule = excluded.rule, reason = excluded.reason, category = excluded.category,"
                " decided_by = excluded.decided_by, decided_at = excluded.decided_at,"
                " review_opened_at = excluded.review_opened_at",
                (record_id, activation, rule, reason, category, decided_by, now, opened))
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

    def ambient_records(self, scopes: Sequence[Scope], now: datetime) -> list[tuple[Record, str | None]]:
        """The live ambient records in ``scopes`` with their categories, oldest first."""
        if not scopes:
            return []
        where, params = scope_clause(scopes, "r.")
        with self.snapshot() as conn:
            cursor = conn.execute(
                "SELECT r.*, a.category AS activation_category FROM record_activation a"
                " JOIN records r ON r.id = a.record_id"
                f" WHERE a.activation = 'ambient' AND {where} AND {_LIVE} ORDER BY r.seq",
                [*params, to_iso(now)])
            names = [d[0] for d in cursor.description]
            rows = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
        # The profile shows content, never links, so the records carry none.
        return [(record_from_row(row, []), row["activation_category"]) for row in rows]

    def category_counts(self, scopes: Sequence[Scope], now: datetime) -> dict[str, int]:
        """Live judged records in ``scopes`` per category (None counted as ``other``)."""
        if not scopes:
            return {}
        where, params = scope_clause(scopes, "r.")
        with self._lock:
            rows = self._conn.execute(
                "SELECT coalesce(a.category, 'other'), count(*) FROM record_activation a"
                " JOIN records r ON r.id = a.record_id"
                f" WHERE {where} AND {_LIVE} GROUP BY 1", [*params, to_iso(now)]).fetchall()
        return {str(name): int(count) for name, count in rows}

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
