"""Entities, aliases, record links and merges.

Aliases are stored already normalised (``retold.names.normalize_alias``); this
module only compares them exactly, through the ``entity_aliases_lookup`` index. The FTS
``aliases`` column is a denormalised copy of the aliases of every entity a record links
to, so every change here that alters that set rewrites the affected FTS rows in
the same transaction.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from retold.clock import from_iso, new_id, to_iso
from retold.errors import StoreError
from retold.models import ACTIVE_STATUSES, ENTITY_KINDS, Entity, EntityKind, Scope, ScopeKind
from retold.store.base import LINK_ROLES, LINK_ROWS, NewEvent, StoreBase, chunks, marks, scope_clause, ts
from retold.store.upserts import Upsert

if TYPE_CHECKING:
    from retold.models import EntityStatus

__all__ = ["ENTITY_COLUMNS", "ENTITY_STATUSES", "EntitiesMixin", "EntityMergeError", "MergeReport"]

# An entity's alias; one it has already stays as it is.
_ALIAS_ROWS = Upsert("entity_aliases", ("entity_id", "alias_norm"))

ENTITY_STATUSES: tuple[str, ...] = ("provisional", "confirmed", "merged", "deleted")

ENTITY_COLUMNS = "e.id, e.kind, e.canonical, e.scope_kind, e.scope_id, e.status, e.merged_into, e.created_at"


class EntityMergeError(StoreError):
    """A merge was refused: an entity is missing, not active, or of another kind."""


@dataclass(frozen=True)
class MergeReport:
    """What one entity merge changed (the ``memory_revise`` merge result)."""

    source_id: str
    target_id: str
    links_repointed: int  # record_entities rows the source held before the merge
    aliases_added: list[str]  # aliases the survivor did not already carry
    records_rewritten: list[str]  # records whose subject_entity_id was the source
    fts_refreshed: int  # records whose FTS row was rebuilt
    index_version: int | None  # records_version stamped on rewritten records, if any
    event_id: str


class EntitiesMixin(StoreBase):
    """Rows of ``entities``, ``entity_aliases`` and ``record_entities``."""

    # The columns an entity read selects (alias ``e``); PostgreSQL adds the aliases as an
    # array column, so the read is one statement (see _alias_lists).
    _ENTITY_SELECT = ENTITY_COLUMNS

    # -- entities and aliases ---------------------------------------------------------

    def create_entity(
        self,
        kind: str,
        canonical: str,
        scope: Scope,
        status: str = "provisional",
        entity_id: str | None = None,
    ) -> Entity:
        """Insert one entity (without aliases) and return it."""
        if kind not in ENTITY_KINDS:
            raise ValueError(f"entity kind must be one of {', '.join(ENTITY_KINDS)}, got {kind!r}")
        if status not in ("provisional", "confirmed"):
            raise ValueError(f"a new entity is provisional or confirmed, got {status!r}")
        if not canonical.strip():
            raise ValueError("an entity needs a non-empty canonical name")
        ident = entity_id or f"ent_{new_id()}"
        created_at = self.clock.now()
        with self.atomic() as conn:
            conn.execute(
                "INSERT INTO entities(id, kind, canonical, scope_kind, scope_id, status,"
                " merged_into, created_at) VALUES (?, ?, ?, ?, ?, ?, NULL, ?)",
                (ident, kind, canonical, scope.kind, scope.id, status, ts(created_at)),
            )
        return Entity(
            id=ident,
            kind=cast(EntityKind, kind),
            canonical=canonical,
            scope=scope,
            status=cast("EntityStatus", status),
            merged_into=None,
            aliases=[],
            created_at=created_at,
        )

    def add_alias(self, entity_id: str, alias_norm: str) -> bool:
        """Attach an already-normalised alias; True when it was new.

        A new alias changes the FTS ``aliases`` column of every record linked to the
        entity, so those rows are rebuilt in the same transaction.
        """
        if not alias_norm:
            raise ValueError("an alias must not be empty")
        with self.atomic() as conn:
            try:
                added = _ALIAS_ROWS.execute(conn, (entity_id, alias_norm)) > 0
            except self._integrity_errors as exc:  # foreign key: no such entity
                raise StoreError(f"no entity {entity_id}") from exc
            if added:
                self._write_fts(conn, self.records_linked_to(entity_id))
            return added

    def get_entity(self, entity_id: str) -> Entity | None:
        """One entity with its aliases, whatever its status; None when absent."""
        with self._one_view() as conn:
            rows = conn.execute(
                f"SELECT {self._ENTITY_SELECT} FROM entities e WHERE e.id = ?", (entity_id,)
            ).fetchall()
            if not rows:
                return None
            rows, aliases = self._alias_lists(conn, rows, 0)
        return self._entity(rows[0], aliases.get(entity_id, []))

    def entity_scopes(self, entity_ids: Sequence[str]) -> dict[str, Scope]:
        """The scope of each of these entities that exists, whatever its status: what
        a result needs to drop the ids its caller may not read, in one statement."""
        wanted = list(dict.fromkeys(entity_ids))
        out: dict[str, Scope] = {}
        with self._lock:
            for chunk in chunks(wanted):
                for ident, kind, scope_id in self._conn.execute(
                    f"SELECT id, scope_kind, scope_id FROM entities WHERE id IN ({marks(chunk)})", chunk
                ):
                    out[ident] = Scope(kind, scope_id)
        return out

    def follow_merges(self, entity: Entity) -> Entity:
        """The surviving entity at the end of ``entity``'s ``merged_into`` chain.

        A chain that loops or points at a missing entity is corrupt data, not a caller
        mistake, so it raises StoreError instead of silently picking a link.
        """
        seen = {entity.id}
        current = entity
        while current.merged_into is not None:
            next_id = current.merged_into
            if next_id in seen:
                raise StoreError(f"entity merge chain of {entity.id} loops at {next_id}")
            found = self.get_entity(next_id)
            if found is None:
                raise StoreError(f"entity {current.id} was merged into missing entity {next_id}")
            seen.add(next_id)
            current = found
        return current

    def entities_by_alias(
        self,
        alias_norm: str,
        *,
        scopes: Sequence[Scope],
        kinds: Sequence[str] | None = None,
        statuses: Sequence[str] = ACTIVE_STATUSES,
    ) -> list[Entity]:
        """Entities in ``scopes`` that carry this exact normalised alias, by id.

        One query driven by ``entity_aliases_lookup``. Merged entities are excluded by
        the default statuses; their aliases were unioned onto the survivor, so
        lookup reaches the survivor directly.
        """
        if not scopes or not alias_norm:
            return []
        scope_sql, params = scope_clause(scopes, "e.")
        sql = (
            f"SELECT {self._ENTITY_SELECT} FROM entity_aliases a JOIN entities e ON e.id = a.entity_id"
            f" WHERE a.alias_norm = ? AND {scope_sql} AND e.status IN ({marks(statuses)})"
        )
        args: list[str] = [alias_norm, *params, *statuses]
        if kinds is not None:
            sql += f" AND e.kind IN ({marks(kinds)})"
            args += list(kinds)
        with self._one_view() as conn:
            rows, aliases = self._alias_lists(conn, conn.execute(sql + " ORDER BY e.id", args).fetchall(), 0)
        return [self._entity(row, aliases.get(row[0], [])) for row in rows]

    def entities_by_aliases(
        self,
        alias_norms: Sequence[str],
        *,
        scopes: Sequence[Scope],
        kinds: Sequence[str] | None = None,
        statuses: Sequence[str] = ACTIVE_STATUSES,
    ) -> dict[str, list[Entity]]:
        """Look up many normalised aliases at once; only aliases with a hit are keys.

        The aliases travel as one parameter (a JSON array) rather than an
        ``IN (?, ?, ...)`` list, so the n-grams of a 300-token query never approach
        SQLite's bound-parameter limit.
        """
        wanted = [alias for alias in dict.fromkeys(alias_norms) if alias]
        if not scopes or not wanted:
            return {}
        scope_sql, params = scope_clause(scopes, "e.")
        where = (
            " JOIN entity_aliases a ON a.alias_norm = p.alias_norm"
            " JOIN entities e ON e.id = a.entity_id"
            f" WHERE {scope_sql} AND e.status IN ({marks(statuses)})"
        )
        args: list[str] = [*params, *statuses]
        if kinds is not None:
            where += f" AND e.kind IN ({marks(kinds)})"
            args += list(kinds)
        with self._one_view() as conn:
            rows, aliases = self._alias_lists(
                conn, self._alias_probe(conn, wanted, where + " ORDER BY p.alias_norm, e.id", args), 1)
        out: dict[str, list[Entity]] = {}
        for row in rows:
            out.setdefault(row[0], []).append(self._entity(row[1:], aliases.get(row[1], [])))
        return out

    def _alias_probe(self, conn: sqlite3.Connection, wanted: list[str], tail: str,
                     args: list[str]) -> list[tuple[str, ...]]:
        """``alias_norm`` and the entity columns of every alias in ``wanted`` joined by
        ``tail``; the aliases travel as one JSON array parameter (PostgreSQL: one array)."""
        # One statement: a TEMP table here took five (create, empty, fill, read, empty)
        # on every search. JSON1 is already required by the store.
        return list(conn.execute(
            f"SELECT p.alias_norm, {self._ENTITY_SELECT}"
            f" FROM (SELECT value AS alias_norm FROM json_each(?)) p{tail}",
            [json.dumps(wanted), *args],
        ).fetchall())

    def readable_entities(self, scopes: Sequence[Scope], limit: int) -> list[tuple[str, str, str]]:
        """``(entity_id, kind, canonical)`` of active entities in ``scopes``, confirmed
        first then newest, at most ``limit``."""
        if not scopes or limit <= 0:
            return []
        where, params = scope_clause(scopes)
        with self._lock:
            rows = self._conn.execute(
                f"SELECT id, kind, canonical FROM entities WHERE {where}"
                " AND status IN ('provisional', 'confirmed')"
                " ORDER BY status = 'confirmed' DESC, created_at DESC, id LIMIT ?",
                [*params, limit],
            ).fetchall()
        return [(str(i), str(k), str(c)) for i, k, c in rows]

    # -- record links -----------------------------------------------------------------

    def link_record(self, record_id: str, links: Sequence[tuple[str, str]]) -> None:
        """Link a record to entities as ``(entity_id, role)``; an existing link is kept.

        The record's FTS row is rebuilt so its ``aliases`` column names the linked
        entities.
        """
        for _, role in links:
            if role not in LINK_ROLES:
                raise ValueError(f"link role must be about or mentions, got {role!r}")
        if not links:
            return
        with self.atomic() as conn:
            try:
                LINK_ROWS.executemany(conn, [(record_id, entity_id, role) for entity_id, role in links])
            except self._integrity_errors as exc:  # foreign key: missing record or entity
                raise StoreError(f"cannot link record {record_id}: {exc}") from exc
            self._write_fts(conn, [record_id])

    def record_links(self, record_id: str) -> list[tuple[str, str]]:
        """``(entity_id, role)`` of one record, about links first."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT entity_id, role FROM record_entities WHERE record_id = ?"
                " ORDER BY role = 'mentions', entity_id",
                (record_id,),
            ).fetchall()
        return [(entity_id, role) for entity_id, role in rows]

    def link_counts(
        self, entity_ids: Sequence[str], cap: int, now: datetime | None = None
    ) -> dict[str, int]:
        """How many active, unexpired records link each entity, counted up to ``cap + 1``.

        Superseded, expired and deleted records are history: an entity updated many times
        is no broader than one written once (docs/decisions.md, "Only active records make
        an entity broad"). The scan walks record_entities_by_entity and stops at
        ``cap + 1`` active links.
        """
        moment = to_iso(now or self.clock.now())
        with self._lock:
            return {
                eid: int(self._conn.execute(
                    "SELECT count(*) FROM (SELECT 1 FROM record_entities re"
                    " JOIN records r ON r.id = re.record_id"
                    f" WHERE re.entity_id = ? AND r.status IN ({marks(ACTIVE_STATUSES)})"
                    " AND (r.expires_at IS NULL OR r.expires_at >= ?) LIMIT ?) AS linked",
                    (eid, *ACTIVE_STATUSES, moment, cap + 1),
                ).fetchone()[0])
                for eid in dict.fromkeys(entity_ids)
            }

    def records_linked_to(self, entity_id: str) -> list[str]:
        """Ids of every record linked to this entity, in either role."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT record_id FROM record_entities WHERE entity_id = ? ORDER BY record_id",
                (entity_id,),
            ).fetchall()
        return [record_id for (record_id,) in rows]

    # -- merge ------------------------------------------------------------------------

    def merge_entities(self, source_id: str, target_id: str, actor: str, reason: str) -> MergeReport:
        """Merge ``source_id`` into ``target_id`` in one transaction.

        The source becomes ``merged`` with ``merged_into`` set; its record links move to
        the target (a record linked to both keeps one link, ``about`` if either was);
        its aliases are unioned onto the target; records whose primary entity was the
        source get the target as ``subject_entity_id`` and a rewritten ``subject``; and
        the FTS rows of every record now linked to the target, and of every rewritten
        record, are rebuilt so the lexical channel sees the union of names. Any failure
        rolls the whole merge back. Authorization is the caller's job.
        """
        if source_id == target_id:
            raise EntityMergeError("an entity cannot be merged into itself")
        with self.atomic() as conn:
            self._check_mergeable(conn, source_id, target_id)
            links_repointed = self._move_links(conn, source_id, target_id)
            aliases_added = self._union_aliases(conn, source_id, target_id)
            rewritten, index_version = self._move_subjects(conn, source_id, target_id)
            self._retire_merged(conn, source_id, target_id)
            to_refresh = list(dict.fromkeys([*self.records_linked_to(target_id), *rewritten]))
            self._write_fts(conn, to_refresh)
            event_id = self._insert_event(conn, NewEvent(
                "entity.merged",
                actor,
                {
                    "source_id": source_id,
                    "target_id": target_id,
                    "reason": reason,
                    "links_repointed": links_repointed,
                    "aliases_added": aliases_added,
                    "records_rewritten": rewritten,
                },
                entity_id=source_id,
            ))
        return MergeReport(
            source_id=source_id,
            target_id=target_id,
            links_repointed=links_repointed,
            aliases_added=aliases_added,
            records_rewritten=rewritten,
            fts_refreshed=len(to_refresh),
            index_version=index_version,
            event_id=event_id,
        )

    @staticmethod
    def _check_mergeable(conn: sqlite3.Connection, source_id: str, target_id: str) -> None:
        """EntityMergeError unless both entities exist, are active and share a kind."""
        found = {
            row[0]: row
            for row in conn.execute(
                "SELECT id, kind, status FROM entities WHERE id IN (?, ?)", (source_id, target_id)
            )
        }
        for ident in (source_id, target_id):
            if ident not in found:
                raise EntityMergeError(f"no entity {ident}")
            if found[ident][2] not in ACTIVE_STATUSES:
                raise EntityMergeError(f"entity {ident} is {found[ident][2]}, not active")
        if found[source_id][1] != found[target_id][1]:
            raise EntityMergeError(
                f"cannot merge a {found[source_id][1]} entity into a {found[target_id][1]} entity"
            )

    @staticmethod
    def _move_links(conn: sqlite3.Connection, source_id: str, target_id: str) -> int:
        """Repoint the source's record links at the target; how many the source held."""
        links_repointed = int(
            conn.execute(
                "SELECT count(*) FROM record_entities WHERE entity_id = ?", (source_id,)
            ).fetchone()[0]
        )
        # A record linked to both keeps the target row, promoted to about when the
        # source link was the primary one, so the record keeps its primary entity.
        conn.execute(
            "UPDATE record_entities SET role = 'about' WHERE entity_id = ?1 AND role = 'mentions'"
            " AND record_id IN (SELECT record_id FROM record_entities"
            "                   WHERE entity_id = ?2 AND role = 'about')",
            (target_id, source_id),
        )
        conn.execute(
            "DELETE FROM record_entities WHERE entity_id = ?2"
            " AND record_id IN (SELECT record_id FROM record_entities WHERE entity_id = ?1)",
            (target_id, source_id),
        )
        conn.execute(
            "UPDATE record_entities SET entity_id = ? WHERE entity_id = ?", (target_id, source_id)
        )
        return links_repointed

    @staticmethod
    def _union_aliases(conn: sqlite3.Connection, source_id: str, target_id: str) -> list[str]:
        """Give the target the source's aliases; those it did not carry, sorted."""
        aliases_added = [
            alias
            for (alias,) in conn.execute(
                "SELECT alias_norm FROM entity_aliases WHERE entity_id = ?1 AND alias_norm NOT IN"
                " (SELECT alias_norm FROM entity_aliases WHERE entity_id = ?2) ORDER BY alias_norm",
                (source_id, target_id),
            )
        ]
        _ALIAS_ROWS.executemany(conn, [(target_id, alias) for alias in aliases_added])
        return aliases_added

    def _move_subjects(
        self, conn: sqlite3.Connection, source_id: str, target_id: str
    ) -> tuple[list[str], int | None]:
        """Make the target the primary entity of the records whose primary entity was the
        source: their sorted ids, and the records_version stamped on them (None if none)."""
        # subject is derived from subject_entity_id, so both change together,
        # and the record's index_version moves so other processes see the change.
        has_subject_rows = conn.execute(
            "SELECT 1 FROM records WHERE subject_entity_id = ? LIMIT 1", (source_id,)
        ).fetchone()
        if not has_subject_rows:
            return [], None
        index_version = self.bump_version(conn)
        rewritten = [
            record_id
            for (record_id,) in conn.execute(
                "UPDATE records SET subject_entity_id = ?1,"
                " subject = ?1 || '/' || coalesce(attribute, '-'), index_version = ?2"
                " WHERE subject_entity_id = ?3 RETURNING id",
                (target_id, index_version, source_id),
            ).fetchall()
        ]
        rewritten.sort()
        return rewritten, index_version

    @staticmethod
    def _retire_merged(conn: sqlite3.Connection, source_id: str, target_id: str) -> None:
        """Mark the source merged into the target."""
        conn.execute(
            "UPDATE entities SET status = 'merged', merged_into = ? WHERE id = ?",
            (target_id, source_id),
        )
        # Entities merged into the source earlier now point straight at the survivor,
        # which keeps merge chains one hop long.
        conn.execute(
            "UPDATE entities SET merged_into = ? WHERE merged_into = ?", (target_id, source_id)
        )

    # -- helpers -------------------------------------------------------------------------

    def _alias_lists(
        self, conn: sqlite3.Connection, rows: list[Any], at: int
    ) -> tuple[list[Any], dict[str, list[str]]]:
        """``rows`` (entity columns from index ``at``) and the aliases of their entities,
        by entity id."""
        return rows, self._aliases_of(conn, list(dict.fromkeys(row[at] for row in rows)))

    @staticmethod
    def _aliases_of(conn: sqlite3.Connection, entity_ids: list[str]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        # Chunked so a long hit list stays under the bound-parameter limit as well.
        for chunk in chunks(entity_ids):
            for entity_id, alias in conn.execute(
                f"SELECT entity_id, alias_norm FROM entity_aliases WHERE entity_id IN ({marks(chunk)})"
                " ORDER BY entity_id, alias_norm",
                chunk,
            ):
                out.setdefault(entity_id, []).append(alias)
        return out

    @staticmethod
    def _entity(row: Sequence[str | None], aliases: list[str]) -> Entity:
        ident, kind, canonical, scope_kind, scope_id, status, merged_into, created_at = row
        assert ident is not None and canonical is not None and created_at is not None
        return Entity(
            id=ident,
            kind=cast(EntityKind, kind),
            canonical=canonical,
            scope=Scope(cast(ScopeKind, scope_kind), cast(str, scope_id)),
            status=cast("EntityStatus", status),
            merged_into=merged_into,
            aliases=aliases,
            created_at=from_iso(created_at),
        )
