"""Profile blocks: the profile text each session's prompt carried, kept with the session.

A block is written once per session; a second assembly for the same session gets the
stored one back, so every turn (and every process serving the session) shows the same
bytes and an answer can be traced to the profile it saw. Only erasure changes a block
afterwards: a block that showed an erased record, or that belongs to an erased user's
session, is blanked (its ids, size and time stay).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from retold.clock import from_iso, to_iso
from retold.models import ProfileBlock
from retold.store.base import NewEvent, StoreBase, chunks, marks
from retold.store.upserts import Upsert

__all__ = ["ProfilesMixin", "blank_profiles_of_records", "blank_profiles_of_user"]

_COLUMNS = "session_id, text, record_ids, omitted, tokens, inventory, assembled_at"
# The first assembly of a session's profile; a later one leaves it.
_KEEP_BLOCK = Upsert("profile_blocks", ("agent_id", "user_id", *_COLUMNS.split(", ")))
_BLANK = "UPDATE profile_blocks SET text = '', inventory = '[]' WHERE text != '' AND "


def _block(values: Sequence[object]) -> ProfileBlock:
    inventory = tuple((str(name), int(count)) for name, count in json.loads(str(values[5])))
    return ProfileBlock(str(values[0]), str(values[1]), tuple(json.loads(str(values[2]))),
                        int(str(values[3])), int(str(values[4])), inventory, from_iso(str(values[6])))


def blank_profiles_of_records(conn: sqlite3.Connection, record_ids: Sequence[str]) -> int:
    """Blank every stored block that showed one of these records; inside an erasure."""
    blanked = 0
    for chunk in chunks(list(record_ids)):
        blanked += conn.execute(
            _BLANK + "EXISTS (SELECT 1 FROM json_each(profile_blocks.record_ids)"
            f" WHERE json_each.value IN ({marks(chunk)}))", chunk).rowcount
    return blanked


def blank_profiles_of_user(conn: sqlite3.Connection, user_id: str) -> int:
    """Blank the blocks of every session of one user; inside an erasure."""
    return conn.execute(_BLANK + "user_id = ?", (user_id,)).rowcount


class ProfilesMixin(StoreBase):
    """Rows of ``profile_blocks``."""

    def keep_profile_block(self, block: ProfileBlock, agent_id: str, user_id: str,
                           event: NewEvent) -> tuple[ProfileBlock, bool]:
        """Store ``block`` as its session's profile unless one is stored already; return the
        stored block (the first assembly wins) and whether this call stored it. ``event``
        is appended only then."""
        with self.atomic() as conn:
            inserted = _KEEP_BLOCK.execute(
                conn, (agent_id, user_id, block.session_id, block.text, json.dumps(list(block.record_ids)),
                       block.omitted, block.tokens, json.dumps([list(pair) for pair in block.inventory]),
                       to_iso(block.assembled_at)))
            if inserted:
                self._insert_event(conn, event)
            stored = conn.execute(f"SELECT {_COLUMNS} FROM profile_blocks WHERE session_id = ?",
                                  (block.session_id,)).fetchone()
        return _block(stored), bool(inserted)

    def profile_block(self, session_id: str) -> ProfileBlock | None:
        """The block stored with a session, or None when none was assembled."""
        with self._lock:
            found = self._conn.execute(f"SELECT {_COLUMNS} FROM profile_blocks WHERE session_id = ?",
                                       (session_id,)).fetchone()
        return None if found is None else _block(found)
