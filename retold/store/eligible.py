"""EligibleSet: the ids the hard filter admitted, with their integer keys."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from datetime import datetime

import numpy as np

__all__ = ["EligibleSet"]


class EligibleSet:
    """The output of ``Store.eligible_ids``: the records a search may consider.

    It behaves as a read-only set of record ids. It also carries each record's ``seq``
    (its stable integer key), so the vector index can turn 50K
    eligible records into matrix positions with one array lookup instead of 50K dict
    lookups, and the lexical generator can join FTS rowids directly.
    """

    __slots__ = ("_set", "ids", "records_version", "seqs", "token", "valid_until")
    _tokens = itertools.count(1)

    def __init__(
        self,
        ids: Sequence[str],
        seqs: np.ndarray,
        *,
        records_version: int = -1,
        valid_until: datetime | None = None,
    ) -> None:
        if len(ids) != len(seqs):
            raise ValueError("ids and seqs must align")
        self.ids = list(ids)
        self.seqs = np.asarray(seqs, dtype=np.int64)
        self._set: frozenset[str] | None = None
        # Identity for caches of derived structures (the lexical temp table).
        self.token = next(self._tokens)
        # The store state it reflects, and the earliest expiry that would change it: the
        # set stays exact while records_version is unchanged and now <= valid_until.
        self.records_version = records_version
        self.valid_until = valid_until

    def as_set(self) -> frozenset[str]:
        if self._set is None:
            self._set = frozenset(self.ids)
        return self._set

    def __contains__(self, record_id: object) -> bool:
        return record_id in self.as_set()

    def __iter__(self) -> Iterator[str]:
        return iter(self.ids)

    def __len__(self) -> int:
        return len(self.ids)

    def __repr__(self) -> str:
        return f"EligibleSet({len(self.ids)} ids)"
