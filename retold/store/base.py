"""StoreBase: the connection, its one transaction helper and what every part shares.

The parts of :class:`retold.store.Store` (records, vectors, entities, sessions, grants,
search, maintenance, erasure) are mixins over this base. Every write goes through
:meth:`StoreBase.atomic` (``BEGIN IMMEDIATE``; a SAVEPOINT when nested). The helpers every
part needs live here too: the ``records_version`` counter, the audit log, a record's FTS
row and its status, so no part reaches into a sibling. Every access holds the
connection's :class:`~retold.store.failures.StoreLock`, which reports a held lock, a
read-only file, a full disk or a damaged page as its own Retold error. See
docs/architecture.md, "The store".
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Self

import numpy as np

from retold.clock import Clock, SystemClock, from_iso, new_id, to_iso
from retold.errors import (
    MigrationIssuesError,
    NotADatabaseError,
    StoreCorruptError,
    StoreError,
    StoreReadOnlyError,
)
from retold.models import ACTIVE_STATUSES, RECORD_STATUSES, Scope
from retold.store.damage import damage_noted, note_damage
from retold.store.failures import StoreLock
from retold.store.family import EmbeddingFamily, read_family, write_family
from retold.store.fts import write_fts_rows
from retold.store.migrations import LATEST, MigrationReport, check_is_retold, check_not_newer, migrate
from retold.store.opening import connect, journal_mode, read_only_reason
from retold.store.upserts import Upsert
from retold.store.write_window import WriteWindow, read_window
from retold.tenant import DEFAULT_TENANT

__all__ = ["ACTIVE_SQL", "LINK_ROLES", "LINK_ROWS", "Embedding", "NewEvent", "StoreBase", "chunks", "dt",
           "marks", "scope_clause", "ts"]

LINK_ROLES: tuple[str, ...] = ("about", "mentions")  # a record is about one entity, mentions others
# A record's links to entities; a link already there keeps its role.
LINK_ROWS = Upsert("record_entities", ("record_id", "entity_id", "role"))
# A record's vector, replacing the one it had.
_PUT_VECTOR = Upsert("embeddings", ("record_id", "model", "version", "dims", "vector", "index_version"),
                     update=("model", "version", "dims", "vector", "index_version"))
log = logging.getLogger(__name__)

_CHUNK = 500  # ids per IN list: far below SQLite's bound-parameter limit
ACTIVE_SQL = f"({', '.join(repr(s) for s in ACTIVE_STATUSES)})"  # the live statuses, as an SQL list
_EVENT_KEYS = ("id", "at", "kind", "actor", "record_id", "entity_id", "payload")
# The tables a memory write or an erase can touch, as counted by row_counts().
# The two indexes of ``records`` that lead with the scope (see _scope_indexes_agree).
_SCOPE_INDEXES = ("records_scope", "records_subject")
_CONTENT_TABLES = (
    "records", "records_fts", "embeddings", "entities", "entity_aliases", "record_entities",
    "record_conflicts", "events", "grants", "scope_members", "sessions", "session_turns", "search_log",
    "record_activation", "profile_blocks", "turn_decisions",
)


def ts(moment: datetime | None) -> str | None:
    """A datetime as stored text (None stays None)."""
    return None if moment is None else to_iso(moment)


def dt(text: str | None) -> datetime | None:
    """Stored text as a datetime (None stays None)."""
    return None if text is None else from_iso(text)


def marks(values: Iterable[object]) -> str:
    """``?, ?, ?`` for an IN list."""
    return ", ".join("?" for _ in values)


def chunks(values: Sequence[str]) -> Iterator[list[str]]:
    """``values`` in slices short enough for one IN list each."""
    for start in range(0, len(values), _CHUNK):
        yield list(values[start : start + _CHUNK])


def scope_clause(scopes: Sequence[Scope], prefix: str = "") -> tuple[str, list[str]]:
    """``((kind = ? AND id = ?) OR ...)`` over ``scopes`` with its parameters; ``prefix``
    names the table alias (``"e."``). The one place scope filters are written."""
    sql = " OR ".join([f"({prefix}scope_kind = ? AND {prefix}scope_id = ?)"] * len(scopes))
    return f"({sql})", [part for scope in scopes for part in (scope.kind, scope.id)]


@dataclass(frozen=True)
class NewEvent:
    """An audit event to append in the same transaction as the change it describes."""

    kind: str
    actor: str
    payload: dict[str, Any] = field(default_factory=dict)
    record_id: str | None = None
    entity_id: str | None = None


@dataclass(frozen=True)
class Embedding:
    """A record's vector with the model and version that produced it."""

    model: str
    version: str
    vector: np.ndarray


