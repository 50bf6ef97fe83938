"""Which live records a scope over its cap gives up, and why.

A scope capped by ``lifecycle.max_active_per_scope`` keeps its best records live and
archives the rest (status ``expired``, searchable as history, restorable). "Best" is one
score in [0, 1], the mean of four parts, each in [0, 1] and each something a person can
check on the record:

- ``trust``: the configured rank of its source kind over the highest rank, so an
  operator who re-ranks sources re-ranks what capacity keeps;
- ``explicit``: half for an evidence quote found in the source (what was said, not what
  was concluded), half for being confirmed (by a person, a review or independent
  support) rather than provisional;
- ``use``: how recently it was last useful - reinforced, returned by a search, or
  restored by somebody - halving every ``USE_HALF_LIFE_DAYS``; never used is 0;
- ``fresh``: how recent the fact is (the later of when it happened and when it was
  written), halving every ``FRESH_HALF_LIFE_DAYS``.

The parts weigh the same: no labelled data here says one predicts future use better
than another, and equal weights keep each part's effect easy to state (a part moves the
score by at most a quarter). Two records are never archived whatever they score: a
pinned one, and the current value of a named attribute (the newest live record holding
that subject and attribute), so a cap never leaves an attribute with no live value.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from retold.store.capacity import CapacityRow

__all__ = ["FRESH_HALF_LIFE_DAYS", "USE_HALF_LIFE_DAYS", "Archival", "ScoreParts",
           "choose_archivals", "score"]

USE_HALF_LIFE_DAYS = 30.0  # a month without use halves the use part
FRESH_HALF_LIFE_DAYS = 180.0  # half a year halves the freshness part


@dataclass(frozen=True)
class ScoreParts:
    trust: float
    explicit: float
    use: float
    fresh: float

    @property
    def total(self) -> float:
        return (self.trust + self.explicit + self.use + self.fresh) / 4

    def as_dict(self) -> dict[str, float]:
        return {"trust": round(self.trust, 4), "explicit": round(self.explicit, 4),
                "use": round(self.use, 4), "fresh": round(self.fresh, 4), "total": round(self.total, 4)}


@dataclass(frozen=True)
class Archival:
    """One record the sweep archives, with the parts of the score that chose it."""

    row: CapacityRow
    parts: ScoreParts


def _halving(since: datetime, now: datetime, half_life_days: float) -> float:
    days = max(0.0, (now - since).total_seconds() / 86400)
    return float(0.5 ** (days / half_life_days))


def score(row: CapacityRow, now: datetime, ranks: Mapping[str, int]) -> ScoreParts:
    top = max(ranks.values(), default=0)
    trust = ranks.get(row.source_kind, 0) / top if top > 0 else 0.0
    explicit = 0.5 * row.has_evidence + 0.5 * (row.status == "confirmed")
    use = 0.0 if row.last_used_at is None else _halving(row.last_used_at, now, USE_HALF_LIFE_DAYS)
    fresh = _halving(max(row.created_at, row.event_at), now, FRESH_HALF_LIFE_DAYS)
    return ScoreParts(trust, explicit, use, fresh)


def _protected(rows: list[CapacityRow]) -> set[str]:
    """Pinned records, and per named attribute the newest live record holding it."""
    kept = {row.record_id for row in rows if row.pinned}
    current: dict[tuple[str, str], CapacityRow] = {}
    for row in rows:
        if row.attribute is None:
            continue
        key = (row.subject, row.attribute)
        held = current.get(key)
        if held is None or (row.event_at, row.seq) > (held.event_at, held.seq):
            current[key] = row
    return kept | {row.record_id for row in current.values()}


def choose_archivals(rows: Iterable[CapacityRow], cap: int, now: datetime,
                     ranks: Mapping[str, int]) -> list[Archival]:
    """The lowest-scoring unprotected records, as many as bring ``rows`` down to ``cap``
    (fewer when the protected ones alone exceed it); ties go to the older write."""
    rows = list(rows)
    over = len(rows) - cap
    if over <= 0:
        return []
    protected = _protected(rows)
    scored = sorted(((score(row, now, ranks), row) for row in rows if row.record_id not in protected),
                    key=lambda pair: (pair[0].total, pair[1].seq))
    return [Archival(row, parts) for parts, row in scored[:over]]
