"""The reads behind the inspector's lists: the records of some scopes a page at a time,
newest first, each scope's counts, the entities of some scopes, and the searches that
returned a record.

A page is keyed by ``seq`` (the next page starts below the last one shown) rather than
by an offset, so the hundredth page of a large store costs what the first does. Every
read is limited to the scopes the caller may read; None is an operator's "every scope".
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from retold.clock import from_iso
from retold.models import RECORD_STATUSES, Record, Scope
from retold.store.base import marks, scope_clause
from retold.store.records import RecordsMixin

__all__ = ["BrowseFilter", "BrowseMixin", "ReturnedBy", "ScopeCounts"]


@dataclass(frozen=True)
class BrowseFilter:
    """What a records list keeps; an empty tuple or None keeps everything."""

    statuses: tuple[str, ...] = ()
    types: tuple[str, ...] = ()
    attribute: str | None = None
    entity_id: str | None = None  # the subject, or any linked entity
    pinned: bool | None = None
    text: str | None = None  # words the content holds, each anywhere in it


@dataclass(frozen=True)
class ScopeCounts:
    """One scope's records by status and by type, and those waiting for their vector."""

    scope: Scope
    by_status: dict[str, int]
    by_type: dict[str, int]
    pending_vectors: int

    @property
    def total(self) -> int:
        return sum(self.by_status.values())


@dataclass(frozen=True)
class ReturnedBy:
    """A logged search that returned a record, and the rank it gave it (1 = first)."""

    search_id: str
    at: datetime
    agent_id: str
    user_id: str
    trigger: str
    query: str
    rank: int


