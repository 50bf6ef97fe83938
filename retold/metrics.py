"""The operator's numbers: what writes decided, how often searches came back empty, how
extraction went and how long it lagged behind the end of a session, and how much work
waits in the queues. ``retold metrics`` prints them and the workers' Prometheus endpoint
exports the same values (:mod:`retold.prometheus`).

Everything except the queue depths is read from the store, so any process that opens it
reports the same numbers, and no counter lives in a worker's memory to be lost on restart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from retold.broker.depth import QueueDepths
from retold.store import Store

__all__ = ["ExtractionLag", "Metrics", "SearchCounts", "collect_metrics"]

# An ``extraction.<suffix>`` event kind -> the outcome it counts as.
_EXTRACTION_NAMES = {"run": "extracted"}


@dataclass(frozen=True)
class SearchCounts:
    """Searches and those that returned nothing; ``empty_rate`` is None without searches."""

    total: int
    empty: int
    empty_rate: float | None


@dataclass(frozen=True)
class ExtractionLag:
    """Seconds from a session's end to its extraction, over ``count`` extracted sessions."""

    count: int
    total_seconds: float
    p50_seconds: float | None
    p95_seconds: float | None
    max_seconds: float | None


@dataclass(frozen=True)
class Metrics:
    """One reading. ``writes``, ``extractions`` and ``searches`` count what the store kept
    since ``since`` (everything when None); ``sessions`` are current states; ``queue`` is
    None when the broker was not asked."""

    at: datetime
    since: datetime | None
    writes: dict[str, int]
    searches: SearchCounts
    searches_by_trigger: dict[str, SearchCounts]
    extractions: dict[str, int]
    sessions: dict[str, int]
    extraction_lag: ExtractionLag
    queue: QueueDepths | None


def collect_metrics(
    store: Store,
    now: datetime,
    claim_lease: timedelta,
    *,
    since: datetime | None = None,
    queue: QueueDepths | None = None,
) -> Metrics:
    """Read every count from ``store`` at ``now`` (a claim whose holder has not renewed it
    within ``claim_lease`` no longer counts as a running extraction) and attach ``queue``."""
    by_trigger = {trigger: _search_counts(total, empty)
                  for trigger, (total, empty) in sorted(store.search_counts(since).items())}
    extractions = {_EXTRACTION_NAMES.get(kind, kind): n
                   for kind, n in store.event_kind_counts("extraction.", since).items()}
    return Metrics(
        at=now, since=since,
        writes=dict(sorted(store.write_outcome_counts(since).items())),
        searches=_search_counts(sum(c.total for c in by_trigger.values()),
                                sum(c.empty for c in by_trigger.values())),
        searches_by_trigger=by_trigger,
        extractions=dict(sorted(extractions.items())),
        sessions={state: n for state, n in store.session_state_counts(now - claim_lease).items()},
        extraction_lag=_lag(store.extraction_lags(since)),
        queue=queue,
    )


def _search_counts(total: int, empty: int) -> SearchCounts:
    return SearchCounts(total, empty, round(empty / total, 4) if total else None)


def _lag(seconds: list[float]) -> ExtractionLag:
    if not seconds:
        return ExtractionLag(0, 0.0, None, None, None)
    ordered = sorted(seconds)
    return ExtractionLag(len(ordered), round(sum(ordered), 3), _rank(ordered, 0.50),
                         _rank(ordered, 0.95), round(ordered[-1], 3))


def _rank(ordered: list[float], quantile: float) -> float:
    """The nearest-rank percentile: a value some session actually waited."""
    return round(ordered[max(0, math.ceil(quantile * len(ordered)) - 1)], 3)
