"""The eligible set of each scope and type this process writes into, kept by delta.

A write's duplicate search looks among the live records of the scope and type it writes
(``Store.eligible_ids``). Read whole, that set costs every write in proportion to the
scope, though it changes by a record or two from one write to the next. So each set is
kept here with the ``records_version`` it reflects and brought up to date from the
records changed since (``Store.scope_rows_since``), whichever process changed them;
records whose expiry has passed leave it as the clock passes them.

It is read whole again when first wanted, when more records changed than a delta is
worth, when the clock went back, and when the store's content was replaced (a snapshot
loaded: its records_version may be lower than the kept one). Its ids are in the
order ``eligible_ids`` lists them on SQLite, so the duplicate search ranks equal scores as
it did over a set read whole.
"""

from __future__ import annotations

import heapq
import threading
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np

from retold.clock import from_iso, to_iso
from retold.models import ACTIVE_STATUSES, Scope
from retold.store import EligibleSet, Store
from retold.store.scope_rows import ScopeRow

__all__ = ["WriteScopes"]

# The sort key of a row: the order of the records_scope index within one scope and type
# (status, expiry with none first, event time, id).
_Key = tuple[str, str, str, str]
_KEEP = 16  # sets kept: a process writes into a few scopes at a time


def _key(row: ScopeRow) -> _Key:
    return (row.status, row.expires_at or "", row.event_at, row.id)


@dataclass
class _Kept:
    """One scope and type's eligible rows, sorted by key, as of ``version``."""

    version: int
    used_at: str  # the latest ``now`` it was brought up to (ISO)
    keys: list[_Key] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    seqs: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    key_of: dict[str, _Key] = field(default_factory=dict)
    expiring: list[tuple[str, str]] = field(default_factory=list)  # heap of (expires_at, id)
    current: EligibleSet | None = None  # the set as last handed out; None: changed since

    def add(self, row: ScopeRow) -> None:
        key = _key(row)
        at = bisect_left(self.keys, key)
        self.keys.insert(at, key)
        self.ids.insert(at, row.id)
        self.seqs = np.insert(self.seqs, at, row.seq)
        self.key_of[row.id] = key
        if row.expires_at is not None:
            heapq.heappush(self.expiring, (row.expires_at, row.id))
        self.current = None

    def drop(self, record_id: str) -> None:
        key = self.key_of.pop(record_id, None)
        if key is None:
            return
        at = bisect_left(self.keys, key)
        del self.keys[at], self.ids[at]
        self.seqs = np.delete(self.seqs, at)
        self.current = None

    def expire(self, now: str) -> None:
        """Drop the rows whose expiry is before ``now``, as the eligible set's SQL would."""
        while self.expiring and self.expiring[0][0] < now:
            expires_at, record_id = heapq.heappop(self.expiring)
            key = self.key_of.get(record_id)
            if key is not None and key[1] == expires_at:  # not an entry a later change replaced
                self.drop(record_id)

    def eligible(self) -> EligibleSet:
        # The same object while the rows are the same: the vector index keeps the rows it
        # gathered for a set until the set or the index changes.
        if self.current is None:
            valid_until = from_iso(self.expiring[0][0]) if self.expiring else None
            self.current = EligibleSet(self.ids, self.seqs, records_version=self.version,
                                       valid_until=valid_until)
        return self.current


class WriteScopes:
    """Eligible sets of (scope, type), kept current by delta; safe to share between threads."""

    def __init__(self, store: Store, delta_max: int = 512) -> None:
        self.store = store
        self.delta_max = delta_max  # more changed rows than this: read the set whole
        self._kept: OrderedDict[tuple[Scope, str], _Kept] = OrderedDict()
        self._lock = threading.Lock()
        self._replaced = store.replaced

    def eligible(self, scope: Scope, type_: str, now: datetime, *, keep: bool = True) -> EligibleSet:
        """What ``store.eligible_ids([scope], [type_], now=now)`` returns, in its order.

        ``keep=False`` where the caller's transaction may already hold changes of its own
        (a write nested in a larger one): they could still be rolled back, so the set is
        read whole and nothing is kept from it."""
        if not keep:
            return self.store.eligible_ids([scope], [type_], now=now)
        at = to_iso(now)
        with self._lock:
            if self._replaced != self.store.replaced:  # a snapshot was loaded into the store
                self._kept.clear()
                self._replaced = self.store.replaced
            kept = self._kept.get((scope, type_))
            if kept is None or at < kept.used_at:
                return self._read_whole(scope, type_, at, now).eligible()
            version, changed = self.store.scope_rows_since(kept.version, scope, type_, self.delta_max + 1)
            # A version below the kept one: the store's content went back (a snapshot).
            if len(changed) > self.delta_max or version < kept.version:
                return self._read_whole(scope, type_, at, now).eligible()
            self._kept.move_to_end((scope, type_))
            self._apply(kept, changed, at)
            kept.version, kept.used_at = version, at
            return kept.eligible()

    def _read_whole(self, scope: Scope, type_: str, at: str, now: datetime) -> _Kept:
        version, rows = self.store.live_scope_rows(scope, type_, now)
        rows.sort(key=_key)  # SQLite lists them in this order already
        kept = _Kept(version, at, [_key(r) for r in rows], [r.id for r in rows],
                     np.fromiter((r.seq for r in rows), dtype=np.int64, count=len(rows)),
                     expiring=[(r.expires_at, r.id) for r in rows if r.expires_at is not None])
        kept.key_of = dict(zip(kept.ids, kept.keys, strict=True))
        heapq.heapify(kept.expiring)
        self._kept[(scope, type_)] = kept
        self._kept.move_to_end((scope, type_))
        while len(self._kept) > _KEEP:
            self._kept.popitem(last=False)
        return kept

    @staticmethod
    def _apply(kept: _Kept, changed: Iterable[ScopeRow], at: str) -> None:
        for row in changed:
            kept.drop(row.id)
            if row.status in ACTIVE_STATUSES and (row.expires_at is None or row.expires_at >= at):
                kept.add(row)
        kept.expire(at)
