"""The operator's numbers and their Prometheus form.

:class:`Metrics` says what writes decided, how often searches came back empty, how
extraction went and how long it lagged behind the end of a session, what the extraction
audit's answers say (:mod:`retold.quality.audit`), and how much work waits in the queues.
``retold metrics`` prints them; :func:`serve_metrics` is the small HTTP server a worker
runs to export the same values (``metrics.port``). Only that server needs the ``monitor``
extra, so ``prometheus_client`` is imported inside the functions that use it and
``retold metrics`` works without it.

Everything except the queue depths is read from the store, so any process that opens it
reports the same numbers, and no counter lives in a worker's memory to be lost on restart:
each scrape reads the store afresh, a restart loses nothing, and one worker's endpoint
describes the whole deployment. Totals are counters; session states, queue depths and lag
percentiles are gauges. A count shrinks only when retention or erasure removes rows,
which Prometheus reads as a counter reset. The endpoint reads every tenant of the store,
one runtime each, and labels each number with its tenant.
"""

from __future__ import annotations

import logging
import math
import sqlite3
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from threading import Thread
from typing import TYPE_CHECKING

from retold.broker.depth import QueueDepths
from retold.errors import RetoldError
from retold.quality.audit import AuditSummary, audit_summary
from retold.store import Store

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from prometheus_client.core import Metric

    from retold.utility.rollback import TurnStats

__all__ = ["ExtractionLag", "Metrics", "MetricsEndpoint", "RetoldCollector", "SearchCounts",
           "collect_metrics", "families", "nearest_rank", "serve_metrics"]

log = logging.getLogger(__name__)

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
    embeddings_pending: int = 0  # records stored without their vector, until the backfill
    # Vectors a process serving this tenant holds once its index is loaded.
    vectors_indexed: int = 0
    # Per scope, (duplicate share, stale provisional share) from `retold hygiene`'s measure;
    # filled by `retold metrics`, not by the Prometheus endpoint (it compares vectors).
    hygiene: dict[str, tuple[float, float]] = field(default_factory=dict)
    # Per bundle, the host-issued memory decisions (retold.utility.rollback); filled by
    # `retold metrics`.
    turns: dict[str, TurnStats] = field(default_factory=dict)
    # The extraction audit's rates and queue (retold.quality.audit); always its own window
    # of answers, whatever ``since`` says.
    audit: AuditSummary | None = None


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
        embeddings_pending=store.pending_count(),
        vectors_indexed=store.indexed_count(),
        audit=audit_summary(store, now=now),
    )


def _search_counts(total: int, empty: int) -> SearchCounts:
    return SearchCounts(total, empty, round(empty / total, 4) if total else None)


def _lag(seconds: list[float]) -> ExtractionLag:
    if not seconds:
        return ExtractionLag(0, 0.0, None, None, None)
    ordered = sorted(seconds)
    return ExtractionLag(len(ordered), round(sum(ordered), 3), nearest_rank(ordered, 0.50),
                         nearest_rank(ordered, 0.95), round(ordered[-1], 3))


def nearest_rank(ordered: list[float], quantile: float) -> float:
    """The nearest-rank percentile: a value some session actually waited."""
    return round(ordered[max(0, math.ceil(quantile * len(ordered)) - 1)], 3)


# -- the Prometheus form ---------------------------------------------------------------


