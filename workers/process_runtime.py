"""One Retold runtime per tenant a worker process serves.

A prefork child builds the configured tenant's runtime in ``worker_process_init`` so
models load once per process, not per task; the solo and threads pools never send that
signal, so :func:`current_runtime` also builds it on first use. A task of another tenant
builds that tenant's runtime on first use, sharing the first runtime's embedder, so the
process holds each tenant's store and vectors only once it serves that tenant
(docs/decisions.md, "A tenant is a namespace"), and closes the least recently served ones
once their vectors pass ``index.max_ram_mb`` (:mod:`retold.tenant_runtimes`). A task holds
its tenant's runtime through :func:`tenant_runtime` while it runs. Every runtime is closed on
``worker_process_shutdown`` (prefork children) and ``worker_shutdown`` (the main process of
the solo and threads pools).

Offline/demo mode: ``RETOLD_REPLAY_EXTRACTION=/path/recording.json`` (or a folder of
``<session id>.json`` recordings) makes the worker extract every session with
``ReplayExtractor(path)`` (the recorded EXTRACTION_SCHEMA output) and review with
``TableReviewer()``, which accepts every candidate. It exists for
demos and integration tests without a hosted model; this module is the only place that
reads it. Without it the runtime uses the configured hosted extractor and reviewer, and a
missing reviewer makes extraction report ``not_configured``: review is never skipped.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from celery.signals import worker_process_init, worker_process_shutdown, worker_shutdown

from retold.broker import CeleryScheduler
from retold.index.embedder import Embedder
from retold.index.encoding import TenantQueries
from retold.ingest.extractor import ReplayExtractor
from retold.ingest.reviewer import TableReviewer
from retold.quiet import silence_progress_output
from retold.runtime import Runtime, build_runtime
from retold.store.location import list_tenants, tenant_exists
from retold.tenant_runtimes import TenantRuntimes
from workers.app import app, config_from_environment

__all__ = ["close_runtime", "current_runtime", "open_runtime", "served_tenants", "tenant_runtime"]

log = logging.getLogger(__name__)

_lock = threading.Lock()
_pool: TenantRuntimes | None = None  # built with the first runtime, from its config


def open_runtime(tenant: str | None = None, *, embedder: Embedder | None = None) -> Runtime:
    """Build this process's runtime for ``tenant`` (default: the config's) from the
    environment's config. Its scheduler publishes through this worker's own app (the idle
    sweep schedules what it ends), whatever ``queue.scheduler`` says: a worker exists to
    take sessions off the broker. Model libraries' progress bars are switched off first:
    Celery logs stderr as warnings."""
    silence_progress_output()
    config = config_from_environment()
    if tenant is not None:
        config = config.replace({"tenancy": {"tenant": tenant}})
    scheduler = CeleryScheduler(config, app=app)
    replay = os.environ.get("RETOLD_REPLAY_EXTRACTION")
    if replay:
        log.warning("replay mode: extracting with %s and accepting every candidate", replay)
        return build_runtime(config, scheduler=scheduler, extractor=ReplayExtractor(replay),
                             reviewer=TableReviewer(), embedder=embedder)
    return build_runtime(config, scheduler=scheduler, embedder=embedder)


def _open_tenant(tenant: str | None, home: Runtime | None) -> Runtime:
    """The runtime of ``tenant`` (None: the configured one); another tenant's keeps its own
    query cache over the home runtime's model."""
    if home is None:
        return open_runtime()
    shared = home.embedder.shared if isinstance(home.embedder, TenantQueries) else home.embedder
    return open_runtime(tenant, embedder=TenantQueries(shared, home.config.embedding.query_cache_entries))


def _runtimes(tenant: str | None) -> TenantRuntimes:
    """This process's runtimes, built with the home runtime on first use. A tenant dropped
    since its runtime was built is closed here, so the caller's open refuses it rather than
    writing into a file that no longer belongs to the store."""
    global _pool
    with _lock:
        if _pool is None:
            home = open_runtime()
            _pool = TenantRuntimes(lambda name, ref: home if name is None else _open_tenant(name, ref),
                                   home.config.index.max_ram_mb)
        pool = _pool
    home = pool.home()
    # On SQLite a dropped tenant's file may still be open here, and writes into it would
    # land in a deleted file; PostgreSQL refuses them itself (the tenant is unregistered).
    if (tenant is not None and tenant != home.tenant and home.store.backend == "sqlite"
            and tenant in pool.held() and not tenant_exists(home.config.store.target, tenant)):
        pool.forget(tenant)
    return pool


def current_runtime(tenant: str | None = None) -> Runtime:
    """This process's runtime for ``tenant`` (default: the configured tenant), built on
    first use, for a caller that runs one task at a time; threads use
    :func:`tenant_runtime`."""
    return _runtimes(tenant).get(tenant)


@contextmanager
def tenant_runtime(tenant: str | None = None) -> Iterator[Runtime]:
    """This process's runtime for ``tenant``, held while the block runs: the memory
    budget never closes a runtime a task is using."""
    with _runtimes(tenant).lease(tenant) as runtime:
        yield runtime


def served_tenants() -> list[str]:
    """Every tenant of the store this worker serves: what a periodic sweep goes through."""
    return list_tenants(current_runtime().config.store.target)


def close_runtime() -> None:
    """Close every runtime this process built; safe to call twice."""
    global _pool
    with _lock:
        pool, _pool = _pool, None
    if pool is not None:
        pool.close()


def _on_process_init(**_: Any) -> None:
    global _pool
    with _lock:
        _pool = None  # never share a runtime (an open SQLite file) across a fork
    current_runtime()


def _on_process_shutdown(**_: Any) -> None:
    close_runtime()


def _on_worker_shutdown(**_: Any) -> None:
    close_runtime()


def _connect(signal: Any, handler: Callable[..., None]) -> None:
    signal.connect(handler, weak=False)  # Celery's signals are untyped


_connect(worker_process_init, _on_process_init)
_connect(worker_process_shutdown, _on_process_shutdown)
_connect(worker_shutdown, _on_worker_shutdown)
