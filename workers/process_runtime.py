"""One Retold runtime per worker process.

A prefork child builds it in ``worker_process_init`` so models load once per process, not
per task; the solo and threads pools never send that signal, so :func:`current_runtime`
also builds it on first use. It is closed on ``worker_process_shutdown`` (prefork
children) and ``worker_shutdown`` (the main process of the solo and threads pools).

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
from collections.abc import Callable
from typing import Any

from celery.signals import worker_process_init, worker_process_shutdown, worker_shutdown

from retold.broker import CeleryScheduler
from retold.ingest.extractor import ReplayExtractor
from retold.ingest.reviewer import TableReviewer
from retold.quiet import silence_progress_output
from retold.runtime import Runtime, build_runtime
from workers.app import app, config_from_environment

__all__ = ["close_runtime", "current_runtime", "open_runtime"]

log = logging.getLogger(__name__)

_lock = threading.Lock()
_runtime: Runtime | None = None


def open_runtime() -> Runtime:
    """Build this process's runtime from the environment's config. Its scheduler publishes
    through this worker's own app (the idle sweep schedules what it ends), whatever
    ``queue.scheduler`` says: a worker exists to take sessions off the broker. Model
    libraries' progress bars are switched off first: Celery logs stderr as warnings."""
    silence_progress_output()
    config = config_from_environment()
    scheduler = CeleryScheduler(config, app=app)
    replay = os.environ.get("RETOLD_REPLAY_EXTRACTION")
    if replay:
        log.warning("replay mode: extracting with %s and accepting every candidate", replay)
        return build_runtime(config, scheduler=scheduler, extractor=ReplayExtractor(replay),
                             reviewer=TableReviewer())
    return build_runtime(config, scheduler=scheduler)


def current_runtime() -> Runtime:
    """This process's runtime, built on first use."""
    global _runtime
    with _lock:
        if _runtime is None:
            _runtime = open_runtime()
        return _runtime


def close_runtime() -> None:
    """Close this process's runtime, if built; safe to call twice."""
    global _runtime
    with _lock:
        runtime, _runtime = _runtime, None
    if runtime is not None:
        runtime.close()


def _on_process_init(**_: Any) -> None:
    global _runtime
    with _lock:
        _runtime = None  # never share a runtime (an open SQLite file) across a fork
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
