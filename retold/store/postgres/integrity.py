"""Whether a PostgreSQL store is whole: amcheck's check of the store's btree indexes and
the agreement between records, their lexical rows and their vectors.

The server keeps its own pages (checksums, WAL), so what a client can add is what the
server cannot know: that Retold's three rows of a record agree, which is the same
agreement check a SQLite file gets (:func:`retold.store.integrity.check_agreement`), and,
where the database has the ``amcheck`` extension, ``bt_index_check`` on each btree index
of the store's schema, since a damaged index, as on SQLite, can make a query return too
few rows without any error. The check changes nothing: it connects with every
transaction read-only, installs no extension, and reports a missing one as a skipped
check. See docs/decisions.md, "Integrity checks".
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import closing, contextmanager

from retold.errors import StoreError, StoreMissingError
from retold.store.failures import StoreLock
from retold.store.integrity import Finding, IntegrityReport, check_agreement, merged
from retold.store.postgres.connection import PgConnection
from retold.store.postgres.schema import (
    AGENT_ROLE,
    TENANT_REGISTRY,
    TENANT_VERSION,
    check_version,
    current_version,
)
from retold.store.postgres.url import conninfo, redact

__all__ = ["AMCHECK_MISSING", "check_database"]

AMCHECK_MISSING = ("btree index check: the amcheck extension is not installed in this database"
                   " (a role allowed to create extensions adds it: CREATE EXTENSION amcheck)")
# amcheck takes its own snapshot per index under READ COMMITTED; under REPEATABLE READ it
# refuses an index built since the transaction's snapshot was taken.
_AMCHECK_BEGIN = "BEGIN ISOLATION LEVEL READ COMMITTED READ ONLY"
# SQLSTATEs of damage the server found while reading: data_corrupted, index_corrupted.
_DAMAGE = ("XX001", "XX002")
_NO_PRIVILEGE = "42501"


def check_database(url: str, *, quick: bool = False, busy_timeout: float = 30.0) -> IntegrityReport:
    """Check the PostgreSQL store at ``url`` without changing it.

    ``quick`` runs ``bt_index_check`` on each index's structure only; the full check
    also verifies that every table row has its index entry (``heapallindexed``). Raises
    StoreError when the server cannot be reached, StoreMissingError for a database
    without Retold's schema, NotADatabaseError or SchemaTooNewError for one whose schema
    this code cannot judge, and StoreLockedError when a schema change holds a table past
    ``busy_timeout``.
    """
    where = redact(url)
    try:
        import psycopg
    except ImportError as exc:
        raise StoreError("a PostgreSQL store needs psycopg: install the `postgres` extra") from exc
    try:
        conn = PgConnection(conninfo(url, read_only=True), connect_timeout=busy_timeout)
    except psycopg.OperationalError as exc:
        raise StoreError(f"cannot connect to the store {where}: {_line(exc)}") from exc
    with closing(conn), StoreLock(where, busy_timeout, "retold check only reads"):
        # Reads wait only for a table's exclusive lock (a schema change, VACUUM FULL).
        conn.execute(f"SET lock_timeout = '{int(busy_timeout * 1000)}ms'")
        if current_version(conn) == 0:
            raise StoreMissingError(f"no store at {where}: the database holds no Retold schema;"
                                    f" `retold migrate --store {where}` creates one")
        check_version(conn, where)
        return _run(conn, where, quick)


def _run(conn: PgConnection, where: str, quick: bool) -> IntegrityReport:
    import psycopg

    findings: list[Finding] = []
    timings: dict[str, float] = {}
    checks: list[str] = []
    skipped: list[str] = []
    home = _amcheck_schema(conn)
    if home is None:
        skipped.append(AMCHECK_MISSING)
    else:
        name = "bt_index_check" if quick else "bt_index_check heapallindexed"
        started = time.perf_counter()
        found, refused = _btree_check(conn, home, heapallindexed=not quick)
        if refused is None:
            checks.append(name)
            findings += found
            timings[name] = _ms_since(started)
        else:
            skipped.append(f"btree index check: {refused}")
    started = time.perf_counter()
    checks.append("agreement")
    active = pending = 0
    try:
        for tenant in _tenants(conn):
            # Each tenant numbers its own records, so the agreement is checked one tenant
            # at a time, bound as an agent connection is.
            with _bound(conn, tenant):
                # Every PostgreSQL schema postdates the recorded embedding family.
                counted, waiting, found = check_agreement(conn, family_expected=True, postgres=True)
            active, pending = active + counted, pending + waiting
            findings += found
    except psycopg.Error as exc:
        if exc.sqlstate not in _DAMAGE:
            raise
        findings.append(Finding("unreadable", 1, f"agreement could not read the database: {_line(exc)}"))
    timings["agreement"] = _ms_since(started)
    return IntegrityReport(where, quick, tuple(checks), tuple(skipped), active, merged(findings), timings,
                           pending)


def _tenants(conn: PgConnection) -> list[str | None]:
    """The tenants to check, or ``[None]`` for a store from before tenants."""
    if current_version(conn) < TENANT_VERSION:
        return [None]
    return [str(name) for (name,) in conn.execute(f"SELECT name FROM {TENANT_REGISTRY} ORDER BY name")]


@contextmanager
def _bound(conn: PgConnection, tenant: str | None) -> Iterator[None]:
    """The connection bound to ``tenant``, under the agent role where this role may take
    it (a superuser would otherwise read every tenant's rows at once); a role that may not
    is held to the tenant by the tables' policies anyway."""
    if tenant is None:
        yield
        return
    conn.execute("SELECT set_config('retold.tenant', ?, false)", (tenant,))
    agent = bool(conn.execute("SELECT pg_has_role(current_user, ?, 'MEMBER')", (AGENT_ROLE,)).fetchone()[0])
    if agent:
        conn.execute(f"SET ROLE {AGENT_ROLE}")
    try:
        yield
    finally:
        if agent:
            conn.execute("RESET ROLE")
        conn.execute("SELECT set_config('retold.tenant', '', false)")


def _amcheck_schema(conn: PgConnection) -> str | None:
    """The schema amcheck is installed in (one per database, not necessarily on the
    store's search path), or None when it is not installed."""
    row = conn.execute("SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace"
                       " WHERE e.extname = 'amcheck'").fetchone()
    return None if row is None else str(row[0])


def _btree_check(conn: PgConnection, home: str, *, heapallindexed: bool) -> tuple[list[Finding], str | None]:
    """``bt_index_check`` on every valid btree index of the store's schema: what it found
    damaged, and why the check could not run (None when it ran)."""
    import psycopg

    damaged: dict[str, str] = {}  # index name: what amcheck said
    conn.execute(_AMCHECK_BEGIN)
    try:
        indexes = [str(row[0]) for row in conn.execute(
            "SELECT c.oid::regclass::text FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
            " JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_am a ON a.oid = c.relam"
            " WHERE n.nspname = current_schema() AND a.amname = 'btree' AND i.indisvalid AND i.indisready"
            " ORDER BY c.relname").fetchall()]
        for index in indexes:
            # A damaged index raises; the savepoint lets the next index be checked.
            conn.execute("SAVEPOINT retold_amcheck")
            try:
                conn.execute(f'SELECT "{home}".bt_index_check(?::regclass, ?)', (index, heapallindexed))
            except psycopg.Error as exc:
                conn.execute("ROLLBACK TO SAVEPOINT retold_amcheck")
                if exc.sqlstate == _NO_PRIVILEGE:
                    return [], (f"this role may not run amcheck's bt_index_check ({_line(exc)}); grant it "
                                "EXECUTE on the function, or run the check as the database owner")
                if exc.sqlstate not in _DAMAGE:
                    raise
                damaged[index] = _line(exc)
            conn.execute("RELEASE SAVEPOINT retold_amcheck")
    finally:
        conn.execute("ROLLBACK")  # the transaction only read: nothing to commit
    if not damaged:
        return [], None
    said = "; ".join(f"{index}: {message}" for index, message in damaged.items())
    return [Finding("btree_index", len(damaged), f"{len(damaged)} btree index(es) amcheck found damaged, so "
                    f"lookups through them can miss or misreport rows (REINDEX rebuilds one from its "
                    f"table): {said}", tuple(damaged))], None


def _ms_since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)


def _line(exc: BaseException) -> str:
    return " ".join(str(exc).split())
