"""Records waiting for their vector: written while the embedder failed or ran out of time,
found by their words and entities at once, and given their vector by the backfill.

The backfill's vectors go in under a new ``records_version``, so every agent's index
loads them on its next refresh, as it loads another process's write.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from retold.clock import to_iso
from retold.store.base import StoreBase, chunks, marks
from retold.store.upserts import Upsert

__all__ = ["PendingMixin"]

# A record waiting for its vector; marked again, it keeps its time and takes the new reason.
_MARK = Upsert("pending_embeddings", ("record_id", "since", "reason"), update=("reason",))


class PendingMixin(StoreBase):
    """``pending_embeddings`` rows: mark, count, take a batch, fill."""

    def mark_pending(self, record_id: str, reason: str) -> None:
        with self.atomic() as conn:
            _MARK.execute(conn, (record_id, to_iso(self.clock.now()), reason))

    def pending_count(self) -> int:
        """Records waiting for their vector (an erased record waits for nothing)."""
        with self._lock:
            return int(self._conn.execute(
                "SELECT count(*) FROM pending_embeddings p JOIN records r ON r.id = p.record_id"
                " WHERE r.content != ''").fetchone()[0])

    def pending_batch(self, limit: int) -> list[tuple[str, str]]:
        """Up to ``limit`` (record id, content) waiting for a vector, oldest first; the
        content is the redacted form where the tenant's pack masked it. Rows of
        records erased meanwhile are dropped first: there is no text left to embed."""
        with self.atomic() as conn:
            conn.execute("DELETE FROM pending_embeddings WHERE record_id IN"
                         " (SELECT id FROM records WHERE content = '')")
            return [(str(i), str(c)) for i, c in conn.execute(
                "SELECT r.id, coalesce(r.redacted_content, r.content) FROM pending_embeddings p"
                " JOIN records r ON r.id = p.record_id"
                " ORDER BY p.since, r.seq LIMIT ?", (limit,))]

    def fill_pending(self, rows: Sequence[tuple[str, np.ndarray]], model: str, version: str) -> int:
        """Store these vectors and clear their records' pending rows, under one new
        ``records_version`` (returned)."""
        with self.atomic() as conn:
            index_version = self.bump_version(conn)
            self._put_vectors(conn, rows, model, version, index_version)
            for chunk in chunks([record_id for record_id, _ in rows]):
                conn.execute(f"DELETE FROM pending_embeddings WHERE record_id IN ({marks(chunk)})", chunk)
            return index_version
