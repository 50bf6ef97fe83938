"""Copies of one PostgreSQL tenant, made in SQL: the tenant benchmark's bulk load.

On PostgreSQL every tenant's rows share one set of tables, each row keyed by its
``tenant`` column under row-level security. Every primary key, unique index and foreign
key of the schema starts with that column, so a copy that changes only the tenant would
already be a valid store. But the indexes that are not unique (a record's scope, an
event's record, an alias) do not start with it, and in a real store each tenant's record,
entity and event ids differ (they are UUIDv7): copies sharing their source's ids would
crowd those indexes with look-alike entries no real store holds. So each copy's ids are
rewritten: the last four hex digits of every UUID in a column that holds one become the
copy's number, which keeps the ids valid, distinct across tenants, and in the same order
within the tenant (the digits replaced are random bits below the id's time and counter).
Scope ids (user, project and agent names) are left as they are: many tenants naming the
same agent or user is what a shared server sees, and it is the harder case for those
indexes.

The copy runs as a role that bypasses row-level security (the benchmark's login role, a
superuser), with foreign-key checks and triggers off for the session
(``session_replication_role = replica``): the rows are copies of a consistent tenant,
including the tables the triggers fill. Each copy is registered as ``add_tenant`` registers
a tenant (the registry row; its ``store_meta`` rows are copied with the rest).
"""

from __future__ import annotations

import time
from typing import Any

from retold.clock import SystemClock, to_iso
from retold.store.postgres.schema import TENANT_REGISTRY, parents_first, tenant_tables
from retold.store.postgres.url import conninfo

__all__ = ["analyze", "copy_tenant"]

# A UUID but for its last four hex digits (captured), then those digits.
_UUID = r"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{8})[0-9a-f]{4}"
# Copies made per statement: a chunk is one transaction per table.
_CHUNK = 100


def _columns(conn: Any, table: str) -> list[tuple[str, bool]]:
    """The table's stored columns but the tenant and generated ones, each with whether it
    is text (where an id can be)."""
    rows = conn.execute(
        "SELECT a.attname, a.atttypid = 'text'::regtype FROM pg_attribute a"
        " WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped"
        " AND a.attgenerated = '' AND a.attname <> 'tenant' ORDER BY a.attnum", (table,)).fetchall()
    return [(str(name), bool(text)) for name, text in rows]


def _select_list(conn: Any, table: str, source: str) -> tuple[list[str], list[str]]:
    """The column names and, for each, what the copy stores: the source's value, or for a
    text column where the source tenant holds a UUID, that value with its ids rewritten."""
    names: list[str] = []
    values: list[str] = []
    for name, text in _columns(conn, table):
        names.append(f'"{name}"')
        holds_ids = text and conn.execute(
            f'SELECT EXISTS (SELECT 1 FROM {table} WHERE tenant = %s AND "{name}" ~ %s)',
            (source, _UUID)).fetchone()[0]
        values.append(f"regexp_replace(s.\"{name}\", '{_UUID}', '\\1' || n.digits, 'g')" if holds_ids
                      else f's."{name}"')
    return names, values


def copy_tenant(url: str, source: str, names: list[tuple[str, int]]) -> float:
    """Copy every row of tenant ``source`` to each ``(tenant, number)`` of ``names`` (new
    tenants, registered here); the seconds it took."""
    import psycopg

    started = time.perf_counter()
    with psycopg.connect(conninfo(url), autocommit=True) as conn:
        conn.execute("SET session_replication_role = replica")
        conn.execute("SET synchronous_commit = off")
        tables = [t for t in parents_first(conn, tenant_tables(conn)) if conn.execute(
            f"SELECT EXISTS (SELECT 1 FROM {t} WHERE tenant = %s)", (source,)).fetchone()[0]]
        plans = {table: _select_list(conn, table, source) for table in tables}
        now = to_iso(SystemClock().now())
        for start in range(0, len(names), _CHUNK):
            chunk = names[start:start + _CHUNK]
            tenants = [name for name, _ in chunk]
            digits = [f"{number:04x}" for _, number in chunk]
            with conn.transaction():
                conn.cursor().executemany(f"INSERT INTO {TENANT_REGISTRY}(name, added_at) VALUES (%s, %s)",
                                          [(name, now) for name in tenants])
                for table, (columns, values) in plans.items():
                    conn.execute(
                        f"INSERT INTO {table} (tenant, {', '.join(columns)})"
                        f" SELECT n.name, {', '.join(values)} FROM {table} AS s"
                        " CROSS JOIN unnest(%s::text[], %s::text[]) AS n(name, digits)"
                        " WHERE s.tenant = %s", (tenants, digits, source))
    return time.perf_counter() - started


def analyze(url: str, *, vacuum: bool = False) -> float:
    """ANALYZE the database (VACUUM ANALYZE with ``vacuum``), as autovacuum would have
    while the store grew and after a load (this machine's server runs with it off):
    planner statistics, so plans cached while the tables were small are made again, and
    the visibility map that index-only scans need; the seconds it took."""
    import psycopg

    started = time.perf_counter()
    with psycopg.connect(conninfo(url), autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE" if vacuum else "ANALYZE")
    return time.perf_counter() - started
