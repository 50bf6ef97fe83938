"""The damage mark: once any process has seen a SQLite store damaged, every process
refuses to write to it until a check passes.

SQLite notices a damaged page only when a statement reads it, and a write need not read
the damaged pages: FTS5 puts new terms in fresh segments and reads old ones only when it
merges them, so a write into a store whose full-text segments are damaged commits, and
each search after it still reads the damage. Writing on makes the eventual restore lose
more, so the first sighting stops writes everywhere: a statement that fails as corrupt, a
check (``retold check``, the worker's start-up check, the periodic beat check) that finds
damage, or a whole-scope read whose two access paths disagree.

The mark is a small file beside the store (``<store>-damaged``, as SQLite keeps ``-wal``
beside it), not a row inside it: the file is what is damaged, and a row written there may
land on the damaged pages or be hidden by them. Every write transaction looks for it
first, one ``stat``. ``retold check`` removes it when the store passes, and ``snapshot
load`` when it replaces the content. Where the mark cannot be written (a read-only folder)
the store refuses writes already.

PostgreSQL keeps no mark: the server checks its own pages and fails the statement that
meets a bad one, and a restore there is the database's, not a file's.
"""

from __future__ import annotations

import json
import logging
import os
from datetime import UTC, datetime
from pathlib import Path

from retold.config import is_database_url

__all__ = ["clear_damage", "damage_noted", "mark_path", "note_damage"]

log = logging.getLogger(__name__)

SUFFIX = "-damaged"


def mark_path(store_path: str) -> Path:
    """Where the mark of the store file at ``store_path`` lives."""
    return Path(store_path + SUFFIX)


def _marks(store_path: str) -> bool:
    """A file store keeps a mark; a database server and an in-memory store do not."""
    return store_path != ":memory:" and not is_database_url(store_path)


def note_damage(store_path: str, reason: str) -> None:
    """Leave the mark for ``store_path`` (kept as it is when one is there: the first
    sighting says most)."""
    if not _marks(store_path):
        return
    target = mark_path(store_path)
    if target.exists():
        return
    line = json.dumps({"at": datetime.now(UTC).isoformat(timespec="seconds"), "reason": reason[:500]})
    partial = target.with_name(f"{target.name}.{os.getpid()}")
    try:
        partial.write_text(line + "\n", encoding="utf-8")
        os.replace(partial, target)
    except OSError as exc:  # a read-only folder: the store refuses writes there anyway
        log.warning("store %s is damaged and its mark %s could not be written (%s)", store_path, target, exc)
        return
    log.error("store %s is damaged (%s); writes are refused until `retold check --store %s` passes",
              store_path, reason, store_path)


def damage_noted(store_path: str) -> str | None:
    """``"at <when>: <reason>"`` when the store carries the mark, else None."""
    if not _marks(store_path):
        return None
    try:
        text = mark_path(store_path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"its mark cannot be read ({exc})"
    try:
        data = json.loads(text)
        return f"at {data['at']}: {data['reason']}"
    except (ValueError, KeyError, TypeError):
        return "its mark holds no reason"  # cut short by a crash: the sighting still counts


def clear_damage(store_path: str) -> bool:
    """Remove the mark; True when there was one to remove."""
    if not _marks(store_path):
        return False
    try:
        mark_path(store_path).unlink()
    except FileNotFoundError:
        return False
    except OSError as exc:
        log.warning("store %s passed its check but its damage mark could not be removed (%s)",
                    store_path, exc)
        return False
    return True
