"""The Celery application, built from ``config.queue``: one code path for the embedded file
broker (no server, the default) and Redis.

Worker, beat and Flower processes are started by the Celery command line, which offers
no other way to pass settings, so this entry point (and only it, plus
:mod:`workers.runtime` for the replay switch; the library never reads the environment)
takes:

- ``RETOLD_CONFIG`` (the config file), ``RETOLD_STORE`` (overrides ``store.path``) and
  ``RETOLD_BROKER_URL`` (overrides ``queue.broker_url``);
- ``RETOLD_FLOWER_AUTH`` (``user:password``): Flower's basic auth, set as
  ``flower_basic_auth`` and handed to Flower as ``FLOWER_BASIC_AUTH`` (the variable
  Flower itself reads) unless that is already set;
- ``RETOLD_BEAT_FAST=1``: a TEST SWITCH that runs ``recover`` and ``expire`` every
  second (and nothing else) so an integration test can watch beat work. Never set it
  in production.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

from celery import Celery
from kombu.entity import Queue

from beat_schedule import schedule_for
from retold.config import Config, load_config

__all__ = [
    "EXTRACTION_TASKS", "FAST_SCHEDULE", "VISIBILITY_TIMEOUT_SECONDS", "app", "broker_url",
    "config_from_environment", "create_app", "purge_consumed_messages",
]

EXTRACTION_TASKS = ("retold.extract_session", "retold.review_session")
"""Tasks routed to ``queue.extraction_queue``; every other task goes to the maintenance queue."""

VISIBILITY_TIMEOUT_SECONDS = 2 * 3600
"""Redis redelivers an unacknowledged (late-ack) message only after this long, so it must
exceed the longest task: an extraction is bounded by its claim timeout (30 min default)."""

EMBEDDED_POLLING_INTERVAL_SECONDS = 0.1

FAST_SCHEDULE: dict[str, dict[str, Any]] = {
    "recover": {"task": "retold.recover", "seconds": 1},
    "expire": {"task": "retold.expire", "seconds": 1},
}
"""The ``RETOLD_BEAT_FAST=1`` test schedule."""


def config_from_environment() -> Config:
    """The config a worker process runs with: the file, then the two overrides."""
    overrides: dict[str, dict[str, str]] = {}
    if store := os.environ.get("RETOLD_STORE"):
        overrides["store"] = {"path": store}
    if broker := os.environ.get("RETOLD_BROKER_URL"):
        overrides["queue"] = {"broker_url": broker}
    return load_config(os.environ.get("RETOLD_CONFIG"), overrides=overrides)


def broker_url(config: Config) -> str:
    """``queue.broker_url``, or the embedded file broker next to the store when unset."""
    if config.queue.broker_url:
        return config.queue.broker_url
    queue_file = Path(config.store.path).resolve().with_name("queue.sqlite")
    return f"sqla+sqlite:///{queue_file}"


def _use_short_embedded_polling() -> None:
    # kombu's SQLAlchemy transport polls its table every second by default, which adds up
    # to a second to every hop of an embedded-broker pipeline. Its transport options go
    # straight to sqlalchemy.create_engine (so a ``polling_interval`` there makes
    # create_engine raise); the only place to set it is the transport class itself.
    from kombu.transport import sqlalchemy as sqla_transport

    sqla_transport.Transport.polling_interval = EMBEDDED_POLLING_INTERVAL_SECONDS


def _queue(name: str) -> Queue:
    make: Any = Queue  # kombu's constructor is untyped
    queue: Queue = make(name)
    return queue


def create_app(config: Config | None = None, *, schedule: dict[str, dict[str, Any]] | None = None) -> Celery:
    """A Celery app for ``config``: JSON only, late acks, one message prefetched.

    ``schedule`` replaces :data:`beat_schedule.SCHEDULE` (tests pass their own); entries
    that do not apply to the broker are dropped by :func:`beat_schedule.schedule_for`.
    """
    config = config or config_from_environment()
    url = broker_url(config)
    queue = config.queue
    celery = Celery("retold", broker=url, backend=queue.result_backend)
    settings: dict[str, Any] = {
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "task_ignore_result": True,
        "task_queues": [_queue(queue.extraction_queue), _queue(queue.maintenance_queue)],
        "task_default_queue": queue.maintenance_queue,
        "task_routes": {name: {"queue": queue.extraction_queue} for name in EXTRACTION_TASKS},
        # An unreachable broker fails fast; the caller (SessionHooks) logs and recovery
        # re-enqueues, since SQLite, not the broker, records which sessions still need work.
        "broker_connection_timeout": 1.0,
        "broker_connection_retry_on_startup": True,
        "beat_schedule": {
            name: {"task": entry["task"], "schedule": float(entry["seconds"])}
            for name, entry in schedule_for(config, schedule).items()
        },
    }
    if url.startswith(("redis://", "rediss://", "redis+socket://")):
        settings["broker_transport_options"] = {
            "visibility_timeout": VISIBILITY_TIMEOUT_SECONDS,
            "socket_connect_timeout": 1.0,
        }
    if url.startswith("sqla+"):
        _use_short_embedded_polling()
    if auth := os.environ.get("RETOLD_FLOWER_AUTH"):
        settings["flower_basic_auth"] = [auth]
    celery.conf.update(settings)
    return celery


def purge_consumed_messages(url: str) -> int:
    """Delete consumed (invisible) rows from the embedded broker's message table, which
    kombu's SQLAlchemy transport never deletes; returns how many. A no-op (0) for any
    other broker, or before the embedded broker has created its table."""
    prefix = "sqla+sqlite:///"
    if not url.startswith(prefix):
        return 0
    path = Path(url[len(prefix):])
    if not path.exists():
        return 0
    conn = sqlite3.connect(path, timeout=30)
    try:
        with conn:
            found = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'kombu_message'").fetchone()
            if found is None:
                return 0
            return conn.execute("DELETE FROM kombu_message WHERE visible = 0").rowcount
    finally:
        conn.close()


def _schedule_from_environment() -> dict[str, dict[str, Any]] | None:
    return FAST_SCHEDULE if os.environ.get("RETOLD_BEAT_FAST") == "1" else None


if (_flower_auth := os.environ.get("RETOLD_FLOWER_AUTH")) and "FLOWER_BASIC_AUTH" not in os.environ:
    # Flower reads its options from FLOWER_* variables after this module is imported.
    os.environ["FLOWER_BASIC_AUTH"] = _flower_auth

app = create_app(schedule=_schedule_from_environment())
