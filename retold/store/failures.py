"""SQLite failures as Retold errors, and the connection lock that raises them.

SQLite reports a held write lock, a read-only file, a full disk and a damaged page all as
``OperationalError`` or ``DatabaseError``; only the result code tells them apart. The
remedies are opposite (wait, fix permissions, free space, restore a copy), and a message
that lumps them together invites an operator to delete a healthy store that was merely
busy. So every store access runs under :class:`StoreLock`, and a SQLite error of one of
these kinds leaves the store as its own :class:`~retold.errors.StoreError` subclass, with
the SQLite error kept as its cause; a damaged page also leaves the damage mark
(:mod:`retold.store.damage`), so no process writes on. Other SQLite errors (a
constraint, a bad statement) are bugs or caller mistakes and pass through unchanged.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from types import TracebackType

from retold.errors import (
    StoreCorruptError,
    StoreError,
    StoreFullError,
    StoreLockedError,
    StoreReadOnlyError,
)
from retold.store.damage import note_damage

__all__ = [
    "CANTOPEN", "READONLY", "StoreLock", "condition_error", "primary_code", "translate", "translate_pg",
]

# SQLite's primary result codes (an extended code keeps the primary one in its low byte).
BUSY, READONLY, IOERR, CORRUPT, FULL, CANTOPEN, NOTADB = 5, 8, 10, 11, 13, 14, 26
_READONLY_DBMOVED = READONLY | (4 << 8)  # the file was renamed or deleted while open
_UNDECODABLE = "Could not decode to UTF-8"  # Python's sqlite3, reading a text column


def primary_code(exc: sqlite3.Error) -> int | None:
    """SQLite's primary result code of ``exc``, or None when it carries none."""
    code = getattr(exc, "sqlite_errorcode", None)
    return None if code is None else int(code) & 0xFF


def translate(exc: sqlite3.Error, path: str, *, waited: float, busy_timeout: float,
              read_only_reason: str | None = None) -> StoreError | None:
    """The Retold error for ``exc``, or None when it is not a condition of the file.

    ``waited`` is how long the failed access had been running, which for a lock is the
    wait SQLite gave up on; ``read_only_reason`` says why the store was opened read-only.
    """
    code = primary_code(exc)
    if code is None and str(exc).startswith(_UNDECODABLE):
        # Retold writes only valid UTF-8 text, so a text column that does not decode is
        # bytes a damaged page put there: a damage like SQLite's own CORRUPT.
        code = CORRUPT
    if code == READONLY and getattr(exc, "sqlite_errorcode", None) == _READONLY_DBMOVED:
        return StoreReadOnlyError(f"store {path} was moved or deleted while open; reopen it")
    kind = {BUSY: "locked", READONLY: "read_only", FULL: "full", CORRUPT: "damaged", NOTADB: "damaged",
            IOERR: "unreadable", CANTOPEN: "unreadable"}.get(code or 0)
    return condition_error(kind, path, " ".join(str(exc).split()), waited=waited,
                           busy_timeout=busy_timeout, read_only_reason=read_only_reason)


def condition_error(kind: str | None, path: str, reason: str, *, waited: float, busy_timeout: float,
                    read_only_reason: str | None = None) -> StoreError | None:
    """The Retold error for one condition of the store, with its remedy; None for None.
    Both backends report through this, so a caller sees the same error for the same
    condition."""
    if kind == "locked":
        return StoreLockedError(
            f"store {path} is locked by another connection's write; gave up after waiting "
            f"{waited:.1f} s (store.busy_timeout_seconds: {busy_timeout:g}); nothing was changed, "
            "retry when that write has finished")
    if kind == "read_only":
        why = f"{read_only_reason}; " if read_only_reason else ""
        return StoreReadOnlyError(f"store {path} is read-only ({why}{reason}): searches and reads "
                                  "work, this write was refused and nothing was changed")
    if kind == "full":
        return StoreFullError(f"store {path} cannot grow: the disk is full ({reason}); the write was "
                              "rolled back, free some space and retry")
    if kind == "damaged":
        return StoreCorruptError(f"store {path} is damaged ({reason}); nothing was changed: run `retold "
                                 f"check --store {path}`, keep the file for inspection and restore the "
                                 "store from a snapshot")
    if kind == "unreadable":
        return StoreError(f"store {path}: the file cannot be read or written ({reason})")
    return None


# PostgreSQL's SQLSTATE classes for the same conditions.
_PG_KINDS = {"55P03": "locked", "25006": "read_only", "53100": "full", "XX001": "damaged",
             "XX002": "damaged"}


def translate_pg(exc: BaseException, path: str, *, waited: float, busy_timeout: float,
                 read_only_reason: str | None = None) -> StoreError | None:
    """The Retold error for a psycopg failure, or None for a bug or a caller mistake.
    A lost or refused connection is a StoreError of its own."""
    kind = _PG_KINDS.get(str(getattr(exc, "sqlstate", "") or ""))
    reason = " ".join(str(exc).split())
    if kind is None and type(exc).__name__ == "OperationalError":
        return StoreError(f"store {path}: the database cannot be reached ({reason})")
    return condition_error(kind, path, reason, waited=waited, busy_timeout=busy_timeout,
                           read_only_reason=read_only_reason)


class StoreLock:
    """The re-entrant lock that serialises a Store's threads on its one connection.

    Leaving it with a SQLite error of a known kind raises the matching Retold error
    instead (see the module docstring); the time since the outermost acquisition is the
    wait a lock error reports.
    """

    def __init__(self, path: str, busy_timeout: float, read_only_reason: str | None = None) -> None:
        self.path = path
        self.busy_timeout = busy_timeout
        self.read_only_reason = read_only_reason
        self._lock = threading.RLock()
        self._held = 0
        self._since = 0.0

    def __enter__(self) -> StoreLock:
        self._lock.acquire()
        if not self._held:
            self._since = time.monotonic()
        self._held += 1
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        waited = time.monotonic() - self._since
        self._held -= 1
        self._lock.release()
        if isinstance(exc, sqlite3.Error):
            translated = translate(exc, self.path, waited=waited, busy_timeout=self.busy_timeout,
                                   read_only_reason=self.read_only_reason)
        elif exc is not None and type(exc).__module__.startswith("psycopg"):
            translated = translate_pg(exc, self.path, waited=waited, busy_timeout=self.busy_timeout,
                                      read_only_reason=self.read_only_reason)
        else:
            return
        if translated is not None:
            if isinstance(translated, StoreCorruptError):
                note_damage(self.path, " ".join(str(exc).split()))
            raise translated from exc
