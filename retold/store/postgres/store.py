"""PgStore: the store on a PostgreSQL database that agents and workers on many hosts share.

It is :class:`~retold.store.Store` with the few parts that differ between the dialects
replaced by name: how the connection opens and migrates, how a write transaction takes
the store's write lock (at BEGIN, or late for a decide-and-write), the search-log lock,
how ``records_version`` is bumped and a record's FTS row written; the hot reads and the
``tsvector`` candidate queries come from :class:`~retold.store.postgres.reads.PgReads`. Every
other query is the store's shared SQL, run through
:class:`~retold.store.postgres.connection.PgConnection`. See docs/decisions.md, "PostgreSQL as a
shared store" and "Writers decide before they take the write lock".

Each connection serves one tenant: once the schema is migrated (as the login role, which
owns the tables) it names its tenant in the ``retold.tenant`` setting and takes the role
``retold_agent``, which row-level security holds to that tenant's rows; the write and
search-log locks are that tenant's own. See docs/postgresql.md, "Tenants".
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from retold.errors import StoreError, StoreMissingError
from retold.store.failures import StoreLock
from retold.store.migrations import MigrationReport
from retold.store.postgres.connection import PgConnection
from retold.store.postgres.reads import PgReads
from retold.store.postgres.schema import AGENT_ROLE, TENANT_REGISTRY, TENANT_VERSION, current_version
from retold.store.postgres.schema import migrate as pg_migrate
from retold.store.postgres.url import conninfo, redact
from retold.tenant import DEFAULT_TENANT, check_tenant

__all__ = ["LOG_LOCK", "WRITE_LOCK", "PgStore", "tenant_lock"]

# The transaction-scoped advisory lock every write transaction takes, at BEGIN or (a
# late-locked decide-and-write) before its first write: writers queue on it as SQLite's
# writers queue on BEGIN IMMEDIATE, so no two write at once and a decision is never
# applied over a change it did not see. It is the two-key form, the second key the hash
# of the tenant: tenants share no rows, so one tenant's writers never wait for another's
# (two names with the same hash only share a queue).
WRITE_LOCK = 0x72657477  # "retw"
# Taken by search-log inserts and by the erasures that delete search-log rows, so a row
# checked against the erase events cannot commit after an erase it did not see; the log
# writer does not need WRITE_LOCK (docs/decisions.md, "Writers decide before they take
# the write lock"). Per tenant, as WRITE_LOCK.
LOG_LOCK = WRITE_LOCK + 1


def tenant_lock(lock: int, tenant: str) -> str:
    """The SQL expression that takes ``lock`` for ``tenant`` until the transaction ends.
    The tenant is a checked name (letters, digits, '-' and '_'), so it is written inline
    and the statement's text stays the same for every transaction of a connection."""
    return f"pg_advisory_xact_lock({lock}, hashtext('{check_tenant(tenant)}'))"


# write_fts_rows (with tags) as one statement (its conflict target is the table's key,
# which leads with the tenant): a deleted record loses its row, any other gets its
# content (the redacted form where there is one), subject, its entities' aliases
# (distinct, in order) and its tags. The tags are JSON text, where a NUL character is
# stored escaped; PostgreSQL text cannot hold it, so the escape becomes U+FFFD's before
# the JSON is read, as PgConnection does with every text parameter. The rows to delete
# are an array, not an IN subquery: a prepared generic plan made while the table was
# small and had no statistics (a bulk load outpaces autovacuum) must not join by
# scanning records_fts on every write.
_WRITE_FTS = (
    "WITH gone AS (DELETE FROM records_fts WHERE rowid = ANY(ARRAY("
    "  SELECT seq FROM records WHERE id = ANY(?) AND status = 'deleted')))"
    " INSERT INTO records_fts(rowid, record_id, content, subject, aliases, tags)"
    " SELECT r.seq, r.id, coalesce(r.redacted_content, r.content), r.subject,"
    "  coalesce((SELECT string_agg(x.alias_norm, ' ' ORDER BY x.alias_norm) FROM"
    "   (SELECT DISTINCT a.alias_norm FROM record_entities re"
    "    JOIN entity_aliases a ON a.entity_id = re.entity_id WHERE re.record_id = r.id) x), ''),"
    "  coalesce((SELECT string_agg(t.tag, ' ' ORDER BY t.n) FROM json_array_elements_text("
    r"   regexp_replace(r.tags, '(?<!\\)((?:\\\\)*)\\u0000', '\1\\ufffd', 'g')::json)"
    "   WITH ORDINALITY AS t(tag, n)), '')"
    " FROM records r WHERE r.id = ANY(?) AND r.status <> 'deleted'"
    " ON CONFLICT (tenant, rowid) DO UPDATE SET record_id = excluded.record_id, content = excluded.content,"
    " subject = excluded.subject, aliases = excluded.aliases, tags = excluded.tags"
)
# What an erase blanks or deletes rows of, and what the retention sweeps do.
_ERASED_TABLES = ("records", "records_fts", "embeddings", "reembed_vectors", "events", "session_turns",
                  "search_log", "extraction_stages", "entities", "entity_aliases", "record_entities",
                  "profile_blocks", "record_activation", "scope_members", "turn_decisions")
