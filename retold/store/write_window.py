"""What changed while a write decided without the store's write lock.

On PostgreSQL a write decision (the ingestor's read of the current truth, its judge
calls, the nearby search) may run before the transaction takes the store's write lock,
so writers of unrelated facts decide in parallel. When the decision is made, the writer
takes the lock and reads its window: every record changed since its transaction began
(each carries the ``records_version`` it committed under, so "since" is one indexed
comparison), and whether an entity it resolved has stopped being active. The writer
decides from that whether its decision still stands or must be made again under the lock
(docs/decisions.md, "Writers decide before they take the write lock").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from retold.models import ACTIVE_STATUSES, Scope

__all__ = ["RecordChange", "WriteWindow", "read_window"]


@dataclass(frozen=True)
class RecordChange:
    """A record another writer changed inside the window, as a decision would see it."""

    record_id: str
    index_version: int  # the version of its latest change (record row or vector)
    scope: Scope
    type: str
    subject_entity_id: str | None
    attribute: str | None
    status: str
    content: str
    vector: np.ndarray | None  # None: no vector of the family the caller asked for


@dataclass(frozen=True)
class WriteWindow:
    """Records changed since a late-locked transaction began, and whether an entity it
    resolved was merged or deleted meanwhile. Empty when the lock was held throughout."""

    changes: list[RecordChange] = field(default_factory=list)
    entity_gone: bool = False


def read_window(conn: Any, since: int, entity_ids: Sequence[str], model: str, version: str) -> WriteWindow:
    """The window after ``since``, read in one statement under the write lock."""
    wanted = list(dict.fromkeys(entity_ids))
    gone = (f"SELECT count(*) AS n FROM entities WHERE id IN ({', '.join('?' * len(wanted))})"
            f" AND status NOT IN ({', '.join('?' * len(ACTIVE_STATUSES))})") if wanted else "SELECT 0 AS n"
    rows = conn.execute(
        f"SELECT g.n, c.* FROM ({gone}) g LEFT JOIN ("
        " SELECT r.id, CASE WHEN e.index_version > r.index_version THEN e.index_version"
        "        ELSE r.index_version END AS changed_at,"
        "        r.scope_kind, r.scope_id, r.type, r.subject_entity_id, r.attribute, r.status, r.content,"
        "        CASE WHEN e.model = ? AND e.version = ? THEN e.vector END AS vector"
        " FROM records r LEFT JOIN embeddings e ON e.record_id = r.id"
        " WHERE r.id IN (SELECT id FROM records WHERE index_version > ?"
        "                UNION SELECT record_id FROM embeddings WHERE index_version > ?)"
        ") c ON 1 = 1",
        [*wanted, *(ACTIVE_STATUSES if wanted else ()), model, version, since, since]).fetchall()
    changes = [
        RecordChange(rid, int(changed_at), Scope(kind, scope_id), type_, subject, attribute, status,
                     content, None if blob is None else np.frombuffer(blob, dtype=np.float32))
        for _, rid, changed_at, kind, scope_id, type_, subject, attribute, status, content, blob in rows
        if rid is not None
    ]
    return WriteWindow(changes, bool(rows and rows[0][0]))
