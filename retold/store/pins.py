"""Pins: records a host, an operator or an agent keeps from ageing out.

A pinned record is skipped by the expiry sweep and keeps no ``expires_at`` (a
reinforcement cannot give it one back), so retrieval never treats it as history while it
is pinned. A scope holds at most a configured number of pins: a pin is a promise to keep
something, and a scope where everything is pinned keeps nothing in particular.
"""

from __future__ import annotations

from retold.clock import to_iso
from retold.errors import StoreError
from retold.models import ACTIVE_STATUSES
from retold.store.base import NewEvent, StoreBase

__all__ = ["PinRefusedError", "PinsMixin"]

class PinRefusedError(StoreError):
    """A pin that cannot be set (the record is not live, or its scope holds its most
    pins); nothing was written."""


class PinsMixin(StoreBase):
    """Pin and unpin one record; each change is one event."""

    def pin(self, record_id: str, actor: str, reason: str, limit: int) -> str | None:
        """Pin a live record and clear its expiry; returns the event id, or None when it
        is already pinned. Raises PinRefusedError when the record is not live (history
        is not kept from ageing: it has aged) or its scope holds ``limit`` pins."""
        with self.atomic() as conn:
            row = conn.execute("SELECT scope_kind, scope_id, status FROM records WHERE id = ?",
                               (record_id,)).fetchone()
            if row is None:
                raise PinRefusedError(f"no memory {record_id}")
            if row[2] not in ACTIVE_STATUSES:
                raise PinRefusedError(f"memory {record_id} is not live and cannot be pinned")
            if conn.execute("SELECT 1 FROM record_pins WHERE record_id = ?", (record_id,)).fetchone():
                return None
            held = conn.execute(
                "SELECT count(*) FROM record_pins p JOIN records r ON r.id = p.record_id"
                " WHERE r.scope_kind = ? AND r.scope_id = ?", (row[0], row[1])).fetchone()[0]
            if held >= limit:
                raise PinRefusedError(f"scope {row[0]}:{row[1]} already holds {held} pinned memories,"
                                    f" the most lifecycle.max_pinned_per_scope allows; unpin one first")
            now = to_iso(self.clock.now())
            conn.execute("INSERT INTO record_pins(record_id, pinned_at, actor) VALUES (?, ?, ?)",
                         (record_id, now, actor))
            expires = conn.execute("SELECT expires_at FROM records WHERE id = ?", (record_id,)).fetchone()[0]
            if expires is not None:
                # A record past its expiry but not yet swept is eligible again: stamped with
                # a new records_version, so eligible sets kept by version see it.
                conn.execute("UPDATE records SET expires_at = NULL, index_version = ? WHERE id = ?",
                             (self.bump_version(conn), record_id))
            return self._insert_event(conn, NewEvent("record.pinned", actor, {
                "reason": reason, "cleared_expires_at": expires}, record_id))

    def unpin(self, record_id: str, actor: str, reason: str) -> str | None:
        """Remove a pin; returns the event id, or None when the record was not pinned."""
        with self.atomic() as conn:
            if not conn.execute("DELETE FROM record_pins WHERE record_id = ?", (record_id,)).rowcount:
                return None
            return self._insert_event(conn, NewEvent("record.unpinned", actor, {"reason": reason}, record_id))

    def is_pinned(self, record_id: str) -> bool:
        with self._lock:
            return self._conn.execute("SELECT 1 FROM record_pins WHERE record_id = ?",
                                      (record_id,)).fetchone() is not None