class BrowseMixin(RecordsMixin):
    """Paged, filtered record lists and per-scope counts."""

    def browse_records(self, scopes: Sequence[Scope] | None, kept: BrowseFilter, *,
                       before_seq: int | None, limit: int) -> list[Record]:
        """Up to ``limit`` records of ``scopes`` that ``kept`` keeps, newest first, all
        below ``before_seq`` when given. An empty ``scopes`` matches nothing."""
        if scopes is not None and not scopes:
            return []
        where: list[str] = []
        params: list[Any] = []
        if scopes is not None:
            sql, scope_params = scope_clause(scopes)
            where.append(sql)
            params += scope_params
            with self._one_view() as conn:  # a damaged scope index would show a short page
                self._scope_indexes_agree(conn, scopes, kept.statuses or RECORD_STATUSES)
        for column, values in (("status", kept.statuses), ("type", kept.types)):
            if values:
                where.append(f"{column} IN ({marks(values)})")
                params += list(values)
        if kept.attribute:
            where.append("attribute = ?")
            params.append(kept.attribute)
        if kept.entity_id:
            where.append("(subject_entity_id = ? OR id IN (SELECT record_id FROM record_entities"
                         " WHERE entity_id = ?))")
            params += [kept.entity_id, kept.entity_id]
        if kept.pinned is not None:
            where.append(f"id {'' if kept.pinned else 'NOT '}IN (SELECT record_id FROM record_pins)")
        for word in (kept.text or "").split():
            # A plain substring match on both backends: the lexical index stems words, and
            # a person looking for "vim" wants the records that say vim.
            escaped = word.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            where.append("lower(content) LIKE ? ESCAPE '\\'")
            params.append(f"%{escaped}%")
        if before_seq is not None:
            where.append("seq < ?")
            params.append(before_seq)
        return self._select(" AND ".join(where) or "1 = 1", params, order="seq DESC", limit=limit)

    def record_scopes(self) -> list[Scope]:
        """Every scope that holds a record, by kind and id, read off the scope index."""
        return [Scope.parse(f"{kind}:{ident}") for kind, ident in self._read_rows(
            "SELECT DISTINCT scope_kind, scope_id FROM records ORDER BY scope_kind, scope_id", [])]

    def scope_counts(self, scopes: Sequence[Scope] | None) -> list[ScopeCounts]:
        """Counts for each of ``scopes`` that holds a record (every such scope for None),
        ordered by kind and id."""
        if scopes is not None and not scopes:
            return []
        where, params = scope_clause(scopes) if scopes is not None else ("1 = 1", [])
        with self._one_view() as conn:  # counts read off a damaged scope index would be short
            if scopes is None:
                self._every_scope_agrees(conn)
            else:
                self._scope_indexes_agree(conn, scopes, RECORD_STATUSES)
        rows = self._read_rows(
            f"SELECT scope_kind, scope_id, status, type, count(*) FROM records WHERE {where}"
            " GROUP BY scope_kind, scope_id, status, type", params)
        joined = scope_clause(scopes, "r.")[0] if scopes is not None else "1 = 1"
        pending = self._read_rows(
            "SELECT r.scope_kind, r.scope_id, count(*) FROM pending_embeddings p"
            f" JOIN records r ON r.id = p.record_id WHERE {joined} GROUP BY r.scope_kind, r.scope_id", params)
        found: dict[tuple[str, str], tuple[dict[str, int], dict[str, int]]] = {}
        for kind, scope_id, status, type_, n in rows:
            by_status, by_type = found.setdefault((str(kind), str(scope_id)), ({}, {}))
            by_status[str(status)] = by_status.get(str(status), 0) + int(n)
            by_type[str(type_)] = by_type.get(str(type_), 0) + int(n)
        waiting = {(str(kind), str(scope_id)): int(n) for kind, scope_id, n in pending}
        return [ScopeCounts(Scope.parse(f"{kind}:{scope_id}"), by_status, by_type,
                            waiting.get((kind, scope_id), 0))
                for (kind, scope_id), (by_status, by_type) in sorted(found.items())]

    def browse_entity_ids(self, scopes: Sequence[Scope] | None, limit: int,
                          kinds: Sequence[str] = ()) -> list[str]:
        """Ids of up to ``limit`` entities of ``scopes`` (every scope for None), any status,
        optionally of ``kinds``, by canonical name."""
        if scopes is not None and not scopes:
            return []
        where, params = scope_clause(scopes) if scopes is not None else ("1 = 1", [])
        if kinds:
            where += f" AND kind IN ({marks(kinds)})"
            params = [*params, *kinds]
        return [str(row[0]) for row in self._read_rows(
            f"SELECT id FROM entities WHERE {where} ORDER BY canonical, id LIMIT {int(limit)}", params)]

    def merged_from(self, entity_id: str) -> list[str]:
        """Ids of the entities merged into ``entity_id``."""
        return [str(row[0]) for row in self._read_rows(
            "SELECT id FROM entities WHERE merged_into = ? ORDER BY id", [entity_id])]

    def searches_returning(self, record_id: str, *, principal: tuple[str, str] | None,
                           limit: int) -> list[ReturnedBy]:
        """The newest logged searches (by ``principal``, an (agent id, user id) pair, when
        given) that returned ``record_id``, with the rank it had, through the
        ``search_returned`` index (search ids grow with time, so their order is the log's)."""
        who, params = "", [record_id]
        if principal is not None:
            who, params = " AND s.agent_id = ? AND s.user_id = ?", [record_id, *principal]
        rows = self._read_rows(
            "SELECT s.id, s.at, s.agent_id, s.user_id, s.trigger, s.request, r.rank FROM search_returned r"
            f" JOIN search_log s ON s.id = r.search_id WHERE r.record_id = ?{who}"
            " ORDER BY r.search_id DESC LIMIT ?", [*params, limit])
        out: list[ReturnedBy] = []
        for search_id, at, agent_id, user_id, trigger, request, rank in rows:
            queries = (json.loads(request) if isinstance(request, str) else request).get("queries") or []
            out.append(ReturnedBy(str(search_id), from_iso(str(at)), str(agent_id), str(user_id),
                                  str(trigger), " / ".join(map(str, queries)), int(rank)))
        return out

    def _read_rows(self, sql: str, params: Sequence[Any]) -> list[Any]:
        with self._lock:
            return list(self._conn.execute(sql, tuple(params)).fetchall())
