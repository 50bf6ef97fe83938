"""The reads behind golden sets (``retold golden``, ``retold eval``): the logged searches a
set is sampled from, the supersession links that make a returned record stale, and each
scope's open conflicts. All of them only read."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from retold.models import Scope
from retold.store.base import ACTIVE_SQL, StoreBase

__all__ = ["LoggedSearch", "QualityMixin", "ScopeConflicts"]


@dataclass(frozen=True)
class LoggedSearch:
    """One search-log row, the columns a golden set is made from (JSON left as text)."""

    id: str
    at: str
    agent_id: str
    user_id: str
    session_id: str | None
    trigger: str
    request: str
    readable_scopes: str
    returned: str


@dataclass(frozen=True)
class ScopeConflicts:
    """A scope's live records and the open conflicts (both records live) that touch it."""

    live: int
    open_conflicts: int


class QualityMixin(StoreBase):
    """Reads for measuring search quality."""

    def logged_searches(self) -> list[LoggedSearch]:
        """Every search-log row still kept, oldest first."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT id, at, agent_id, user_id, session_id, trigger, request, readable_scopes, returned"
                " FROM search_log ORDER BY at, id").fetchall()
        return [LoggedSearch(str(i), str(at), str(agent), str(user),
                             None if session is None else str(session), str(trigger), str(request),
                             str(scopes), str(returned))
                for i, at, agent, user, session, trigger, request, scopes, returned in rows]

    def supersession_links(self) -> dict[str, list[tuple[str, str]]]:
        """Each record some record supersedes, mapped to its successors ``(id, status)``,
        forgotten ones left out. One pass over the records: an evaluation asks about the
        records of hundreds of searches."""
        links: dict[str, list[tuple[str, str]]] = {}
        with self._lock:
            for old, new, status in self._conn.execute(
                    "SELECT supersedes_id, id, status FROM records"
                    " WHERE supersedes_id IS NOT NULL AND status <> 'deleted' ORDER BY seq"):
                links.setdefault(str(old), []).append((str(new), str(status)))
        return links

    def scope_conflicts(self, scopes: Sequence[Scope]) -> dict[Scope, ScopeConflicts]:
        """For each scope, its live records and the conflicts between two live records of
        which at least one is in it (each pair once)."""
        out: dict[Scope, ScopeConflicts] = {}
        with self.snapshot() as conn:
            for scope in dict.fromkeys(scopes):
                live = conn.execute(
                    "SELECT count(*) FROM records WHERE scope_kind = ? AND scope_id = ?"
                    f" AND status IN {ACTIVE_SQL}", (scope.kind, scope.id)).fetchone()[0]
                # Both directions of a conflict are stored; the id order keeps one.
                conflicts = conn.execute(
                    "SELECT count(*) FROM record_conflicts c JOIN records a ON a.id = c.record_id"
                    " JOIN records b ON b.id = c.other_id WHERE c.record_id < c.other_id"
                    f" AND a.status IN {ACTIVE_SQL} AND b.status IN {ACTIVE_SQL}"
                    " AND ((a.scope_kind = ? AND a.scope_id = ?) OR (b.scope_kind = ? AND b.scope_id = ?))",
                    (scope.kind, scope.id, scope.kind, scope.id)).fetchone()[0]
                out[scope] = ScopeConflicts(int(live), int(conflicts))
        return out
