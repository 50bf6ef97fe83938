"""The tenants of a PostgreSQL store: the registry, and adding and dropping a tenant.

Every table of the store carries a tenant key under row-level security, and each agent
connection is bound to one tenant (see :class:`~retold.store.postgres.store.PgStore`).
What spans tenants is the admin path here: it connects as the login role, which owns the
tables, reads and writes the registry an agent connection cannot see, and binds itself
to the one tenant it changes, so the tables' policies hold for it too unless that role
is a superuser. Dropping a tenant deletes its rows from every table, then scrubs the
server's files of them (:mod:`~retold.store.postgres.scrub`): the tables are rewritten,
the statistics and the WAL are moved past them, so no file of the database keeps the
tenant's text.
"""

from __future__ import annotations

from contextlib import closing
from typing import Any

from retold.clock import SystemClock, to_iso
from retold.errors import StoreError, StoreMissingError
from retold.store.postgres.connection import PgConnection
from retold.store.postgres.schema import (
    TENANT_REGISTRY,
    TENANT_VERSION,
    current_version,
    parents_first,
    tenant_tables,
)
from retold.store.postgres.scrub import scrub
from retold.store.postgres.url import conninfo, redact
from retold.tenant import DEFAULT_TENANT, check_tenant

__all__ = ["add_tenant", "drop_tenant", "list_tenants", "schema_version", "tenant_exists"]

# The per-tenant rows of store_meta a new tenant starts with, as a new store's: its own
# records_version, so its writes make only its own processes refresh.
_NEW_TENANT_META = (("records_version", "0"),)


def _connect(url: str) -> PgConnection:
    try:
        import psycopg
    except ImportError as exc:
        raise StoreError("a PostgreSQL store needs psycopg: install the `postgres` extra") from exc
    try:
        return PgConnection(conninfo(url), connect_timeout=30)
    except psycopg.OperationalError as exc:
        raise StoreError(f"cannot connect to the store {redact(url)}: {' '.join(str(exc).split())}") from exc


def schema_version(url: str) -> int:
    """The store schema's version in the database at ``url``, 0 for a database without
    it. Reads only: it creates nothing, whatever the database holds."""
    with closing(_connect(url)) as conn:
        return current_version(conn)


def _migrated(url: str) -> None:
    """Open the store once as its default tenant, which creates or migrates its schema.
    The default tenant's unmapped legacy records are its own to review; they do not keep
    another tenant from being added."""
    from retold.store.postgres.store import PgStore

    PgStore(url, allow_migration_issues=True).close()


def _registered(conn: Any) -> list[str]:
    if current_version(conn) < TENANT_VERSION:
        return [DEFAULT_TENANT]  # a store from before tenants: its rows are the default tenant's
    names = [str(name) for (name,) in conn.execute(f"SELECT name FROM {TENANT_REGISTRY} ORDER BY name")]
    return [DEFAULT_TENANT, *(name for name in names if name != DEFAULT_TENANT)]


def list_tenants(url: str) -> list[str]:
    """The tenants of the store at ``url``, ``default`` first."""
    with closing(_connect(url)) as conn:
        return _registered(conn)


def tenant_exists(url: str, tenant: str) -> bool:
    check_tenant(tenant)
    return tenant in list_tenants(url)


def add_tenant(url: str, tenant: str) -> None:
    """Register ``tenant`` and give it the per-tenant rows a new store starts with; the
    schema is created or migrated first. Adding a registered tenant changes nothing."""
    check_tenant(tenant)
    _migrated(url)
    with closing(_connect(url)) as conn:
        conn.execute("BEGIN")
        try:
            conn.execute("SELECT set_config('retold.tenant', ?, true)", (tenant,))
            added = conn.execute(f"INSERT INTO {TENANT_REGISTRY}(name, added_at) VALUES (?, ?)"
                                 " ON CONFLICT DO NOTHING RETURNING name",
                                 (tenant, to_iso(SystemClock().now()))).fetchone()
            if added is not None:
                conn.executemany("INSERT INTO store_meta(key, value) VALUES (?, ?) ON CONFLICT DO NOTHING",
                                 _NEW_TENANT_META)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise


def drop_tenant(url: str, tenant: str) -> list[str]:
    """Delete every row of ``tenant`` from every table and remove it from the registry,
    then rewrite every table of the store, its statistics and the WAL past the deleted
    rows; what was done, one line a table ("records: 12 rows") and a line per scrub step
    (each says what the login role or the server's settings left in place). Every table is
    locked exclusively while it is rewritten, so every tenant's writers wait for the drop.
    Processes still serving the tenant must be stopped first: one that writes afterwards
    is refused, since its tenant is no longer registered."""
    check_tenant(tenant)
    if tenant == DEFAULT_TENANT:
        raise StoreError(f"the {DEFAULT_TENANT} tenant cannot be dropped; erase its scopes with "
                         "`retold erase`")
    with closing(_connect(url)) as conn:
        if tenant not in _registered(conn):
            raise StoreMissingError(f"no tenant {tenant!r} in store {redact(url)}")
        removed: dict[str, int] = {}
        conn.execute("BEGIN")
        try:
            conn.execute("SELECT set_config('retold.tenant', ?, true)", (tenant,))
            for table in _children_first(conn):
                # The explicit filter is what a superuser (who bypasses the policies) needs;
                # every other role is held to the tenant by them as well.
                count = conn.execute(f"DELETE FROM {table} WHERE tenant = ?", (tenant,)).rowcount
                if count:
                    removed[table] = count
            conn.execute(f"DELETE FROM {TENANT_REGISTRY} WHERE name = ?", (tenant,))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        # Every table, not only those it holds rows in now: a row it updated or deleted
        # earlier (an erasure, retention) left its text in freed space wherever it was.
        lines = [f"{table}: {count} rows" for table, count in removed.items()]
        lines += scrub(conn, [*tenant_tables(conn), TENANT_REGISTRY])
    return lines


def _children_first(conn: Any) -> list[str]:
    """The tenant tables, each before every table its foreign keys name, so a delete never
    leaves a row pointing at one already gone."""
    ordered = list(reversed(parents_first(conn, tenant_tables(conn))))
    # store_meta last: deleting grants and memberships bumps the tenant's access counter
    # there (a trigger), which would otherwise leave a row behind the registry's.
    return [t for t in ordered if t != "store_meta"] + [t for t in ordered if t == "store_meta"]