class StoreBase:
    """One connection to the store file, safe to share between threads of a process.

    The class attributes below are what a PostgreSQL store (``retold.store.postgres.store``)
    replaces, with :meth:`_open`, :meth:`_begin_write` and the lexical queries.
    """

    backend = "sqlite"
    # Whether FTS rows read the redacted content (see _has_redacted_content); PostgreSQL
    # writes its FTS rows with its own statement, always on the latest schema.
    _fts_redacted = True
    _BEGIN_READ = "BEGIN"  # one WAL snapshot for several reads
    _BUMP_VERSION = "UPDATE store_meta SET value = value + 1 WHERE key = 'records_version' RETURNING value"
    # A counted reinforcement: JSON true, which SQLite's json_extract reads as 1.
    _COUNTED_TRUE = "json_extract(payload, '$.counted') = 1"
    # Appended to a SELECT that must keep its row from changing until the commit, where the
    # transaction may not hold the store's write lock (PostgreSQL).
    _LOCK_ROW = ""
    # SQLite's unary + on a column: "use no index for this term" (PostgreSQL has none).
    _NOT_INDEXED = "+"
    # How many times restore_from replaced this connection's content: what a process kept
    # of the old content (by records_version) describes another store.
    replaced = 0
    _driver_errors: tuple[type[Exception], ...] = (sqlite3.Error,)
    _integrity_errors: tuple[type[Exception], ...] = (sqlite3.IntegrityError,)

    def __init__(
        self,
        path: str | Path,
        *,
        busy_timeout_seconds: float = 30.0,
        clock: Clock | None = None,
        allow_migration_issues: bool = False,
        migrate_schema: bool = True,
        read_only: bool = False,
        tenant: str = DEFAULT_TENANT,
    ) -> None:
        self.path = str(path)  # what messages name (a PostgreSQL URL without its password)
        # The tenant this connection is bound to: on SQLite the file already is the tenant's;
        # PostgreSQL binds the connection to it (docs/decisions.md, "A tenant is a namespace").
        self.tenant = tenant
        self._target = str(path)  # what a second connection opens
        self.clock: Clock = clock or SystemClock()
        self.busy_timeout_seconds = busy_timeout_seconds
        self._read_only_asked = read_only
        self._depth = 0
        # A late-locked transaction (atomic(late_lock=True)): the version it began at
        # while its window is open, and whether it holds the write lock yet.
        self._late_since: int | None = None
        self._late_locked: int | None = None  # the depth it was taken at
        self._window_read = False  # lock_for_write has reported the window
        self._indexes_checked = False  # _check_indexes_once has passed on this connection
        self._open(migrate_schema)
        report = self.migration_report
        if report and report.unresolved and not allow_migration_issues:
            self._conn.close()
            raise MigrationIssuesError(
                f"store {self.path} has {report.unresolved} legacy records that a migration "
                "could not map; run `retold migrate` to review them"
            )

    def _open(self, migrate_schema: bool) -> None:
        """Open the file (read-only when asked or when it cannot be written), check it and
        migrate it; sets ``_conn``, ``_lock``, ``read_only`` and ``migration_report``."""
        reason = None if self.path == ":memory:" else read_only_reason(self.path, self._read_only_asked)
        self.read_only = reason is not None
        if reason and not self._read_only_asked:
            log.warning("store %s: %s; opened read-only, so searches and reads work and writes "
                        "are refused", self.path, reason)
        self._lock = StoreLock(self.path, self.busy_timeout_seconds, reason)
        self._refuse_foreign_file()
        with self._lock:  # a failure while opening is reported like any later one
            self._conn: Any = connect(self.path, self.busy_timeout_seconds, reason)
            try:
                self.migration_report = self._prepare(migrate_schema)
            except BaseException:
                self._conn.close()
                raise

    def _prepare(self, migrate_schema: bool) -> MigrationReport | None:
        """Check the file, set the connection's pragmas and apply pending migrations.

        Everything before a migration only reads, so a refused file is left exactly as it
        was, and a store with no migration pending opens without taking the write lock.
        """
        conn = self._conn
        conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_seconds * 1000)}")
        version = check_not_newer(conn, self.path)
        check_is_retold(conn, self.path, version)
        if self.read_only and version < LATEST:
            raise StoreReadOnlyError(
                f"store {self.path} has schema version {version} and needs a migration to {LATEST}, "
                f"but it is read-only ({self._lock.read_only_reason}); open it once with write access")
        if not self.read_only and self.path != ":memory:" and journal_mode(conn) != "wal":
            conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA synchronous = NORMAL")  # safe under WAL
        report = migrate(conn, self.path) if migrate_schema and not self.read_only else None
        self._fts_redacted = self._has_redacted_content()
        return report

    def _has_redacted_content(self) -> bool:
        """Whether ``records`` has its redacted form yet: a store opened without migrating
        it (a second connection, a test's older schema) may be older than that column."""
        return any(row[1] == "redacted_content"
                   for row in self._conn.execute("PRAGMA table_info(records)").fetchall())

    def second_connection(self) -> Self:
        """Another Store on the same file with its own connection (and lock), for work that
        must never make this one's threads wait, such as a background writer queueing on
        ``busy_timeout``. The schema is not migrated again. ``:memory:`` cannot be shared."""
        if self.path == ":memory:":
            raise StoreError("an in-memory store cannot be opened twice")
        return type(self)(self._target, busy_timeout_seconds=self.busy_timeout_seconds,
                          clock=self.clock, migrate_schema=False, read_only=self._read_only_asked,
                          tenant=self.tenant)

    def _refuse_foreign_file(self) -> None:
        """Refuse a directory; a file that is not SQLite is refused by ``connect``, which
        reads its header through SQLite rather than with ``open()`` (see ``refuse_foreign``)."""
        if self.path != ":memory:" and Path(self.path).is_dir():
            raise NotADatabaseError(f"store path {self.path} is a directory")

    # -- transactions -------------------------------------------------------------

    def _begin_write(self) -> None:
        """Start the outermost write transaction, holding the store's write lock."""
        self._conn.execute("BEGIN IMMEDIATE")

    def _refuse_if_damaged(self) -> None:
        """Refuse a write to a store some process has seen damaged (``retold.store.damage``)."""
        noted = damage_noted(self.path)
        if noted is not None:
            raise StoreCorruptError(
                f"store {self.path} was found damaged ({noted}); writes are refused until `retold check "
                f"--store {self.path}` passes: restore the store from a snapshot, nothing was changed")

    def _begin_late(self) -> int | None:
        """Start the outermost write transaction of :meth:`atomic` with ``late_lock``;
        return the ``records_version`` it began at when the write lock is not held yet.
        SQLite cannot write in parallel anyway, so it takes the lock at once (None)."""
        self._begin_write()
        return None

    def _take_write_lock(self) -> None:
        """Take the write lock inside a transaction begun by :meth:`_begin_late`."""
        raise StoreError("this store takes its write lock when the transaction begins")

    def _hold_write_lock(self) -> None:
        """Make sure the current transaction holds the write lock (before any write)."""
        if self._late_since is not None and self._late_locked is None:
            self._take_write_lock()
            # PostgreSQL releases a lock taken inside a savepoint when the savepoint rolls
            # back, so remember the depth it was taken at (see atomic's rollback).
            self._late_locked = self._depth

    def _exclude_search_log(self, conn: sqlite3.Connection) -> None:
        """Inside an erase: keep search-log inserts out until it commits (SQLite's write
        lock already does)."""

    def lock_for_write(self, entity_ids: Sequence[str] = (), *, model: str = "",
                       version: str = "") -> WriteWindow:
        """Hold the write lock from here on and return what changed since the transaction
        began: records changed by other writers (with their vectors of ``model`` and
        ``version``) and whether one of ``entity_ids`` stopped being active. Empty when the
        lock was held from the start, as it always is on SQLite. A later call returns
        only what changed after this one, which is nothing."""
        since = self._late_since
        if not self._depth or since is None or self._window_read:
            return WriteWindow()
        self._hold_write_lock()
        self._window_read = True
        return read_window(self._conn, since, entity_ids, model, version)

    @contextmanager
    def atomic(self, *, late_lock: bool = False) -> Iterator[sqlite3.Connection]:
        """One write transaction; nested calls become SAVEPOINTs.

        ``BEGIN IMMEDIATE`` takes the write lock up front, so concurrent writers in other
        processes queue on ``busy_timeout`` instead of failing on lock upgrade. A failure
        while rolling back never replaces the error that caused the rollback.

        ``late_lock`` is for a decide-and-write that can check its own decision: where
        the backend allows it (PostgreSQL), the transaction starts without the write lock,
        reads and decides, then calls :meth:`lock_for_write` and acts on what changed
        meanwhile. Any write before that call (a nested ``atomic()``, a version bump)
        takes the lock first, so every write still happens under it.
        """
        with self._lock:
            depth = self._depth
            savepoint = f"retold_sp_{depth}"
            if depth == 0:
                self._refuse_if_damaged()
                self._check_indexes_once()
                self._late_since, self._late_locked, self._window_read = None, None, False
                if late_lock:
                    self._late_since = self._begin_late()
                else:
                    self._begin_write()
            else:
                if not late_lock:
                    self._hold_write_lock()
                self._conn.execute(f"SAVEPOINT {savepoint}")
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
                        if self._late_locked is not None and self._late_locked > depth:
                            self._late_locked = None  # taken inside this savepoint: released
                except self._driver_errors:
                    pass  # keep the original error
                raise
            else:
                if depth == 0:
                    try:
                        self._conn.execute("COMMIT")
                    except BaseException:
                        try:
                            self._conn.execute("ROLLBACK")
                        except self._driver_errors:
                            pass
                        raise
                else:
                    self._conn.execute(f"RELEASE {savepoint}")
            finally:
                self._depth = depth
                if depth == 0:
                    self._late_since, self._late_locked, self._window_read = None, None, False

    def _scanned_count(self, conn: Any, where: str, params: Sequence[Any]) -> int | None:
        """How many records match ``where`` read without any index, SQLite's second
        access path: a damaged index page can make SQLite return fewer rows without any
        error, so a read of a whole scope counts its rows again this way, in the same
        snapshot. (PostgreSQL keeps page checksums and answers None here.)"""
        return int(conn.execute(f"SELECT count(*) FROM records NOT INDEXED WHERE {where}",
                                tuple(params)).fetchone()[0])

    def _scope_indexes_agree(self, conn: Any, scopes: Sequence[Scope], statuses: Sequence[str]) -> None:
        """Refuse a read of ``scopes`` when the two indexes that lead with a record's scope
        count its records in ``statuses`` differently. A damaged page of one of them makes
        SQLite return too few rows, or rows of nonsense, without any error; counting the
        same range of the other index is a second access path that costs a fraction of the
        read itself (a table scan, as ``dump`` does, would cost more than the read), so the
        search path can afford it each time it reads its eligible set.
        (PostgreSQL keeps page checksums; its store does nothing here.)"""
        for scope in scopes:
            scope_sql, params = scope_clause([scope])
            counts = [int(conn.execute(
                f"SELECT count(*) FROM records INDEXED BY {index} WHERE {scope_sql}"
                f" AND status IN ({marks(statuses)})", [*params, *statuses]).fetchone()[0])
                for index in _SCOPE_INDEXES]
            if counts[0] != counts[1]:
                self._index_disagrees(f"its scope index lists {counts[0]} records of {scope} where its"
                                      f" subject index lists {counts[1]}")

    def _check_indexes_once(self) -> None:
        """Before this connection's first write, compare the two scope indexes over every
        scope (:meth:`_every_scope_agrees`, about 60 ms at 50K records, once per connection):
        a store whose index pages are damaged is found before a hook or a tool adds a row
        to it, not by the first search after. A store found damaged is marked, so later
        writes are refused by the mark; a check that passes is not repeated."""
        if not self._indexes_checked:
            with self.snapshot() as conn:
                self._every_scope_agrees(conn)
            self._indexes_checked = True

    def _every_scope_agrees(self, conn: Any) -> None:
        """:meth:`_scope_indexes_agree` for every scope at once, for reads and checks that
        span the whole store: each index's records per scope in one pass over it, then each
        scope's range of the scope index searched as a read searches it. A damaged cell can
        sort out of place, which a pass over every cell still counts but a search for a
        range stops at, so both are compared with the subject index's counts."""
        walked = "SELECT scope_kind, scope_id, count(*) FROM records INDEXED BY {} GROUP BY 1, 2"
        listed, subject = (
            {(str(kind), str(ident)): int(n) for kind, ident, n in conn.execute(walked.format(index))}
            for index in _SCOPE_INDEXES)
        searched = dict(listed)
        if listed == subject:
            searched = {(str(kind), str(ident)): int(n) for kind, ident, n in conn.execute(
                "SELECT s.scope_kind, s.scope_id, (SELECT count(*) FROM records r INDEXED BY records_scope"
                " WHERE r.scope_kind = s.scope_kind AND r.scope_id = s.scope_id"
                f" AND r.status IN ({marks(RECORD_STATUSES)})) FROM (SELECT DISTINCT scope_kind, scope_id"
                " FROM records INDEXED BY records_subject) s", RECORD_STATUSES)}
        if searched != subject:
            kind, ident = min(key for key in {*searched, *subject} if searched.get(key) != subject.get(key))
            self._index_disagrees(f"its scope index lists {searched.get((kind, ident), 0)} records of {kind}:"
                                  f"{ident} where its subject index lists {subject.get((kind, ident), 0)}")

    def _index_disagrees(self, why: str) -> None:
        """Leave the damage mark and raise for an index read that a table scan contradicts."""
        note_damage(self.path, why)
        raise StoreCorruptError(f"store {self.path} is damaged: {why}; nothing was changed: run `retold "
                                f"check --store {self.path}` and restore the store from a snapshot")

    @contextmanager
    def _one_view(self) -> Iterator[sqlite3.Connection]:
        """The connection for a read that must see one consistent state: a snapshot here,
        where the read takes several statements; PostgreSQL's store writes such reads as
        one statement, which is consistent on its own, and skips the BEGIN and COMMIT."""
        with self.snapshot() as conn:
            yield conn

    def _rows_with_version(self, sql: str, params: Sequence[Any]) -> tuple[int, list[Any]]:
        """The rows of ``sql`` and the ``records_version`` they reflect, read together."""
        with self.snapshot() as conn:
            version = self.read_version(conn)
            return version, conn.execute(sql, params).fetchall()

    @contextmanager
    def snapshot(self) -> Iterator[sqlite3.Connection]:
        """A consistent read: several statements see one WAL snapshot."""
        with self._lock:
            if self._depth or self._conn.in_transaction:
                yield self._conn  # already inside a transaction or another snapshot
                return
            self._conn.execute(self._BEGIN_READ)
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
            self._fts_redacted = self._has_redacted_content()
            return self.migration_report

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def row_counts(self) -> dict[str, int]:
        """Rows per content table and the records_version, read in one snapshot: what an
        operator (or a test) compares to see that a refused change wrote nothing."""
        with self.snapshot() as conn:
            counts = {t: int(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0])
                      for t in _CONTENT_TABLES}
            counts["records_version"] = self.read_version(conn)
        return counts

    # -- records_version: how other processes find what changed -------------------------

    def records_version(self) -> int:
        with self._lock:
            return self.read_version(self._conn)

    def access_version(self) -> int:
        """How many times grants or memberships changed (0 before the first change); the
        migration that added it made triggers keep it, so every writer moves it."""
        with self._lock:
            row = self._conn.execute("SELECT value FROM store_meta WHERE key = 'access_version'").fetchone()
        return 0 if row is None else int(row[0])

    @staticmethod
    def read_version(conn: sqlite3.Connection) -> int:
        """``store_meta.records_version`` as seen by ``conn``'s current snapshot."""
        row = conn.execute("SELECT value FROM store_meta WHERE key = 'records_version'").fetchone()
        return int(row[0])

    def bump_version(self, conn: sqlite3.Connection) -> int:
        """Increment records_version inside the current transaction and return it.

        Every change the vector index or retrieval must see stamps the rows it touched
        with this number, so other processes refresh by delta (docs/architecture.md,
        "Index coherence across processes").
        """
        if not self._depth:
            raise StoreError("records_version may only change inside Store.atomic()")
        # Under the write lock, held to the commit: versions commit in the order they
        # are taken, so a reader that has seen N never later finds a new row below N.
        self._hold_write_lock()
        return int(conn.execute(self._BUMP_VERSION).fetchone()[0])

    # -- the audit log: append-only, except for erasure --------------------------------

    def append_event(
        self,
        kind: str,
        actor: str,
        payload: dict[str, Any] | None = None,
        *,
        record_id: str | None = None,
        entity_id: str | None = None,
    ) -> str:
        """Append one audit event in its own transaction, or the caller's."""
        with self.atomic() as conn:
            return self._insert_event(conn, NewEvent(kind, actor, payload or {}, record_id, entity_id))

    def events(self, record_id: str | None = None, kind: str | None = None) -> list[dict[str, Any]]:
        """Events in order, optionally for one record or of one kind."""
        sql, params = f"SELECT {', '.join(_EVENT_KEYS)} FROM events", []
        clauses = []
        if record_id is not None:
            clauses.append("record_id = ?")
            params.append(record_id)
        if kind is not None:
            clauses.append("kind = ?")
            params.append(kind)
        if clauses:
            sql += " WHERE " + " AND ".join(clauses)
        with self._lock:
            rows = self._conn.execute(sql + " ORDER BY id", params).fetchall()
        return [dict(zip(_EVENT_KEYS, (*row[:6], json.loads(row[6])), strict=True)) for row in rows]

    def _insert_event(self, conn: sqlite3.Connection, event: NewEvent) -> str:
        event_id = new_id()
        conn.execute(
            f"INSERT INTO events({', '.join(_EVENT_KEYS)}) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (event_id, to_iso(self.clock.now()), event.kind, event.actor, event.record_id,
             event.entity_id, json.dumps(event.payload, sort_keys=True, default=str)),
        )
        return event_id

    # -- a record's FTS row and status ---------------------------------------------------

    def _write_fts(self, conn: sqlite3.Connection, record_ids: Iterable[str]) -> None:
        """Rewrite the FTS rows of these records (content, subject and the aliases of
        every linked entity); a deleted record keeps none. See :func:`write_fts_rows`."""
        write_fts_rows(conn, record_ids, redacted=self._fts_redacted)

    def _set_status(
        self, conn: sqlite3.Connection, record_ids: Sequence[str], status: str, version: int
    ) -> None:
        """Set the status of these records under ``version``; a deleted record also loses
        its FTS row. The caller has checked which records may change."""
        if status not in RECORD_STATUSES:
            raise ValueError(f"unknown status {status!r}")
        for chunk in chunks(record_ids):
            seqs = [row[0] for row in conn.execute(
                f"UPDATE records SET status = ?, index_version = ? WHERE id IN ({marks(chunk)})"
                " RETURNING seq", [status, version, *chunk])]
            if status == "deleted" and seqs:
                conn.execute(f"DELETE FROM records_fts WHERE rowid IN ({marks(seqs)})", seqs)
            # An activation row counts in the profile's inventory only while its record is live.
            conn.execute(f"UPDATE record_activation SET live = ? WHERE record_id IN ({marks(chunk)})",
                         [int(status in ACTIVE_STATUSES), *chunk])

    def _put_vectors(
        self, conn: sqlite3.Connection, rows: Iterable[tuple[str, np.ndarray]], model: str,
        version: str, index_version: int,
    ) -> None:
        """Store L2-normalised float32 vectors (replacing older ones) under ``index_version``.

        The first vectors a store receives record its embedding family. A later write of
        another family leaves the record alone: only the re-embed swap changes it, and the
        runtime, not the store, refuses a process whose embedder disagrees.
        """
        params = [(rid, model, version, int(np.asarray(vec).shape[-1]),
                   np.ascontiguousarray(vec, dtype=np.float32).tobytes(), index_version)
                  for rid, vec in rows]
        if not params:
            return
        _PUT_VECTOR.executemany(conn, params)
        if read_family(conn) is None:
            write_family(conn, EmbeddingFamily(model, version, params[0][3]))
