"""A PostgreSQL database for one test run, and a fresh schema in it for each test.

The run creates ``retold_test_<pid>`` on the server at ``RETOLD_TEST_PG`` (default the
machine's PostgreSQL at 127.0.0.1:5432, user postgres) and drops it at the end. Each test
that asks for a PostgreSQL store gets its own schema, named in the URL's ``search_path``,
so tests never see each other's rows.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

SERVER = os.environ.get("RETOLD_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
_schemas = itertools.count(1)


def _admin(url: str) -> object:
    import psycopg

    return psycopg.connect(url, autocommit=True, connect_timeout=2)


def available() -> str | None:
    """None when a PostgreSQL server answers and psycopg is installed, else why not."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed (the `postgres` extra)"
    try:
        with psycopg.connect(SERVER, connect_timeout=2):
            return None
    except psycopg.OperationalError:
        return f"no PostgreSQL answering at {SERVER.rsplit('@', 1)[-1]}"


@contextmanager
def test_database(suffix: str = "", *, template: str = "template1") -> Iterator[str]:
    """A database of this run's own (``suffix`` names a second one, for a test that needs
    a whole database, such as one without or with an extension); its URL, dropped
    afterwards. ``template0`` gives a database with no extension the server's template1
    may carry."""
    name = f"retold_test_{os.getpid()}{suffix}"
    base = SERVER.rsplit("/", 1)[0]
    with _admin(SERVER) as conn:  # type: ignore[attr-defined]
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {template}")
    try:
        yield f"{base}/{name}"
    finally:
        with _admin(SERVER) as conn:  # type: ignore[attr-defined]
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def fresh_schema(database_url: str) -> str:
    """A new, empty schema in the run's database; a store URL that uses it."""
    schema = f"t{next(_schemas)}"
    with _admin(database_url) as conn:  # type: ignore[attr-defined]
        conn.execute(f"CREATE SCHEMA {schema}")
    return f"{database_url}?options=-csearch_path%3D{schema}"


@contextmanager
def cluster_setting(database_url: str, name: str, value: str) -> Iterator[None]:
    """``name`` set to ``value`` for the whole server (ALTER SYSTEM and a reload) while the
    block runs, and put back as it was afterwards. The server is this machine's, shared by
    every test run on it, so only a setting no test depends on belongs here."""
    with _admin(database_url) as conn:  # type: ignore[attr-defined]
        kept = conn.execute("SELECT setting FROM pg_file_settings WHERE name = %s AND applied"
                            " AND sourcefile LIKE '%%postgresql.auto.conf'", (name,)).fetchone()
        conn.execute(f"ALTER SYSTEM SET {name} = {_literal(value)}")
        conn.execute("SELECT pg_reload_conf()")
    _await_setting(database_url, name, value)
    try:
        yield
    finally:
        with _admin(database_url) as conn:  # type: ignore[attr-defined]
            if kept is None:
                conn.execute(f"ALTER SYSTEM RESET {name}")
            else:
                conn.execute(f"ALTER SYSTEM SET {name} = {_literal(kept[0])}")
            conn.execute("SELECT pg_reload_conf()")


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _await_setting(database_url: str, name: str, value: str) -> None:
    """Wait until a new session sees the reloaded ``value``: the server applies a reload
    a moment after it is asked to."""
    for _ in range(100):
        with _admin(database_url) as conn:  # type: ignore[attr-defined]
            if conn.execute("SELECT current_setting(%s)", (name,)).fetchone()[0] == value:
                return
        time.sleep(0.05)
    raise AssertionError(f"the server did not take {name} = {value}")


# Where a file's bytes live, by what the file is; a file whose relation is gone (its
# storage is unlinked at the next checkpoint) is "unlinked".
_PLACES = """
SELECT CASE WHEN c.oid IS NULL THEN 'unlinked'
            WHEN c.relname LIKE 'pg_statistic%%' THEN 'statistics'
            WHEN n.nspname = 'pg_toast' THEN 'toast'
            WHEN n.nspname = 'pg_catalog' THEN 'catalog'
            WHEN c.relkind = 'i' THEN 'index'
            ELSE 'heap' END,
       coalesce(c.relname, %s)
  FROM (SELECT pg_filenode_relation(0, %s::oid) AS rel) f
  LEFT JOIN pg_class c ON c.oid = f.rel LEFT JOIN pg_namespace n ON n.oid = c.relnamespace
"""


def files_holding(database_url: str, needle: bytes) -> dict[str, set[str]]:
    """Where ``needle`` lies in the server's files, read by the server itself (the tests
    connect as a superuser): the files of this database's folder by place (``heap``,
    ``index``, ``toast``, ``statistics``, ``catalog``, ``unlinked``) and relation name, the
    shared catalogs as ``global``, the WAL segments as ``wal`` and the server's log, when
    it writes one into its data directory, as ``log``. Dead row versions, freed space and
    recycled WAL segments all count: this is what a copy of the data directory would hold."""
    found: dict[str, set[str]] = {}
    with _admin(database_url) as conn:  # type: ignore[attr-defined]
        folders = {"base/" + str(conn.execute("SELECT oid FROM pg_database WHERE datname = current_database()"
                                              ).fetchone()[0]): None, "global": "global", "pg_wal": "wal"}
        for folder, place in folders.items():
            hits = conn.execute(
                "SELECT f.name FROM pg_ls_dir(%s, true, false) AS f(name),"
                " LATERAL pg_stat_file(%s || '/' || f.name, true) AS s"
                " WHERE NOT s.isdir AND s.size > 0"
                " AND position(%s::bytea IN pg_read_binary_file(%s || '/' || f.name, 0, s.size, true)) > 0",
                (folder, folder, needle, folder)).fetchall()
            for (name,) in hits:
                if place is not None:
                    found.setdefault(place, set()).add(name)
                    continue
                kind, relation = conn.execute(_PLACES, (name, name.split("_")[0].split(".")[0])).fetchone()
                found.setdefault(kind, set()).add(relation)
        log = conn.execute("SELECT pg_current_logfile()").fetchone()[0]
        if log is not None and conn.execute("SELECT position(%s::bytea IN pg_read_binary_file(%s)) > 0",
                                            (needle, log)).fetchone()[0]:
            found["log"] = {log}
    return found
