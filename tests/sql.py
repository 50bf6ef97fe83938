"""Raw SQL for tests: assertions on rows no API returns, and set-up of states no API
produces (a stale claim, a legacy row). Each call opens its own connection to the store
(a SQLite file or a PostgreSQL URL), so tests never reach into the store's connection."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

from retold.config import is_database_url
from retold.store import Store
from retold.store.postgres.connection import PgConnection
from retold.store.postgres.url import conninfo
from retold.tenant import DEFAULT_TENANT

__all__ = ["disagreements", "dump_lines", "execute", "fts_ids", "rows", "stored_bytes", "tables_holding"]


def _path(store: Store | str | Path) -> str:
    return store.path if isinstance(store, Store) else str(store)


def _pg(target: str) -> PgConnection:
    """The tests' login role, bound to the default tenant, so a row a test inserts takes
    the tenant every store-level test writes as (reads still see every tenant)."""
    conn = PgConnection(conninfo(target), connect_timeout=5)
    conn.execute("SELECT set_config('retold.tenant', ?, false)", (DEFAULT_TENANT,))
    return conn


def rows(store: Store | str | Path, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    """Every row of one read-only query."""
    if is_database_url(_path(store)):
        conn = _pg(_path(store))
        try:
            return [tuple(row) for row in conn.execute(sql, params).fetchall()]
        finally:
            conn.close()
    uri = Path(_path(store)).resolve().as_uri() + "?mode=ro"
    with closing(sqlite3.connect(uri, uri=True, timeout=30)) as conn:
        return conn.execute(sql, params).fetchall()


def execute(store: Store | str | Path, sql: str, *params: Any) -> int:
    """Run one write statement in its own transaction; return the rows it changed."""
    if is_database_url(_path(store)):
        conn = _pg(_path(store))
        try:
            return int(conn.execute(sql, params).rowcount)
        finally:
            conn.close()
    with closing(sqlite3.connect(_path(store), timeout=30)) as conn, conn:
        return conn.execute(sql, params).rowcount


def fts_ids(store: Store | str | Path, phrase: str, column: str | None = None) -> set[str]:
    """Record ids whose lexical-index row matches ``phrase`` (in one ``column`` when given),
    read as the backend indexes them: FTS5 ``MATCH``, or PostgreSQL's weighted document."""
    if not is_database_url(_path(store)):
        match = f'{column}:"{phrase}"' if column else f'"{phrase}"'
        sql = "SELECT record_id FROM records_fts WHERE records_fts MATCH ?"
        return {r[0] for r in rows(store, sql, match)}
    if column:
        sql = (f"SELECT record_id FROM records_fts WHERE to_tsvector('retold_exact', retold_words({column}))"
               " @@ phraseto_tsquery('retold_exact', retold_words(?))")
        return {r[0] for r in rows(store, sql, phrase)}
    sql = ("SELECT record_id FROM records_fts WHERE document @@"
           " (phraseto_tsquery('retold_stem', retold_words(?))"
           " || phraseto_tsquery('retold_exact', retold_words(?)))")
    return {r[0] for r in rows(store, sql, phrase, phrase)}


def dump_lines(store: Store | str | Path) -> list[str]:
    """Every row of the store as ``INSERT INTO "table" VALUES(...)`` text: SQLite's own
    dump, or each PostgreSQL table's rows in the same shape."""
    if not is_database_url(_path(store)):
        with closing(sqlite3.connect(_path(store))) as conn:
            return list(conn.iterdump())
    tables = [r[0] for r in rows(store, "SELECT table_name FROM information_schema.tables"
                                        " WHERE table_schema = current_schema() ORDER BY table_name")]
    return [f'INSERT INTO "{table}" VALUES{row!r}' for table in tables
            for row in rows(store, f'SELECT * FROM "{table}"')]


def stored_bytes(store: Store | str | Path) -> bytes:
    """What the store holds, lower-cased, to search for text that must be gone: the bytes
    of a SQLite file with its WAL and shared-memory index, or on PostgreSQL every live row
    of every table (the rows' dead versions are what ``PgStore.compact`` vacuums)."""
    if is_database_url(_path(store)):
        return "\n".join(dump_lines(store)).encode().lower()
    path = _path(store)
    return b"".join(Path(f"{path}{suffix}").read_bytes() for suffix in ("", "-wal", "-shm")
                    if Path(f"{path}{suffix}").exists()).lower()


_ACTIVE = "('provisional', 'confirmed')"
_AGREEMENT = {
    "missing_fts_row": f"SELECT id FROM records WHERE status IN {_ACTIVE}"
                       " AND seq NOT IN (SELECT rowid FROM records_fts)",
    "stray_fts_row": "SELECT f.record_id FROM records_fts f LEFT JOIN records r ON r.seq = f.rowid"
                     " WHERE r.id IS NULL OR r.status = 'deleted' OR r.id != f.record_id",
    "missing_embedding": f"SELECT id FROM records WHERE status IN {_ACTIVE}"
                         " AND id NOT IN (SELECT record_id FROM embeddings)",
    "orphan_embedding": "SELECT record_id FROM embeddings WHERE record_id NOT IN (SELECT id FROM records)",
}


def disagreements(store: Store | str | Path) -> dict[str, list[str]]:
    """Records, lexical rows and vectors that disagree, read with the same SQL on both
    backends (``retold check`` adds SQLite's own page checks on a file): each problem with
    the ids it names, and an empty dict for a store whose every write landed whole."""
    found = {problem: [str(row[0]) for row in rows(store, sql)] for problem, sql in _AGREEMENT.items()}
    return {problem: ids for problem, ids in found.items() if ids}


def tables_holding(url: str, text: str) -> dict[str, int]:
    """Rows holding ``text`` in every table of a PostgreSQL store's schema, read as the
    superuser the tests connect as (whom row-level security does not hold), by table."""
    conn = PgConnection(conninfo(url), connect_timeout=5)
    try:
        tables = [name for (name,) in conn.execute(
            "SELECT relname FROM pg_class WHERE relkind = 'r'"
            " AND relnamespace = current_schema()::regnamespace").fetchall()]
        found = {}
        for table in tables:
            count = conn.execute(f"SELECT count(*) FROM {table} AS t WHERE t::text LIKE ?",
                                 (f"%{text}%",)).fetchone()[0]
            if count:
                found[table] = int(count)
        return found
    finally:
        conn.close()
