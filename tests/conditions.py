"""Real failure conditions of a store file for tests: a write lock another connection
holds, a full disk, a damaged page. Each is made with SQLite itself or the file's bytes,
never by mocking the store."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from retold.config import is_database_url
from retold.store import Store
from retold.store.postgres.connection import PgConnection
from retold.store.postgres.store import LOG_LOCK, WRITE_LOCK, tenant_lock
from retold.store.postgres.url import conninfo
from retold.tenant import DEFAULT_TENANT
from tests.sql import rows

__all__ = ["FullDiskStore", "WriteLocker", "corrupt_leaf", "corrupt_page", "write_lock_held"]


class WriteLocker:
    """A connection of its own (as another process would hold) that takes the store's
    write lock and lets it go on demand, and reads while it holds it: ``BEGIN IMMEDIATE``
    on a SQLite file, the advisory write lock on PostgreSQL."""

    def __init__(self, target: str | Path) -> None:
        self._pg = is_database_url(str(target))
        self._conn: Any = (PgConnection(conninfo(str(target)), connect_timeout=5) if self._pg
                           else sqlite3.connect(target, timeout=60, isolation_level=None))
        self.held = False

    def take(self) -> None:
        if self._pg:
            self._conn.execute("BEGIN")
            # Both of the default tenant's locks, as an erasure holds them: writers and
            # search-log rows wait.
            self._conn.execute(f"SELECT {tenant_lock(WRITE_LOCK, DEFAULT_TENANT)},"
                               f" {tenant_lock(LOG_LOCK, DEFAULT_TENANT)}")
        else:
            self._conn.execute("BEGIN IMMEDIATE")
        self.held = True

    def release(self) -> None:
        self._conn.execute("COMMIT")
        self.held = False

    def scalar(self, sql: str) -> Any:
        return self._conn.execute(sql).fetchone()[0]

    def close(self) -> None:
        if self.held:
            self._conn.execute("ROLLBACK")
            self.held = False
        self._conn.close()


@contextmanager
def write_lock_held(path: str | Path) -> Iterator[None]:
    """Another connection (as another process would) holds the write lock for the body."""
    locker = WriteLocker(path)
    try:
        locker.take()
        yield
    finally:
        locker.close()


class FullDiskStore(Store):
    """A store whose file may not grow by a single page: SQLite's ``max_page_count``
    answers a write that needs a new page with SQLITE_FULL, exactly as a full disk does."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        with self._lock:
            pages = int(self._conn.execute("PRAGMA page_count").fetchone()[0])
            self._conn.execute(f"PRAGMA max_page_count = {pages}")


def stale_index(path: str | Path, index: str, keeps: str) -> None:
    """Make ``index`` (an index on ``records``) hold only the rows where ``keeps`` is true,
    while its definition still says it holds every row: what a damaged index page that
    still parses does, in a closed store file. SQLite then answers queries through it with
    rows missing and no error. Built as a partial index whose b-tree is then handed to
    ``index`` by rewriting the schema."""
    with sqlite3.connect(path) as conn:
        ((definition,),) = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (index,)).fetchall()
        partial = definition.replace(f"INDEX {index} ", "INDEX retold_stale ", 1) + f" WHERE {keeps}"
        conn.execute(partial)
        ((root,),) = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'retold_stale'").fetchall()
        conn.execute("PRAGMA writable_schema = ON")
        conn.execute("DELETE FROM sqlite_master WHERE name = 'retold_stale'")
        conn.execute("UPDATE sqlite_master SET rootpage = ? WHERE name = ?", (root, index))
        ((version,),) = conn.execute("PRAGMA schema_version").fetchall()
        conn.execute(f"PRAGMA schema_version = {version + 1}")
        conn.execute("PRAGMA writable_schema = OFF")


def corrupt_page(path: str | Path, table: str | None = None) -> None:
    """Overwrite the b-tree header of ``table``'s root page (page 1, the schema, when None)
    in a closed, checkpointed store file, as a torn write or a bad disk would."""
    page = 1
    if table is not None:
        ((page,),) = rows(path, "SELECT rootpage FROM sqlite_master WHERE name = ?", table)
    ((size,),) = rows(path, "PRAGMA page_size")
    header = 100 if page == 1 else 0  # page 1 starts with the 100-byte file header
    with open(path, "r+b") as handle:
        handle.seek((page - 1) * size + header)
        handle.write(b"\xff" * 12)


def corrupt_fts_segments(path: str | Path, pages: int = 3) -> None:
    """Overwrite the middle of the first ``pages`` leaf pages that hold the full-text
    index's segments, in a closed, checkpointed store file: the b-tree stays readable,
    the segment data inside it does not."""
    leaves = rows(path, "SELECT pageno FROM dbstat WHERE name = 'records_fts_data' AND pagetype = 'leaf'"
                        " ORDER BY pageno")
    ((size,),) = rows(path, "PRAGMA page_size")
    with open(path, "r+b") as handle:
        for (page,) in leaves[:pages]:
            handle.seek((page - 1) * size + 200)
            handle.write(b"\xff" * 64)


def corrupt_leaf(path: str | Path, name: str, nth: int, offset: int) -> int:
    """Overwrite 64 bytes at ``offset`` (from the page's end when negative) of the ``nth``
    leaf page (wrapping round) of the b-tree ``name``, a table or an index, in a closed,
    checkpointed store file, as :func:`corrupt_fts_segments` does to the full-text
    index; returns the page number."""
    leaves = rows(path, "SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf'"
                        " ORDER BY pageno", name)
    ((size,),) = rows(path, "PRAGMA page_size")
    ((page,),) = leaves[nth % len(leaves):][:1]
    with open(path, "r+b") as handle:
        handle.seek((page - 1) * size + offset % size)
        handle.write(b"\xff" * 64)
    return int(page)
