"""The worker's Prometheus endpoint: with ``metrics.port`` set, the main process of
``celery -A workers worker`` serves ``/metrics`` on that port (``metrics.host``).

It starts on ``celeryd_after_setup``, which Celery sends once in the main process after
logging is set up and before any pool child exists, so a prefork worker serves one
endpoint, not one per child, and its log says where. Each scrape
builds a runtime for the config, reads :func:`retold.observability.collect_metrics` and the
queue depths, and closes it again: the server holds no store connection that a forked
child could inherit. A missing ``prometheus-client`` or a port already taken costs one
warning and no endpoint; the worker itself runs on.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from celery.signals import celeryd_after_setup

from retold.config import Config
from workers.app import config_from_environment

if TYPE_CHECKING:
    from retold.observability import Metrics, MetricsEndpoint

__all__ = ["read_metrics", "start_endpoint"]

log = logging.getLogger(__name__)


def read_metrics(config: Config) -> dict[str, Metrics]:
    """One reading of each tenant of the store ``config`` names, each through that tenant's
    own runtime, and of the broker's queues (read once, with the first tenant's)."""
    from retold.broker.depth import queue_depths
    from retold.observability import collect_metrics
    from retold.runtime import build_runtime
    from retold.store.location import list_tenants

    lease = timedelta(seconds=config.ingestion.extraction_lease_seconds)
    readings: dict[str, Metrics] = {}
    for tenant in list_tenants(config.store.target):
        queue = queue_depths(config) if not readings else None
        with build_runtime(config, allow_embedding_mismatch=True, tenant=tenant) as rt:  # reads only
            readings[tenant] = collect_metrics(rt.store, rt.clock.now(), lease, queue=queue)
    return readings


def start_endpoint(config: Config) -> MetricsEndpoint | None:
    """Serve ``config``'s metrics when ``metrics.port`` is set; None when it is not, or
    when the endpoint cannot start (logged)."""
    port = config.metrics.port
    if port is None:
        return None
    try:
        from retold.observability import serve_metrics
    except ModuleNotFoundError:
        log.warning("metrics.port is %s but prometheus-client is not installed "
                    "(pip install 'retold[monitor]'); no metrics endpoint", port)
        return None
    try:
        endpoint = serve_metrics(lambda: read_metrics(config), config.metrics.host, port)
    except OSError as exc:
        log.warning("metrics endpoint not started on %s:%s: %s (any one worker's endpoint"
                    " reports the whole store)", config.metrics.host, port, exc)
        return None
    log.info("metrics at http://%s:%s/metrics", endpoint.host, endpoint.port)
    return endpoint


def _on_worker_ready_to_start(**_: Any) -> None:
    start_endpoint(config_from_environment())


celeryd_after_setup.connect(_on_worker_ready_to_start, weak=False)
