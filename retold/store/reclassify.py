"""Re-classifying stored records: each record's sensitivity class and masked text as a
changed memory pack would have set them at write time, with the word index and vectors
that follow from the masked text (``retold pack apply``, :mod:`retold.pack_apply`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from retold.store.base import StoreBase

__all__ = ["ReclassifyMixin", "StoredClass"]


@dataclass(frozen=True)
class StoredClass:
    """What a record's class is decided from, and the class and mask it holds now."""

    seq: int
    id: str
    content: str
    evidence: str | None
    attribute: str | None
    source_kind: str
    sensitivity: str
    redacted_content: str | None
    label: str | None  # the extractor's label, kept whether or not it decided the class


class ReclassifyMixin(StoreBase):
    """Reads records in ``seq`` batches and writes their new class and mask."""

    def classes_after(self, seq: int, limit: int) -> list[StoredClass]:
        """Up to ``limit`` records after ``seq`` that still hold text (an erased record
        has none left to classify), in ``seq`` order."""
        with self.snapshot() as conn:
            return [StoredClass(int(r[0]), str(r[1]), str(r[2]), r[3], r[4], str(r[5]), str(r[6]), r[7], r[8])
                    for r in conn.execute(
                        "SELECT seq, id, content, evidence, attribute, source_kind, sensitivity,"
                        " redacted_content, sensitivity_label FROM records"
                        " WHERE seq > ? AND content != '' ORDER BY seq LIMIT ?",
                        (seq, limit))]

    def reclassify(self, rows: Sequence[tuple[StoredClass, str, str | None]],
                   vectors: Sequence[tuple[str, np.ndarray]], model: str, version: str) -> list[str]:
        """Write each ``(record as read, new class, new masked content)``, rewrite the FTS
        rows of those whose masked text changed and store ``vectors`` (embedded from the
        new masked text), in one transaction. A record whose content or mask changed since
        it was read (erased, re-written by another command) is left alone, and its vector
        with it; returns the ids written."""
        with self.atomic() as conn:
            written: list[str] = []
            retext: list[str] = []
            for read, name, masked in rows:
                changed = conn.execute(
                    "UPDATE records SET sensitivity = ?, redacted_content = ? WHERE id = ? AND content = ?"
                    # A mask is never empty, so '' stands for "none" on both backends.
                    " AND coalesce(redacted_content, '') = coalesce(?, '')",
                    (name, masked, read.id, read.content, read.redacted_content)).rowcount
                if changed:
                    written.append(read.id)
                    if masked != read.redacted_content:
                        retext.append(read.id)
            self._write_fts(conn, retext)
            kept = set(written)
            fresh = [(record_id, vector) for record_id, vector in vectors if record_id in kept]
            if fresh:
                self._put_vectors(conn, fresh, model, version, self.bump_version(conn))
            return written
