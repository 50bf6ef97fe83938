"""The live rows of one scope and type, whole or as what changed since a records_version.

A write compares its memory with the live records of its scope and type. Reading them
whole on every write costs in proportion to the scope; between two writes they change by
a record or two. So a caller keeps them (``retold.ingest.write_scope``) and asks here for
the rows changed since the version it holds: every change to a record stamps the record
with the ``records_version`` it committed under, so "since" is a range of the
``records_index_version`` index.
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from retold.clock import to_iso
from retold.models import ACTIVE_STATUSES, Scope
from retold.store.base import StoreBase, marks

__all__ = ["ScopeRow", "ScopeRowsMixin"]


class ScopeRow(NamedTuple):
    """What decides whether a record is eligible, and where ``eligible_ids`` lists it."""

    id: str
    seq: int
    status: str
    expires_at: str | None  # as stored (ISO text), compared as the eligible set's SQL does
    event_at: str


class ScopeRowsMixin(StoreBase):
    """Live rows of a scope and type, and the rows of one changed since a version."""

    _SCOPE_ROW = "SELECT id, seq, status, expires_at, event_at FROM records"

    def live_scope_rows(self, scope: Scope, type_: str, now: datetime) -> tuple[int, list[ScopeRow]]:
        """The rows ``eligible_ids([scope], [type_], now=now)`` admits, and the
        ``records_version`` they reflect."""
        where = (f"scope_kind = ? AND scope_id = ? AND status IN ({marks(ACTIVE_STATUSES)})"
                 f" AND (expires_at IS NULL OR expires_at >= ?) AND {self._NOT_INDEXED}type = ?")
        version, rows = self._rows_with_version(
            f"{self._SCOPE_ROW} WHERE {where}", [scope.kind, scope.id, *ACTIVE_STATUSES, to_iso(now), type_])
        return version, [ScopeRow(*row) for row in rows]

    def scope_rows_since(self, since: int, scope: Scope, type_: str,
                         limit: int) -> tuple[int, list[ScopeRow]]:
        """Rows of ``scope`` and ``type_`` changed after ``since``, in any status, at most
        ``limit``, and the ``records_version`` they reflect (a record never changes scope
        or type)."""
        # The version range is the selective term: the scope's terms must not take SQLite
        # to an index over the whole scope.
        no = self._NOT_INDEXED
        version, rows = self._rows_with_version(
            f"{self._SCOPE_ROW} WHERE index_version > ? AND {no}scope_kind = ? AND {no}scope_id = ?"
            f" AND {no}type = ? LIMIT {int(limit)}", [since, scope.kind, scope.id, type_])
        return version, [ScopeRow(*row) for row in rows]
