"""Validity windows: when a record's value held in the world, as supersession keeps them.

A record's window starts at its ``valid_from`` or, without one, at its ``event_at`` (when
it was said or happened), and ends at its ``valid_until``; no end means it still holds.
When a record replaces another, the old window ends where the new one starts (the change
the write dated, else when it was recorded); an end the old record already had that comes
earlier stays, and an end never falls before the old record's own start. A superseded
record without an end cannot be placed in time, so an as-of search never returns it
(docs/decisions.md, "Validity windows and as-of search").

The store applies the same rule in SQL (``Store.eligible_ids`` with ``as_of``); the
functions here are its Python form, for the write path and for what a result shows.
"""

from __future__ import annotations

from datetime import datetime

from retold.models import Record

__all__ = ["closed_at", "describe", "holds_at", "starts"]


def starts(record: Record) -> datetime:
    """Where the record's window starts: ``valid_from``, else ``event_at``."""
    return record.valid_from or record.event_at


def closed_at(old: Record, change: datetime) -> datetime | None:
    """The ``valid_until`` ``old`` takes when a value that started at ``change`` replaces
    it; None when its window already ends no later (an explicit end wins)."""
    if old.valid_until is not None and old.valid_until <= change:
        return None
    return max(change, starts(old))


def holds_at(record: Record, moment: datetime) -> bool:
    """Whether ``record``'s window covers ``moment`` (start included, end excluded). A
    superseded record without an end is never placed in time."""
    if record.status == "superseded" and record.valid_until is None:
        return False
    return starts(record) <= moment and (record.valid_until is None or moment < record.valid_until)


def describe(record: Record) -> str:
    """The window as a result shows it: ``valid 2026-01-10 to 2026-03-01``, or ``valid
    from 2026-01-10`` while it holds (``, end unknown`` for a superseded record)."""
    start = starts(record).date().isoformat()
    if record.valid_until is None:
        if record.status == "superseded":
            return f"valid from {start}, end unknown"
        return f"valid from {start}"
    return f"valid {start} to {record.valid_until.date().isoformat()}"