_RETAINED_TABLES = ("session_turns", "extraction_stages", "search_log", "events", "turn_decisions")


class PgStore(PgReads):
    """The store on PostgreSQL: one connection per process, shared by its threads."""

    backend = "postgres"
    _BEGIN_READ = "BEGIN ISOLATION LEVEL REPEATABLE READ"
    _BUMP_VERSION = ("UPDATE store_meta SET value = (value::bigint + 1)::text"
                     " WHERE key = 'records_version' RETURNING value")
    _COUNTED_TRUE = "json_extract(payload, '$.counted') = 'true'"
    _NOT_INDEXED = ""
    _LOCK_ROW = " FOR NO KEY UPDATE"

    def _open(self, migrate_schema: bool) -> None:
        import psycopg

        self._driver_errors = (psycopg.Error,)
        self._integrity_errors = (psycopg.IntegrityError,)
        self.read_only = self._read_only_asked
        self.path = redact(self._target)
        self._lock = StoreLock(self.path, self.busy_timeout_seconds,
                               "store.read_only is set" if self.read_only else None)
        info = conninfo(self._target, read_only=self.read_only)
        try:
            self._conn = PgConnection(info, connect_timeout=self.busy_timeout_seconds)
        except psycopg.OperationalError as exc:
            raise StoreError(f"cannot connect to the store {self.path}: {exc}") from exc
        try:
            # A writer waits for the write lock at most this long, as busy_timeout on SQLite.
            self._conn.execute(f"SET lock_timeout = '{int(self.busy_timeout_seconds * 1000)}ms'")
            self.migration_report = (pg_migrate(self._conn, self.path, self.tenant)
                                     if migrate_schema and not self.read_only else None)
            self._bind_tenant()
        except BaseException:
            self._conn.close()
            raise

    def _bind_tenant(self) -> None:
        """Bind the connection to its tenant and drop to the agent role, which row-level
        security holds to that tenant. A store written before tenants existed (read-only,
        so not migrated) has only the default tenant and no policies to hold it."""
        self._write_lock = tenant_lock(WRITE_LOCK, self.tenant)
        self._log_lock = tenant_lock(LOG_LOCK, self.tenant)
        self._isolated = current_version(self._conn) >= TENANT_VERSION
        if not self._isolated:
            if self.tenant != DEFAULT_TENANT:
                raise StoreMissingError(f"no tenant {self.tenant!r} in store {self.path}: its schema "
                                        "predates tenants; open it once with write access to migrate it")
            return
        known = self._conn.execute(f"SELECT 1 FROM {TENANT_REGISTRY} WHERE name = ?",
                                   (self.tenant,)).fetchone()
        if known is None:
            raise StoreMissingError(f"no tenant {self.tenant!r} in store {self.path}; add it with "
                                    f"`retold tenant add {self.tenant}`")
        self._conn.execute("SELECT set_config('retold.tenant', ?, false)", (self.tenant,))
        self._conn.execute(f"SET ROLE {AGENT_ROLE}")

    @contextmanager
    def _as_owner(self) -> Iterator[None]:
        """The login role for the statements that need the tables' owner (VACUUM, ANALYZE,
        a migration), outside any transaction; the agent role again afterwards."""
        with self._lock:
            if self._depth:
                raise StoreError("the owner's statements cannot run inside a transaction")
            if self._isolated:
                self._conn.execute("RESET ROLE")
            try:
                yield
            finally:
                if self._isolated:
                    self._conn.execute(f"SET ROLE {AGENT_ROLE}")

    def _begin_write(self) -> None:
        try:
            # One round trip: the lock is taken in the statement after BEGIN.
            self._conn.execute(f"BEGIN; SELECT {self._write_lock}")
        except BaseException:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")  # a lock wait that timed out leaves nothing open
            raise

    def _begin_late(self) -> int:
        cursor = self._conn.execute("BEGIN; SELECT value FROM store_meta WHERE key = 'records_version'")
        cursor.nextset()
        return int(cursor.fetchone()[0])

    def _take_write_lock(self) -> None:
        self._conn.execute(f"SELECT {self._write_lock}")

    @contextmanager
    def _search_log_writes(self) -> Iterator[Any]:
        # Search-log rows need only exclude an erase, not every writer, and a row lost to
        # a crash is acceptable (rows are dropped when the queue is full anyway), so the
        # commit does not wait for the WAL flush.
        outermost = not self._depth
        with self.atomic(late_lock=True) as conn:
            if outermost:
                conn.execute("SET LOCAL synchronous_commit = off")
            conn.execute(f"SELECT {self._log_lock}")
            yield conn

    def _exclude_search_log(self, conn: Any) -> None:
        conn.execute(f"SELECT {self._log_lock}")

    def migrate(self) -> MigrationReport:
        with self._as_owner():
            self.migration_report = pg_migrate(self._conn, self.path, self.tenant)
        if not self._isolated:
            self._bind_tenant()  # the migration just added the tenant key
        return self.migration_report

    def _write_fts(self, conn: Any, record_ids: Iterable[str]) -> None:
        # One statement for any number of records, where write_fts_rows takes four a
        # record: the rows written inside the write lock are the ones every writer waits on.
        ids = list(dict.fromkeys(record_ids))
        if ids:
            conn.execute(_WRITE_FTS, (ids, ids))

    def analyze(self, tables: Iterable[str]) -> None:
        """ANALYZE ``tables`` as their owner, so the planner has statistics after a bulk
        load rather than at autovacuum's next pass."""
        with self._as_owner():
            for table in tables:
                self._conn.execute(f"ANALYZE {table}")

    def _bump_for_insert(self, conn: Any) -> tuple[int, int]:
        if not self._depth:
            raise StoreError("records_version may only change inside Store.atomic()")
        self._hold_write_lock()
        # One round trip: the new seq comes back with the bumped version. Row-level
        # security limits max(seq) to this tenant's records, and seq is unique per tenant
        # (as records_fts's rowid): each tenant numbers its own, under its own write lock.
        version, seq = conn.execute(
            self._BUMP_VERSION + ", (SELECT coalesce(max(seq), 0) + 1 FROM records)").fetchone()
        return int(version), int(seq)

    # -- erasure's and retention's vacuum ------------------------------------------------

    def compact(self) -> bool:
        """VACUUM the tables an erase touches, so their dead row versions (which still
        hold the erased text) are removed now rather than by autovacuum later. WAL
        segments and backups keep what they held until they are recycled; see
        docs/postgresql.md."""
        return self._vacuum(_ERASED_TABLES)

    def truncate_wal(self) -> bool:
        """The server recycles its own WAL. What a client can remove after the retention
        sweeps is the dead row versions they left, which still hold the removed text, so
        the tables those sweeps delete from or rewrite are vacuumed."""
        return self._vacuum(_RETAINED_TABLES)

    def _vacuum(self, tables: tuple[str, ...]) -> bool:
        # VACUUM is the owner's: the agent role would be refused (a warning, and nothing
        # removed). It cleans the table for every tenant at once, which only removes row
        # versions no transaction can see any more.
        with self._as_owner():
            for table in tables:
                self._conn.execute(f"VACUUM {table}")
            return True

    def backup_to(self, path: str | Path) -> None:
        raise StoreError("a PostgreSQL store is not saved as a snapshot file: use pg_dump "
                         "(docs/postgresql.md)")

    def restore_from(self, path: str | Path) -> None:
        raise StoreError("a PostgreSQL store is not loaded from a snapshot file: use pg_restore "
                         "(docs/postgresql.md)")

    def set_secure_delete(self, on: bool) -> None:
        """No such switch on PostgreSQL: :meth:`compact` removes dead row versions."""

