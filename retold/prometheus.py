"""The Prometheus form of :class:`retold.metrics.Metrics`, and the small HTTP server a
worker runs to expose it (``metrics.port``; needs the ``monitor`` extra).

Each scrape reads the store afresh instead of counting in process memory, so every worker
exports the same numbers as ``retold metrics``, a restart loses nothing, and one worker's
endpoint describes the whole deployment. Totals are counters; session states, queue
depths and lag percentiles are gauges. A count shrinks only when retention or erasure
removes rows, which Prometheus reads as a counter reset.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from threading import Thread
from wsgiref.simple_server import WSGIServer

from prometheus_client import start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric, SummaryMetricFamily
from prometheus_client.registry import CollectorRegistry

from retold.errors import RetoldError
from retold.metrics import Metrics

__all__ = ["MetricsEndpoint", "RetoldCollector", "families", "serve_metrics"]

log = logging.getLogger(__name__)


def families(m: Metrics) -> list[Metric]:
    """Every metric family of one reading."""
    writes = CounterMetricFamily("retold_writes", "Memory writes by outcome.", labels=["outcome"])
    for outcome, n in m.writes.items():
        writes.add_metric([outcome], n)
    searches = CounterMetricFamily("retold_searches", "Logged searches by trigger.", labels=["trigger"])
    empty = CounterMetricFamily("retold_searches_empty",
                                "Logged searches that returned nothing, by trigger.", labels=["trigger"])
    for trigger, counts in m.searches_by_trigger.items():
        searches.add_metric([trigger], counts.total)
        empty.add_metric([trigger], counts.empty)
    extractions = CounterMetricFamily("retold_extractions", "Extraction runs by outcome.",
                                      labels=["outcome"])
    for outcome, n in m.extractions.items():
        extractions.add_metric([outcome], n)
    sessions = GaugeMetricFamily("retold_sessions", "Sessions by extraction state.", labels=["state"])
    for state, n in m.sessions.items():
        sessions.add_metric([state], n)
    lag = m.extraction_lag
    out: list[Metric] = [writes, searches, empty, extractions, sessions, SummaryMetricFamily(
        "retold_extraction_lag_seconds", "Seconds from a session's end to its extraction.",
        count_value=lag.count, sum_value=lag.total_seconds)]
    quantiles = GaugeMetricFamily("retold_extraction_lag_quantile_seconds",
                                  "Nearest-rank quantiles of the extraction lag.", labels=["quantile"])
    for name, value in (("0.5", lag.p50_seconds), ("0.95", lag.p95_seconds), ("1", lag.max_seconds)):
        if value is not None:
            quantiles.add_metric([name], value)
    out.append(quantiles)
    if m.queue is not None:
        out.append(GaugeMetricFamily("retold_broker_up", "1 when the broker answered within 2 s.",
                                     value=int(m.queue.reachable)))
        depth = GaugeMetricFamily("retold_queue_depth", "Messages waiting per queue.", labels=["queue"])
        for queue, n in m.queue.depths.items():
            depth.add_metric([queue], n)
        out.append(depth)
    return out


class RetoldCollector:
    """A Prometheus collector that calls ``read`` on every scrape. A store that cannot be
    read turns into ``retold_up 0`` (logged), never into a failed scrape."""

    def __init__(self, read: Callable[[], Metrics]) -> None:
        self._read = read

    def collect(self) -> Iterable[Metric]:
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


def serve_metrics(read: Callable[[], Metrics], host: str, port: int) -> MetricsEndpoint:
    """Serve ``read``'s metrics at ``http://host:port/metrics`` from a daemon thread; raises
    OSError when the port is taken."""
    registry = CollectorRegistry()
    registry.register(RetoldCollector(read))
    server, thread = start_http_server(port, host, registry=registry)
    return MetricsEndpoint(host, int(server.server_port), server, thread)
