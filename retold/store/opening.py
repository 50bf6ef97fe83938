"""How a store file is opened: read-write, or read-only when the config asks for it or
this process may not write the file.

A read-only store still serves searches and reads; SQLite's ``mode=ro`` refuses every
write, which the store reports as :class:`~retold.errors.StoreReadOnlyError`. See
docs/decisions.md, "A store that cannot be written opens read-only".
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from retold.errors import NotADatabaseError, StoreReadOnlyError
from retold.store.failures import CANTOPEN, NOTADB, READONLY, primary_code
from retold.store.migrations import current_version

__all__ = ["connect", "journal_mode", "read_only_reason", "refuse_foreign"]


def read_only_reason(path: str, asked: bool) -> str | None:
    """Why the store at ``path`` must be opened read-only, or None when it may be written.

    ``access(2)`` grants root every write except on a read-only mount, which is also what
    SQLite will find; a write SQLite refuses anyway is reported as read-only all the same.
    """
    if asked:
        return "store.read_only is set"
    target = Path(path)
    folder = target.parent
    if folder.is_dir() and os.statvfs(folder).f_flag & os.ST_RDONLY:
        return "it is on a read-only file system"
    if target.exists() and not os.access(target, os.W_OK):
        return "the file is not writable by this process"
    # A write needs the -wal and -shm files beside the store: writable if they exist, or
    # a folder that lets SQLite create them.
    if all(os.access(f"{path}{suffix}", os.W_OK) for suffix in ("-wal", "-shm")):
        return None
    if folder.is_dir() and not os.access(folder, os.W_OK | os.X_OK):
        return "its folder is not writable by this process"
    return None


def _open(target: str, busy_timeout: float, *, uri: bool = False) -> sqlite3.Connection:
    return sqlite3.connect(
        target,
        timeout=busy_timeout,
        isolation_level=None,  # the store issues BEGIN IMMEDIATE itself
        check_same_thread=False,  # the store's lock guards it
        uri=uri,
    )


def refuse_foreign(conn: sqlite3.Connection, path: str) -> None:
    """Close ``conn`` and raise NotADatabaseError when its file is not a SQLite database.

    SQLite reads the file's header on the first statement and writes nothing before it.
    The header is not read with ``open()`` beside the connection: closing any descriptor
    of a file drops every POSIX lock this process holds on it, the shared lock that tells
    other processes this one still uses the store among them. A process that then closes
    its own connection believes it is the last, and deletes the WAL index the first one
    still reads from, which leaves that one reading a stale store, or worse.
    """
    try:
        conn.execute("PRAGMA schema_version").fetchone()
    except sqlite3.DatabaseError as exc:
        if primary_code(exc) != NOTADB:
            raise
        conn.close()
        raise NotADatabaseError(f"{path} is not a SQLite database; refusing to open it") from exc


def connect(path: str, busy_timeout: float, read_only_reason: str | None) -> sqlite3.Connection:
    """A read-write connection, or (with a ``read_only_reason``) a read-only one through
    ``mode=ro``, so that SQLite itself refuses every write; TEMP tables still work. A file
    that is not a SQLite database is refused before anything is written to it."""
    if read_only_reason is None:
        conn = _open(path, busy_timeout)
        refuse_foreign(conn, path)
        return conn
    target = Path(path)
    if not target.exists():
        raise StoreReadOnlyError(f"no store at {path}, and none is created when it must be opened "
                                 f"read-only ({read_only_reason})")
    uri = target.resolve().as_uri() + "?mode=ro"
    conn = _open(uri, busy_timeout, uri=True)
    try:
        # The first read opens the WAL index beside the file; in a folder that refuses to
        # create the -shm it fails there, before any Retold table is read.
        refuse_foreign(conn, path)
        current_version(conn)
        return conn
    except sqlite3.OperationalError as exc:
        conn.close()
        if primary_code(exc) not in (READONLY, CANTOPEN):
            raise
        wal = Path(f"{path}-wal")
        if wal.exists() and wal.stat().st_size > 0:
            raise StoreReadOnlyError(
                f"store {path} cannot be read here: its -wal file holds changes that need a -shm "
                "file SQLite cannot create in this folder; open it once with write access, or "
                "copy the store with its -wal file to a writable folder") from exc
    # The folder refuses the -shm file, but no -wal holds changes, so the main file is the
    # whole database: immutable=1 reads it without the -shm. A writer with more rights
    # could change it meanwhile; on a read-only mount there is none.
    conn = _open(uri + "&immutable=1", busy_timeout, uri=True)
    refuse_foreign(conn, path)
    return conn


def journal_mode(conn: sqlite3.Connection) -> str:
    """The connection's journal mode, lower case (``wal`` once a store has been set up)."""
    return str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower()