def families(readings: Mapping[str, Metrics]) -> list[Metric]:
    """Every metric family of one reading per tenant: each family from the store carries a
    ``tenant`` label, so one tenant's numbers never add into another's; the queues are the
    deployment's, read once."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, SummaryMetricFamily

    by = ["tenant"]
    writes = CounterMetricFamily("retold_writes", "Memory writes by outcome.", labels=[*by, "outcome"])
    searches = CounterMetricFamily("retold_searches", "Logged searches by trigger.", labels=[*by, "trigger"])
    empty = CounterMetricFamily("retold_searches_empty", "Logged searches that returned nothing, by trigger.",
                                labels=[*by, "trigger"])
    extractions = CounterMetricFamily("retold_extractions", "Extraction runs by outcome.",
                                      labels=[*by, "outcome"])
    sessions = GaugeMetricFamily("retold_sessions", "Sessions by extraction state.", labels=[*by, "state"])
    lag = SummaryMetricFamily("retold_extraction_lag_seconds",
                              "Seconds from a session's end to its extraction.", labels=by)
    quantiles = GaugeMetricFamily("retold_extraction_lag_quantile_seconds",
                                  "Nearest-rank quantiles of the extraction lag.", labels=[*by, "quantile"])
    pending = GaugeMetricFamily("retold_embeddings_pending",
                                "Records stored without their vector, waiting for the backfill.", labels=by)
    indexed = GaugeMetricFamily("retold_index_vectors",
                                "Vectors a process serving the tenant holds once its index is loaded.",
                                labels=by)
    audit = _audit_families(readings)
    for tenant, m in readings.items():
        indexed.add_metric([tenant], m.vectors_indexed)
        for outcome, n in m.writes.items():
            writes.add_metric([tenant, outcome], n)
        for trigger, counts in m.searches_by_trigger.items():
            searches.add_metric([tenant, trigger], counts.total)
            empty.add_metric([tenant, trigger], counts.empty)
        for outcome, n in m.extractions.items():
            extractions.add_metric([tenant, outcome], n)
        for state, n in m.sessions.items():
            sessions.add_metric([tenant, state], n)
        lag.add_metric([tenant], count_value=m.extraction_lag.count, sum_value=m.extraction_lag.total_seconds)
        for name, value in (("0.5", m.extraction_lag.p50_seconds), ("0.95", m.extraction_lag.p95_seconds),
                            ("1", m.extraction_lag.max_seconds)):
            if value is not None:
                quantiles.add_metric([tenant, name], value)
        pending.add_metric([tenant], m.embeddings_pending)
    out: list[Metric] = [writes, searches, empty, extractions, sessions, lag, quantiles, pending, indexed,
                         *audit]
    queue = next((m.queue for m in readings.values() if m.queue is not None), None)
    if queue is not None:
        out.append(GaugeMetricFamily("retold_broker_up", "1 when the broker answered within 2 s.",
                                     value=int(queue.reachable)))
        depth = GaugeMetricFamily("retold_queue_depth", "Messages waiting per queue.", labels=["queue"])
        for name, n in queue.depths.items():
            depth.add_metric([name], n)
        out.append(depth)
    return out


def _audit_families(readings: Mapping[str, Metrics]) -> list[Metric]:
    """The extraction audit per tenant: answers in its window, the share answered yes to
    each question (only once something is answered), and the open queue and its age."""
    from prometheus_client.core import GaugeMetricFamily

    by = ["tenant"]
    answered = GaugeMetricFamily("retold_audit_answered", "Extraction audit items answered, of those"
                                 " sampled in the rates' window.", labels=by)
    rates = GaugeMetricFamily("retold_audit_rate", "Share of answered extraction audit items a person"
                              " called true, atomic or worth keeping.", labels=[*by, "question"])
    waiting = GaugeMetricFamily("retold_audit_open", "Extraction audit items waiting for an answer.",
                                labels=by)
    age = GaugeMetricFamily("retold_audit_queue_age_seconds",
                            "Age of the longest-waiting unanswered audit item; 0 when none waits.", labels=by)
    for tenant, m in readings.items():
        if m.audit is None:
            continue
        answered.add_metric([tenant], m.audit.answered)
        for question, value in (("true", m.audit.true_rate), ("atomic", m.audit.atomic_rate),
                                ("keep", m.audit.keep_rate)):
            if value is not None:
                rates.add_metric([tenant, question], value)
        waiting.add_metric([tenant], m.audit.open)
        age.add_metric([tenant], m.audit.queue_age_seconds or 0.0)
    return [answered, rates, waiting, age]


class RetoldCollector:
    """A Prometheus collector that calls ``read`` on every scrape. A store that cannot be
    read turns into ``retold_up 0`` (logged), never into a failed scrape."""

    def __init__(self, read: Callable[[], Mapping[str, Metrics]]) -> None:
        self._read = read

    def collect(self) -> Iterable[Metric]:
        from prometheus_client.core import GaugeMetricFamily

        try:
            reading = self._read()
        except (RetoldError, sqlite3.Error, OSError) as exc:
            log.warning("metrics: cannot read the store: %s", exc)
            yield GaugeMetricFamily("retold_up", "1 when the store could be read.", value=0)
            return
        yield GaugeMetricFamily("retold_up", "1 when the store could be read.", value=1)
        yield from families(reading)


@dataclass(frozen=True)
class MetricsEndpoint:
    """A running endpoint; ``close`` stops it."""

    host: str
    port: int  # the bound port (the one asked for, or the one chosen for port 0)
    _server: WSGIServer
    _thread: Thread

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def serve_metrics(read: Callable[[], Mapping[str, Metrics]], host: str, port: int) -> MetricsEndpoint:
    """Serve ``read``'s metrics (one reading per tenant) at ``http://host:port/metrics``
    from a daemon thread; raises OSError when the port is taken."""
    from prometheus_client import start_http_server
    from prometheus_client.registry import CollectorRegistry

    registry = CollectorRegistry()
    registry.register(RetoldCollector(read))
    server, thread = start_http_server(port, host, registry=registry)
    return MetricsEndpoint(host, int(server.server_port), server, thread)
