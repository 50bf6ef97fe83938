"""Records: the one way a record is written, how its status changes, and named reads.

:meth:`RecordsMixin.write_record` is the only insert: the row, its entity links, its FTS
row (once), its vector and the audit event commit together under one ``records_version``.
A record's status changes through :meth:`RecordsMixin.transition`, and reinforcement
through :meth:`RecordsMixin.update_lifecycle`. Reads are named queries with typed
filters; no SQL fragment comes from outside ``retold.store``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from retold.clock import from_iso, to_iso
from retold.errors import StoreError
from retold.models import RECORD_STATUSES, Record, Scope
from retold.store.base import (
    ACTIVE_SQL,
    LINK_ROLES,
    LINK_ROWS,
    Embedding,
    NewEvent,
    StoreBase,
    chunks,
    dt,
    marks,
    scope_clause,
    ts,
)
from retold.store.upserts import Upsert

__all__ = ["RecordWrite", "Transition", "RecordsMixin", "record_from_row"]

# Two incompatible claims, one row each way; a pair already noted keeps its time.
_CONFLICT_ROWS = Upsert("record_conflicts", ("record_id", "other_id", "noted_at"))

# A supersession chain longer than this is corrupt data; the walk stops there.
_LINEAGE_BOUND = 1000


@dataclass(frozen=True)
class RecordWrite:
    """What :meth:`RecordsMixin.write_record` committed."""

    index_version: int  # the records_version the row and its vector carry
    seq: int  # the record's stable integer key (FTS rowid, vector-index key)
    event_id: str | None


@dataclass(frozen=True)
class Transition:
    """A status change that :meth:`RecordsMixin.transition` committed."""

    index_version: int
    event_id: str | None


class RecordsMixin(StoreBase):
    """Record rows with their links, FTS rows, vectors, status and conflicts."""

    # What a record read selects; PostgreSQL adds the links as an array column, so the
    # read is one statement (see _record_links).
    _RECORD_SELECT = "*"

    # -- the one write ----------------------------------------------------------------

    def write_record(
        self,
        record: Record,
        *,
        links: Sequence[tuple[str, str]] = (),
        embedding: Embedding | None = None,
        event: Callable[[], NewEvent] | None = None,
    ) -> RecordWrite:
        """Insert ``record`` with its ``(entity_id, role)`` links, its FTS row, its vector
        and an audit event, in one transaction under one ``records_version``.

        ``event`` is called once the rows are written, so it may describe what the write
        cost. Sets ``record.index_version`` and ``record.seq``. A link to a missing entity
        raises StoreError and writes nothing.
        """
        for _, role in links:
            if role not in LINK_ROLES:
                raise ValueError(f"link role must be about or mentions, got {role!r}")
        with self.atomic() as conn:
            version, seq = self._bump_for_insert(conn)
            # An unclassified, unmasked, unlabelled record leaves those columns to their
            # defaults, so one writer serves a store opened without migrating it as well.
            classified = record.sensitivity != "none" or record.redacted_content is not None
            labelled = record.sensitivity_label is not None
            extra = ((record.sensitivity, record.redacted_content) if classified else ()) + (
                (record.sensitivity_label,) if labelled else ())
            conn.execute(
                "INSERT INTO records (id, seq, type, version, content, subject, subject_entity_id,"
                " attribute, scope_kind, scope_id, source_kind, source_ref, creator_agent_id,"
                " evidence, created_at, event_at, expires_at, valid_from, valid_until, review_at,"
                " review_flagged_at, confidence, status, supersedes_id, reinforcements,"
                " last_reinforced_at, index_version, tags"
                + (", sensitivity, redacted_content" if classified else "")
                + (", sensitivity_label" if labelled else "") + ")"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?"
                + (",?,?" if classified else "") + (",?" if labelled else "") + ")",
                (
                    record.id, seq, record.type, record.version, record.content, record.subject,
                    record.subject_entity_id, record.attribute, record.scope.kind,
                    record.scope.id, record.source_kind, record.source_ref,
                    record.creator_agent_id, record.evidence, ts(record.created_at),
                    ts(record.event_at), ts(record.expires_at), ts(record.valid_from),
                    ts(record.valid_until), ts(record.review_at),
                    ts(record.review_flagged_at), record.confidence, record.status,
                    record.supersedes_id, record.reinforcements,
                    ts(record.last_reinforced_at), version, json.dumps(record.tags), *extra,
                ),
            )
            if links:
                try:
                    LINK_ROWS.executemany(conn, [(record.id, entity_id, role) for entity_id, role in links])
                except self._integrity_errors as exc:  # foreign key: no such entity
                    raise StoreError(f"cannot link record {record.id}: {exc}") from exc
            if embedding is not None:
                self._put_vectors(conn, [(record.id, embedding.vector)], embedding.model,
                                  embedding.version, version)
            self._write_fts(conn, [record.id])  # after the links: it carries their aliases
            record.index_version, record.seq = version, seq
            event_id = self._insert_event(conn, event()) if event is not None else None
        return RecordWrite(version, seq, event_id)

    def _bump_for_insert(self, conn: Any) -> tuple[int, int]:
        """A new ``records_version`` for an insert, and the new record's seq."""
        version = self.bump_version(conn)
        # The write lock is held (the bump takes it), so max(seq) + 1 cannot race.
        return version, int(conn.execute("SELECT coalesce(max(seq), 0) + 1 FROM records").fetchone()[0])

    # -- status and lifecycle -----------------------------------------------------------

    def transition(
        self,
        record_id: str,
        status: str,
        *,
        from_statuses: Sequence[str],
        live_at: datetime | None = None,
        clear_expiry: bool = False,
        ends_validity: datetime | None = None,
        event: NewEvent | None = None,
    ) -> Transition | None:
        """Move a record to ``status`` only while it is in one of ``from_statuses``, and
        append ``event`` with the change.

        The test and the update share one write transaction, so a record that another
        writer superseded or forgot in the meantime is left alone: the result is then
        None and nothing was written. ``live_at`` also requires that the record has not
        passed its ``expires_at`` then (such a row is already history for retrieval).
        ``clear_expiry`` drops ``expires_at`` (a confirmed record keeps no provisional
        expiry). ``ends_validity`` closes the record's validity window there, as a
        supersession does (:func:`retold.policy.validity.closed_at`: an earlier end stays,
        and no end falls before the window's start). Returns the records_version the
        change committed under and the event id.
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
        with self.atomic() as conn:
            if conn.execute(f"SELECT 1 FROM records WHERE {where}", params).fetchone() is None:
                return None
            version = self.bump_version(conn)
            if clear_expiry:
                conn.execute("UPDATE records SET expires_at = NULL WHERE id = ?", (record_id,))
            if ends_validity is not None:
                at = to_iso(ends_validity)
                conn.execute(
                    "UPDATE records SET valid_until = CASE WHEN coalesce(valid_from, event_at) > ?"
                    " THEN coalesce(valid_from, event_at) ELSE ? END"
                    " WHERE id = ? AND (valid_until IS NULL OR valid_until > ?)",
                    (at, at, record_id, at))
            self._set_status(conn, [record_id], status, version)
            event_id = self._insert_event(conn, event) if event is not None else None
            return Transition(version, event_id)

    def restore(self, record_id: str, status: str, event: NewEvent, *,
                from_status: str = "deleted") -> Transition | None:
        """Bring a forgotten (or, with ``from_status="expired"``, an archived) record back
        as ``status``: its FTS row is written again from the content it kept, and its
        vector (which forget left in place) is live again at the new ``records_version``,
        so every index loads it on its next refresh. None, with nothing written, when the
        record is no longer in ``from_status`` or was erased (an erased record has no
        content left to bring back)."""
        if status in ("deleted", from_status) or status not in RECORD_STATUSES:
            raise ValueError(f"cannot restore to {status!r}")
        with self.atomic() as conn:
            if conn.execute("SELECT 1 FROM records WHERE id = ? AND status = ? AND content != ''",
                            (record_id, from_status)).fetchone() is None:
                return None
            version = self.bump_version(conn)
            self._set_status(conn, [record_id], status, version)
            self._write_fts(conn, [record_id])
            return Transition(version, self._insert_event(conn, event))

    def forgotten_before(self, before: datetime) -> list[str]:
        """Forgotten records, not yet erased, whose latest forget is older than
        ``before``: the ones past their restore window."""
        with self._lock:
            return [row[0] for row in self._conn.execute(
                "SELECT r.id FROM records r WHERE r.status = 'deleted' AND r.content != ''"
                " AND (SELECT max(e.at) FROM events e WHERE e.record_id = r.id"
                " AND e.kind = 'record.forgotten') < ? ORDER BY r.seq", (to_iso(before),))]

    def update_lifecycle(self, record: Record) -> int:
        """Persist a reinforcement: confidence, counts, expiry, provenance, status (a
        reinforcement may confirm a provisional record). Returns the index_version."""
        with self.atomic() as conn:
            version = self.bump_version(conn)
            row = conn.execute(
                "UPDATE records SET status = ?, confidence = ?, reinforcements = ?,"
                " last_reinforced_at = ?, expires_at = CASE WHEN EXISTS (SELECT 1 FROM record_pins"
                " WHERE record_id = records.id) THEN NULL ELSE ? END, source_kind = ?, source_ref = ?,"
                " evidence = ?, review_flagged_at = ?, index_version = ? WHERE id = ? RETURNING seq",
                (
                    record.status, record.confidence, record.reinforcements,
                    ts(record.last_reinforced_at), ts(record.expires_at), record.source_kind,
                    record.source_ref, record.evidence, ts(record.review_flagged_at), version,
                    record.id,
                ),
            ).fetchone()
            if row is None:
                raise StoreError(f"no record {record.id}")
            if record.status == "deleted":
                conn.execute("DELETE FROM records_fts WHERE rowid = ?", (row[0],))
            conn.execute("UPDATE record_activation SET live = ? WHERE record_id = ?",
                         (int(record.status in ("provisional", "confirmed")), record.id))
            record.index_version = version
            return version

    def add_conflict(self, record_id: str, other_id: str) -> None:
        """Link two incompatible claims, in both directions."""
        noted = to_iso(self.clock.now())
        with self.atomic() as conn:
            _CONFLICT_ROWS.executemany(conn, [(record_id, other_id, noted), (other_id, record_id, noted)])

    def conflicts_of(self, record_id: str) -> list[str]:
        with self._lock:
            return [r[0] for r in self._conn.execute(
                "SELECT other_id FROM record_conflicts WHERE record_id = ? ORDER BY other_id",
                (record_id,),
            )]

    def conflicts_among(self, record_ids: Sequence[str]) -> dict[str, list[str]]:
        """:meth:`conflicts_of` for several records in one query: each id that has
        conflicts maps to its other ids, in order."""
        out: dict[str, list[str]] = {}
        with self._lock:
            for chunk in chunks(list(dict.fromkeys(record_ids))):
                for record_id, other_id in self._conn.execute(
                    "SELECT record_id, other_id FROM record_conflicts"
                    f" WHERE record_id IN ({marks(chunk)}) ORDER BY record_id, other_id",
                    chunk,
                ):
                    out.setdefault(record_id, []).append(other_id)
        return out

    def counted_refs(self, record_id: str) -> set[str]:
        """The source references already counted for a record: its own and every counted
        reinforcement's. Only a new reference counts as independent support."""
        with self.snapshot() as conn:
            row = conn.execute("SELECT source_ref FROM records WHERE id = ?", (record_id,)).fetchone()
            refs = {row[0]} if row and row[0] else set()
            refs.update(
                ref for (ref,) in conn.execute(
                    "SELECT json_extract(payload, '$.source_ref') FROM events"
                    " WHERE record_id = ? AND kind = 'record.reinforced'"
                    f" AND {self._COUNTED_TRUE}",
                    (record_id,),
                ) if ref
            )
        return refs

    # -- named reads --------------------------------------------------------------------

    def get_record(self, record_id: str) -> Record | None:
        """One record with its entity links (about links first), or None."""
        found = self._select("id = ?", [record_id])
        return found[0] if found else None

    def records(self, ids: Sequence[str]) -> list[Record]:
        """The records with these ids that exist, in store order."""
        out: list[Record] = []
        for chunk in chunks(list(dict.fromkeys(ids))):
            out += self._select(f"id IN ({marks(chunk)})", chunk)
        return sorted(out, key=lambda r: r.seq or 0)

    def find_records(
        self,
        *,
        scopes: Sequence[Scope] | None = None,
        statuses: Sequence[str] | None = None,
        subject_entity_id: str | None = None,
        source_kind: str | None = None,
        source_ref: str | None = None,
        supersedes_id: str | None = None,
        content: str | None = None,
        id_suffix: str | None = None,
        limit: int | None = None,
    ) -> list[Record]:
        """Records matching every filter given, in store order (oldest first).

        ``scopes`` restricts to those scopes (an empty list matches nothing); ``id_suffix``
        matches the end of the id, as the short ids in rendered results do.
        """
        where: list[str] = []
        params: list[Any] = []
        if scopes is not None:
            if not scopes:
                return []
            sql, scope_params = scope_clause(scopes)
            where.append(sql)
            params += scope_params
        if statuses is not None:
            where.append(f"status IN ({marks(statuses)})")
            params += list(statuses)
        for column, value in (("subject_entity_id", subject_entity_id), ("source_kind", source_kind),
                              ("source_ref", source_ref), ("supersedes_id", supersedes_id),
                              ("content", content)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        if id_suffix is not None:
            escaped = id_suffix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            where.append("id LIKE ? ESCAPE '\\'")
            params.append("%" + escaped)
        return self._select(" AND ".join(where) or "1 = 1", params, limit=limit)

    def active_for_subject(
        self,
        scope: Scope,
        type_: str,
        entity_id: str,
        now: datetime,
        *,
        attribute: str | None = None,
        limit: int | None = None,
    ) -> list[Record]:
        """Active, unexpired records about one entity in one scope and type (optionally
        one attribute), most recently reinforced first: the order the write path's scan
        cap keeps."""
        where = (
            "scope_kind = ? AND scope_id = ? AND subject_entity_id = ? AND type = ?"
            f" AND status IN {ACTIVE_SQL} AND (expires_at IS NULL OR expires_at >= ?)"
        )
        params: list[Any] = [scope.kind, scope.id, entity_id, type_, to_iso(now)]
        if attribute is not None:
            # One attribute's few rows come from records_subject; SQLite would otherwise
            # walk records_subject_recent, every record about the subject, for its order.
            where = where.replace("AND type = ?", f"AND {self._NOT_INDEXED}type = ?")
            where += " AND attribute = ?"
            params.append(attribute)
        return self._select(
            where, params, order="coalesce(last_reinforced_at, created_at) DESC, seq DESC", limit=limit
        )

    def active_subjects(self, scopes: Sequence[Scope], now: datetime, limit: int) -> list[str]:
        """Distinct subjects of active, unexpired semantic and procedural records in
        ``scopes``, most recently touched first, at most ``limit``."""
        if not scopes or limit <= 0:
            return []
        where, params = scope_clause(scopes)
        with self._lock:
            rows = self._conn.execute(
                f"SELECT subject FROM records WHERE {where} AND status IN {ACTIVE_SQL}"
                " AND type != 'episodic' AND (expires_at IS NULL OR expires_at >= ?)"
                " GROUP BY subject ORDER BY max(coalesce(last_reinforced_at, created_at)) DESC,"
                " subject LIMIT ?",
                [*params, to_iso(now), limit],
            ).fetchall()
        return [str(r[0]) for r in rows]

    def lineage_ids(self, record_id: str) -> list[str]:
        """The supersession chain through ``record_id``, oldest first."""
        # Both walks are bounded, so a corrupt cycle cannot loop forever.
        with self._lock:
            rows = self._conn.execute(
                "WITH RECURSIVE"
                " back(id, sup, d) AS (SELECT id, supersedes_id, 0 FROM records WHERE id = ?1"
                "   UNION ALL SELECT r.id, r.supersedes_id, b.d - 1 FROM records r"
                "   JOIN back b ON r.id = b.sup WHERE b.d > -?2),"
                " fwd(id, d) AS (SELECT id, 0 FROM records WHERE id = ?1"
                "   UNION ALL SELECT r.id, f.d + 1 FROM records r"
                "   JOIN fwd f ON r.supersedes_id = f.id WHERE f.d < ?2)"
                " SELECT id, d FROM back UNION ALL SELECT id, d FROM fwd ORDER BY d",
                (record_id, _LINEAGE_BOUND)).fetchall()
        return list(dict.fromkeys(str(r[0]) for r in rows))

    def count_records(self) -> int:
        """Every record row, tombstones included."""
        with self._lock:
            return int(self._conn.execute("SELECT count(*) FROM records").fetchone()[0])

    def scope_records(self, scope: Scope, statuses: Sequence[str]) -> list[Record]:
        """Every record of ``scope`` in one of ``statuses``, oldest first, for the commands
        that read a whole scope (``dump``).

        A damaged index page can make SQLite return fewer rows without any error, and a
        dump that silently drops records is worse than none. So the rows read through the
        scope index are counted again by a scan of the table itself, in the same snapshot,
        and a disagreement raises :class:`~retold.errors.StoreCorruptError`."""
        sql, params = scope_clause([scope])
        where = f"{sql} AND status IN ({marks(statuses)})"
        params = [*params, *statuses]
        with self._one_view() as conn:
            found = self._select_in(conn, where, params)
            scanned = self._scanned_count(conn, where, params)
        if scanned is not None and scanned != len(found):
            self._index_disagrees(f"its scope index lists {len(found)} records of {scope} where a scan of"
                                  f" the table finds {scanned}")
        return found

    def _select(
        self, where: str, params: Sequence[Any], *, order: str = "seq", limit: int | None = None
    ) -> list[Record]:
        """Records matching a condition built in this module, with their entity links,
        read in one snapshot."""
        with self._one_view() as conn:
            return self._select_in(conn, where, params, order=order, limit=limit)

    def _select_in(self, conn: Any, where: str, params: Sequence[Any], *, order: str = "seq",
                   limit: int | None = None) -> list[Record]:
        sql = f"SELECT {self._RECORD_SELECT} FROM records WHERE {where} ORDER BY {order}"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        cursor = conn.execute(sql, tuple(params))
        names = [d[0] for d in cursor.description]
        rows = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
        links = self._record_links(conn, rows)
        return [record_from_row(row, links[row["id"]]) for row in rows]

    def _record_links(self, conn: Any, rows: list[dict[str, Any]]) -> dict[str, list[str]]:
        """The linked entity ids of each selected record, about links first."""
        links: dict[str, list[str]] = {row["id"]: [] for row in rows}
        for chunk in chunks(list(links)):
            for record_id, entity_id in conn.execute(
                "SELECT record_id, entity_id FROM record_entities"
                f" WHERE record_id IN ({marks(chunk)}) ORDER BY role = 'mentions', entity_id",
                chunk,
            ):
                links[record_id].append(entity_id)
        return links


def record_from_row(row: dict[str, Any], entity_ids: list[str]) -> Record:
    """A ``records`` row (column -> value) and its linked entity ids as a Record."""
    return Record(
        id=row["id"],
        type=row["type"],
        version=row["version"],
        content=row["content"],
        subject=row["subject"],
        subject_entity_id=row["subject_entity_id"],
        attribute=row["attribute"],
        scope=Scope(row["scope_kind"], row["scope_id"]),
        source_kind=row["source_kind"],
        source_ref=row["source_ref"],
        creator_agent_id=row["creator_agent_id"],
        evidence=row["evidence"],
        created_at=from_iso(row["created_at"]),
        event_at=from_iso(row["event_at"]),
        expires_at=dt(row["expires_at"]),
        valid_from=dt(row["valid_from"]),
        valid_until=dt(row["valid_until"]),
        review_at=dt(row["review_at"]),
        review_flagged_at=dt(row["review_flagged_at"]),
        confidence=row["confidence"],
        status=row["status"],
        supersedes_id=row["supersedes_id"],
        reinforcements=row["reinforcements"],
        last_reinforced_at=dt(row["last_reinforced_at"]),
        tags=json.loads(row["tags"]),
        entity_ids=entity_ids,
        index_version=row["index_version"],
        seq=row["seq"],
        sensitivity=row.get("sensitivity", "none"),  # a store not yet migrated has neither
        redacted_content=row.get("redacted_content"),
        sensitivity_label=row.get("sensitivity_label"),
    )
