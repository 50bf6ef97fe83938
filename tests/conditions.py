"""Real failure conditions of a store file for tests: a write lock another connection
holds, a full disk, a damaged page. Each is made with SQLite itself or the file's bytes,
never by mocking the store."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

from retold.config import is_database_url
from retold.store import Store
from retold.store.pg_connection import PgConnection
from retold.store.postgres import LOG_LOCK, WRITE_LOCK
from retold.store.url import conninfo
from tests.sql import rows

__all__ = ["FullDiskStore", "corrupt_page", "write_lock_held"]


@contextmanager
def write_lock_held(path: str | Path) -> Iterator[None]:
    """Another connection (as another process would) holds the write lock for the body."""
    if is_database_url(str(path)):
        pg = PgConnection(conninfo(str(path)), connect_timeout=5)
        pg.execute("BEGIN")
        # Both of the store's locks, as an erasure holds them: writers and search-log rows wait.
        pg.execute("SELECT pg_advisory_xact_lock(?), pg_advisory_xact_lock(?)", (WRITE_LOCK, LOG_LOCK))
        try:
            yield
        finally:
            pg.execute("ROLLBACK")
            pg.close()
        return
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            conn.execute("ROLLBACK")


class FullDiskStore(Store):
    """A store whose file may not grow by a single page: SQLite's ``max_page_count``
    answers a write that needs a new page with SQLITE_FULL, exactly as a full disk does."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        with self._lock:
            pages = int(self._conn.execute("PRAGMA page_count").fetchone()[0])
            self._conn.execute(f"PRAGMA max_page_count = {pages}")


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
