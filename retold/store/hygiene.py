"""The reads and the one write behind ``retold hygiene``: a scope's live texts and vectors,
the conflicts among them, and the merge of a duplicate cluster into its strongest record.

A merge reinforces the record kept (its count grows by the records folded into it, with
one ``record.merged`` event) and archives the others with capacity's own archive (status
``expired``, one ``record.archived`` event naming the record they were merged into), so
each stays searchable as history and restorable, and the chain from a merged record to
its survivor is in the audit log.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from retold.clock import to_iso
from retold.models import Scope
from retold.store.base import ACTIVE_SQL, NewEvent, chunks, marks
from retold.store.capacity import CapacityMixin
from retold.store.family import EmbeddingFamily
from retold.store.sweeps import ChangedRow

__all__ = ["HygieneMixin"]



class HygieneMixin(CapacityMixin):
    """Duplicate detection's reads, and the merge."""

    def live_texts(self, scope: Scope) -> dict[str, tuple[str, str]]:
        """Each live record of ``scope``: (type, content)."""
        with self._lock:
            return {str(i): (str(t), str(c)) for i, t, c in self._conn.execute(
                f"SELECT id, type, content FROM records WHERE scope_kind = ? AND scope_id = ?"
                f" AND status IN {ACTIVE_SQL}", (scope.kind, scope.id))}

    def live_vectors(self, scope: Scope, family: EmbeddingFamily) -> dict[str, np.ndarray]:
        """The vectors (of ``family``) of the live records of ``scope`` that have one."""
        with self._lock:
            return {str(i): np.frombuffer(bytes(v), dtype=np.float32) for i, v in self._conn.execute(
                "SELECT r.id, e.vector FROM records r JOIN embeddings e ON e.record_id = r.id"
                f" WHERE r.scope_kind = ? AND r.scope_id = ? AND r.status IN {ACTIVE_SQL}"
                " AND e.model = ? AND e.version = ? AND e.dims = ?",
                (scope.kind, scope.id, family.model, family.version, family.dims))}

    def conflict_pairs(self, record_ids: Sequence[str]) -> set[tuple[str, str]]:
        """The conflicts among ``record_ids``, each pair in both orders."""
        pairs: set[tuple[str, str]] = set()
        with self._lock:
            for chunk in chunks(list(record_ids)):
                for a, b in self._conn.execute(
                        "SELECT record_id, other_id FROM record_conflicts"
                        f" WHERE record_id IN ({marks(chunk)})", chunk):
                    pairs.update({(str(a), str(b)), (str(b), str(a))})
        return pairs

    def merge_duplicates(self, keep: str, others: Sequence[str], actor: str, reason: str) -> list[ChangedRow]:
        """Fold ``others`` into ``keep`` in one transaction: each of them still live and
        unpinned is archived as capacity archives (naming ``keep``), and ``keep`` is
        reinforced once per record folded in. Returns the changed rows, ``keep`` first;
        nothing changes when ``keep`` is no longer live."""
        with self.atomic() as conn:
            if conn.execute(f"SELECT 1 FROM records WHERE id = ? AND status IN {ACTIVE_SQL}",
                            (keep,)).fetchone() is None:
                return []
            archived = self.archive([(other, {"reason": reason, "merged_into": keep}) for other in others],
                                    actor)
            if not archived:
                return []
            version, merged = archived[0].index_version, [row.record_id for row in archived]
            conn.execute("UPDATE records SET reinforcements = reinforcements + ?, last_reinforced_at = ?,"
                         " index_version = ? WHERE id = ?",
                         (len(merged), to_iso(self.clock.now()), version, keep))
            # Its own kind: a merge is not a write, and write counts read record.reinforced.
            self._insert_event(conn, NewEvent("record.merged", actor, {"reason": reason, "merged": merged},
                                              keep))
            return [ChangedRow(keep, version), *archived]
