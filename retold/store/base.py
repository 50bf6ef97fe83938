"""StoreBase: the connection, its one transaction helper and records_version (LLD 3, 7).

The concept modules of ``retold.store`` (records, entities, sessions, grants, events)
are mixins over this base; :class:`retold.store.Store` combines them. Every write goes
through :meth:`StoreBase.atomic` (``BEGIN IMMEDIATE``; a SAVEPOINT when nested).
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from retold.errors import MigrationIssuesError, NotADatabaseError, StoreError
from retold.store.migrations import MigrationReport, check_not_newer, migrate
from retold.util import Clock, SystemClock, from_iso, new_id, to_iso

__all__ = ["StoreBase", "dt", "marks", "ts"]

_SQLITE_MAGIC = b"SQLite format 3\x00"


def ts(moment: datetime | None) -> str | None:
    """A datetime as stored text (None stays None)."""
    return None if moment is None else to_iso(moment)


def dt(text: str | None) -> datetime | None:
    """Stored text as a datetime (None stays None)."""
    return None if text is None else from_iso(text)


def marks(values: Iterable[object]) -> str:
    """``?, ?, ?`` for an IN list."""
    return ", ".join("?" for _ in values)


class StoreBase:
    """One connection to the store file, safe to share between threads of a process."""

    def __init__(
        self,
        path: str | Path,
        *,
        busy_timeout_seconds: float = 30.0,
        clock: Clock | None = None,
        allow_migration_issues: bool = False,
        migrate_schema: bool = True,
    ) -> None:
        self.path = str(path)
        self.clock: Clock = clock or SystemClock()
        self._lock = threading.RLock()
        self._depth = 0
        self._refuse_foreign_file()
        try:
            self._conn = sqlite3.connect(
                self.path,
                timeout=busy_timeout_seconds,
                isolation_level=None,  # we issue BEGIN IMMEDIATE ourselves
                check_same_thread=False,  # guarded by self._lock
            )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open store {self.path}: {exc}") from exc
        try:
            self._conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_seconds * 1000)}")
            # Read-only checks first, so a refused file is left exactly as it was.
            check_not_newer(self._conn, self.path)
            if self.path != ":memory:":
                self._conn.execute("PRAGMA journal_mode = WAL")
            self._conn.execute("PRAGMA foreign_keys = ON")
            self._conn.execute("PRAGMA synchronous = NORMAL")  # safe under WAL
            self.migration_report = migrate(self._conn, self.path) if migrate_schema else None
        except sqlite3.DatabaseError as exc:
            self._conn.close()
            raise NotADatabaseError(f"{self.path} is not a Retold store: {exc}") from exc
        except BaseException:
            self._conn.close()
            raise
        report = self.migration_report
        if report and report.unresolved and not allow_migration_issues:
            self._conn.close()
            raise MigrationIssuesError(
                f"store {self.path} has {report.unresolved} legacy records that a migration "
                "could not map; run `retold migrate` to review them"
            )

    def _refuse_foreign_file(self) -> None:
        """LLD 3: refuse a file that is not SQLite before sqlite3 writes anything to it."""
        if self.path == ":memory:":
            return
        target = Path(self.path)
        if target.is_dir():
            raise NotADatabaseError(f"store path {self.path} is a directory")
        if target.exists() and target.stat().st_size > 0:
            with target.open("rb") as handle:
                if handle.read(16) != _SQLITE_MAGIC:
                    raise NotADatabaseError(f"{self.path} is not a SQLite database; refusing to open it")

    # -- transactions -------------------------------------------------------------

    @contextmanager
    def atomic(self) -> Iterator[sqlite3.Connection]:
        """One write transaction; nested calls become SAVEPOINTs.

        ``BEGIN IMMEDIATE`` takes the write lock up front, so concurrent writers in other
        processes queue on ``busy_timeout`` instead of failing on lock upgrade. A failure
        while rolling back never replaces the error that caused the rollback.
        """
        with self._lock:
            depth = self._depth
            savepoint = f"retold_sp_{depth}"
            self._conn.execute("BEGIN IMMEDIATE" if depth == 0 else f"SAVEPOINT {savepoint}")
            self._depth = depth + 1
            try:
                yield self._conn
            except BaseException:
                try:
                    if depth == 0:
                        self._conn.execute("ROLLBACK")
                    else:
                        self._conn.execute(f"ROLLBACK TO {savepoint}")
                        self._conn.execute(f"RELEASE {savepoint}")
                except sqlite3.Error:
                    pass  # keep the original error
                raise
            else:
                if depth == 0:
                    try:
                        self._conn.execute("COMMIT")
                    except BaseException:
                        try:
                            self._conn.execute("ROLLBACK")
                        except sqlite3.Error:
                            pass
                        raise
                else:
                    self._conn.execute(f"RELEASE {savepoint}")
            finally:
                self._depth = depth

    @contextmanager
    def snapshot(self) -> Iterator[sqlite3.Connection]:
        """A consistent read: several statements see one WAL snapshot."""
        with self._lock:
            if self._depth or self._conn.in_transaction:
                yield self._conn  # already inside a transaction or another snapshot
                return
            self._conn.execute("BEGIN")
            try:
                yield self._conn
            finally:
                self._conn.execute("COMMIT")

    @property
    def in_transaction(self) -> bool:
        return self._depth > 0

    def migrate(self) -> MigrationReport:
        """Apply pending migrations (idempotent) and report what remains."""
        with self._lock:
            self.migration_report = migrate(self._conn, self.path)
            return self.migration_report

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    # -- records_version (LLD 7) ----------------------------------------------------

    def records_version(self) -> int:
        with self._lock:
            return self.read_version(self._conn)

    @staticmethod
    def read_version(conn: sqlite3.Connection) -> int:
        """``store_meta.records_version`` as seen by ``conn``'s current snapshot (LLD 7)."""
        row = conn.execute("SELECT value FROM store_meta WHERE key = 'records_version'").fetchone()
        return int(row[0])

    def insert_event(
        self,
        conn: sqlite3.Connection,
        kind: str,
        actor: str,
        payload: dict[str, Any],
        record_id: str | None = None,
        entity_id: str | None = None,
    ) -> str:
        """Append one audit event inside the caller's transaction (LLD 3.6)."""
        event_id = new_id()
        conn.execute(
            "INSERT INTO events(id, at, kind, actor, record_id, entity_id, payload)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (event_id, to_iso(self.clock.now()), kind, actor, record_id, entity_id,
             json.dumps(payload, sort_keys=True, default=str)),
        )
        return event_id

    def bump_version(self, conn: sqlite3.Connection) -> int:
        """Increment records_version inside the current transaction and return it (LLD 7)."""
        if not self._depth:
            raise StoreError("records_version may only change inside Store.atomic()")
        row = conn.execute(
            "UPDATE store_meta SET value = value + 1 WHERE key = 'records_version' RETURNING value"
        ).fetchone()
        return int(row[0])
