"""EligibleSet: the ids the hard filter admitted, with their integer keys."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

__all__ = ["EligibleSet"]


class EligibleSet:
    """The output of ``Store.eligible_ids`` (LLD 10.1 step 3).

    It behaves as a read-only set of record ids. It also carries each record's ``seq``
    (the stable integer key of LLD 3 as built here), so the vector index can turn 50K
    eligible records into matrix positions with one array lookup instead of 50K dict
    lookups, and the lexical generator can join FTS rowids directly.
    """

    __slots__ = ("_set", "ids", "seqs")

    def __init__(self, ids: Sequence[str], seqs: np.ndarray) -> None:
        if len(ids) != len(seqs):
            raise ValueError("ids and seqs must align")
        self.ids = list(ids)
        self.seqs = np.asarray(seqs, dtype=np.int64)
        self._set: frozenset[str] | None = None

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
