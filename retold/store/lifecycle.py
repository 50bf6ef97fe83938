"""Record lifecycle changes requested through the tools: confirm, expire, forget (LLD 11)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from retold.models import RECORD_STATUSES
from retold.store.base import StoreBase, marks
from retold.util import to_iso

__all__ = ["LifecycleMixin"]


class LifecycleMixin(StoreBase):
    """Status changes on one record, each with its index_version bump."""

    def transition(
        self,
        record_id: str,
        status: str,
        *,
        from_statuses: Sequence[str],
        live_at: datetime | None = None,
        clear_expiry: bool = False,
    ) -> int | None:
        """Move a record to ``status`` only while it is in one of ``from_statuses``.

        The status test and the update share one write transaction, so a record that another
        writer superseded or forgot in the meantime is left alone: the result is then
        None and nothing was written. ``live_at`` also requires that the record has not
        passed its ``expires_at`` at that moment (LLD 6.5: such a row is already history
        for retrieval). ``clear_expiry`` drops ``expires_at`` (LLD 11: a confirmed record
        keeps no provisional expiry). A ``deleted`` status also removes the FTS row
        (LLD 3.3). Returns the records_version the change committed under (LLD 7).
        """
        if status not in RECORD_STATUSES:
            raise ValueError(f"unknown status {status!r}")
        if not from_statuses:
            raise ValueError("from_statuses must name at least one status")
        where = f"id = ? AND status IN ({marks(from_statuses)})"
        params: list[object] = [record_id, *from_statuses]
        if live_at is not None:
            where += " AND (expires_at IS NULL OR expires_at >= ?)"
            params.append(to_iso(live_at))
        # BEGIN IMMEDIATE holds the write lock, so the test and the update see one state;
        # records_version moves only when something changes.
        with self.atomic() as conn:
            row = conn.execute(f"SELECT seq FROM records WHERE {where}", params).fetchone()
            if row is None:
                return None
            version = self.bump_version(conn)
            expiry = ", expires_at = NULL" if clear_expiry else ""
            conn.execute(
                f"UPDATE records SET status = ?, index_version = ?{expiry} WHERE id = ?",
                (status, version, record_id),
            )
            if status == "deleted":
                conn.execute("DELETE FROM records_fts WHERE rowid = ?", (row[0],))
            return version
