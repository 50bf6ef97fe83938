"""Sweeps the runtime never runs on its own: expiry, transcript retention, due-review
claims, snapshots and unmapped legacy rows (re-embedding is in vectors.py, erasure in
erasure.py, the retention of search logs and event payloads in retention.py).

Every write runs in one :meth:`StoreBase.atomic` transaction together with the audit
events it owes, and every change the vector index must see bumps ``records_version``
once per transaction and stamps the touched rows' ``index_version`` with it.
:mod:`retold.operations` wraps these methods for the CLI and the workers.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from retold.clock import to_iso
from retold.errors import StoreError
from retold.models import ACTIVE_STATUSES
from retold.store.base import ACTIVE_SQL, NewEvent, StoreBase
from retold.store.damage import clear_damage
from retold.store.migrations import check_not_newer

__all__ = ["ChangedRow", "SweepsMixin", "MigrationIssue"]



@dataclass(frozen=True)
class ChangedRow:
    """One record a sweep changed, with the records_version it committed under."""

    record_id: str
    index_version: int


@dataclass(frozen=True)
class MigrationIssue:
    """One row of ``migration_issues``: a legacy record a migration could not map."""

    migration_version: int
    record_id: str
    issue: str


class SweepsMixin(StoreBase):
    """Bulk operations over the store."""

    # -- expiry ----------------------------------------------------------------------------

    def expire_past(self, now: datetime, actor: str) -> list[ChangedRow]:
        """Set every active record with ``expires_at < now`` to expired, one
        ``record.status`` event each, in one transaction."""
        with self.atomic() as conn:
            due = conn.execute(
                f"SELECT id, status, expires_at FROM records WHERE status IN {ACTIVE_SQL}"
                " AND expires_at IS NOT NULL AND expires_at < ?"
                " AND id NOT IN (SELECT record_id FROM record_pins) ORDER BY seq",
                (to_iso(now),),
            ).fetchall()
            if not due:
                return []
            version = self.bump_version(conn)
            out = []
            self._set_status(conn, [row[0] for row in due], "expired", version)
            for record_id, status, expires_at in due:
                self._insert_event(conn, NewEvent(
                    "record.status", actor, {"from": status, "to": "expired",
                                             "reason": "expires_at passed", "expires_at": expires_at},
                    record_id))
                out.append(ChangedRow(record_id, version))
            return out

    def expire_older(self, record_type: str, created_before: datetime, actor: str,
                     days: int) -> list[ChangedRow]:
        """Set every active ``record_type`` record created before ``created_before`` to
        expired (a memory pack's ``retention_days``), one ``record.status`` event each, in
        one transaction. Pinned records stay, as they do past ``expires_at``."""
        with self.atomic() as conn:
            due = conn.execute(
                f"SELECT id, status FROM records WHERE status IN {ACTIVE_SQL} AND type = ?"
                " AND created_at < ? AND id NOT IN (SELECT record_id FROM record_pins) ORDER BY seq",
                (record_type, to_iso(created_before)),
            ).fetchall()
            if not due:
                return []
            version = self.bump_version(conn)
            self._set_status(conn, [row[0] for row in due], "expired", version)
            for record_id, status in due:
                self._insert_event(conn, NewEvent(
                    "record.status", actor, {"from": status, "to": "expired", "reason": "retention",
                                             "days": days}, record_id))
            return [ChangedRow(row[0], version) for row in due]

    # -- transcript retention ----------------------------------------------------------------

    def blank_retained_sessions(
        self, ended_before: datetime, actor: str, retain_days: int
    ) -> list[tuple[str, int]]:
        """Blank the turns of extracted sessions that ended before ``ended_before`` and
        delete their persisted extraction stages, which quote the transcript.

        Turn rows stay so source references still resolve; a session without
        ``extracted_at`` is never touched (its facts are not extracted yet). Sessions
        already blank are skipped, so a re-run logs nothing. Returns
        ``(session_id, turns_blanked)`` pairs.
        """
        with self.atomic() as conn:
            sessions = conn.execute(
                "SELECT s.id FROM sessions s WHERE s.extracted_at IS NOT NULL"
                " AND s.ended_at IS NOT NULL AND s.ended_at < ?"
                " AND (EXISTS (SELECT 1 FROM session_turns t WHERE t.session_id = s.id"
                "              AND t.content != '')"
                "      OR EXISTS (SELECT 1 FROM extraction_stages x WHERE x.session_id = s.id))"
                " ORDER BY s.id",
                (to_iso(ended_before),),
            ).fetchall()
            out = []
            for (session_id,) in sessions:
                turns = conn.execute(
                    "UPDATE session_turns SET content = '' WHERE session_id = ? AND content != ''",
                    (session_id,),
                ).rowcount
                stages = conn.execute(
                    "DELETE FROM extraction_stages WHERE session_id = ?", (session_id,)).rowcount
                self._insert_event(conn, NewEvent(
                    "session.transcript_blanked", actor,
                    {"session_id": session_id, "turns": turns, "stages": stages,
                     "reason": "retention", "retain_days": retain_days}))
                out.append((session_id, turns))
            return out

    # -- due review ------------------------------------------------------------------------

    def claim_due_reviews(self, now: datetime, limit: int, actor: str) -> list[ChangedRow]:
        """Flag at most ``limit`` due active records, one ``record.review_due`` each.

        The claim is one conditional UPDATE ... RETURNING under the write lock, so two
        callers (threads or processes) never flag, or log, the same row twice.
        """
        stamp = to_iso(now)
        with self.atomic() as conn:
            due = conn.execute(
                "SELECT 1 FROM records WHERE review_at <= ? AND review_flagged_at IS NULL"
                f" AND status IN {ACTIVE_SQL} LIMIT 1", (stamp,)).fetchone()
            if due is None:
                return []
            version = self.bump_version(conn)
            rows = conn.execute(
                "UPDATE records SET review_flagged_at = ?1, index_version = ?2 WHERE id IN ("
                "  SELECT id FROM records WHERE review_at <= ?1 AND review_flagged_at IS NULL"
                f"  AND status IN {ACTIVE_SQL} ORDER BY review_at, seq LIMIT ?3)"
                " AND review_flagged_at IS NULL RETURNING id, review_at, valid_from, valid_until",
                (stamp, version, limit)).fetchall()
            claims = []
            for record_id, review_at, valid_from, valid_until in sorted(rows, key=lambda r: (r[1], r[0])):
                self._insert_event(conn, NewEvent(
                    "record.review_due", actor,
                    {"record_id": record_id, "review_at": review_at,
                     "valid_from": valid_from, "valid_until": valid_until}, record_id))
                claims.append(ChangedRow(record_id, version))
            return claims

    # -- snapshots ---------------------------------------------------------------------------

    def backup_to(self, path: str | Path) -> None:
        """Copy the whole database to a new file with SQLite's online backup API."""
        with self._lock:
            if self._depth:
                raise StoreError("a snapshot cannot be taken inside a transaction")
            target = sqlite3.connect(str(path))
            try:
                self._conn.backup(target)
            finally:
                target.close()

    def restore_from(self, path: str | Path) -> None:
        """Replace this database's content with a Retold store file's (read-only source).

        Raises StoreError when the source is not a Retold store or is newer than this code.
        """
        source = Path(path).resolve()
        try:
            reader = sqlite3.connect(f"{source.as_uri()}?mode=ro", uri=True)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open snapshot {path}: {exc}") from exc
        try:
            try:
                known = reader.execute(
                    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'"
                ).fetchone()
            except sqlite3.DatabaseError as exc:
                raise StoreError(f"{path} is not a Retold store: {exc}") from exc
            if known is None:
                raise StoreError(f"{path} is not a Retold store (no schema_migrations table)")
            check_not_newer(reader, str(path))
            with self._lock:
                if self._depth:
                    raise StoreError("a snapshot cannot be loaded inside a transaction")
                reader.backup(self._conn)
                self.replaced += 1
                clear_damage(self.path)  # the damaged content is gone; the caller checked the snapshot
                if self.path != ":memory:":
                    self._conn.execute("PRAGMA journal_mode = WAL")
        finally:
            reader.close()
        self.migrate()

    # -- unmapped legacy rows ----------------------------------------------------------------

    def migration_issues(self) -> list[MigrationIssue]:
        """Every unresolved row of ``migration_issues``."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT migration_version, record_id, issue FROM migration_issues"
                " ORDER BY migration_version, record_id").fetchall()
        return [MigrationIssue(int(v), str(r), str(i)) for v, r, i in rows]

    def expire_unmapped(self, actor: str) -> list[ChangedRow]:
        """Retire every record listed in ``migration_issues``: status expired, one
        ``record.status`` event each, and the issue rows cleared."""
        with self.atomic() as conn:
            rows = conn.execute(
                "SELECT DISTINCT m.record_id, r.status FROM migration_issues m"
                " JOIN records r ON r.id = m.record_id ORDER BY m.record_id").fetchall()
            out: list[ChangedRow] = []
            if rows:
                version = self.bump_version(conn)
                live = [(record_id, status) for record_id, status in rows if status in ACTIVE_STATUSES]
                self._set_status(conn, [record_id for record_id, _ in live], "expired", version)
                for record_id, status in live:
                    self._insert_event(conn, NewEvent(
                        "record.status", actor,
                        {"from": status, "to": "expired",
                         "reason": "unmapped legacy record retired by migrate"}, record_id))
                out = [ChangedRow(record_id, version) for record_id, _ in rows]
            conn.execute("DELETE FROM migration_issues")
            return out
