"""The Celery app of one config: the same broker, queues and routes for the agent that
publishes and the worker that consumes, so the two always meet.

With no ``queue.broker_url`` the broker is an embedded file (``queue.sqlite`` next to the
store) that needs no server. The two roles differ only in how long they wait on the
broker: a publisher (an agent ending a session) gives up within two seconds, because
SQLite, not the broker, records which sessions still need extraction and the ``recover``
task enqueues them later; a worker waits longer, since a slow answer there delays no user
(docs/decisions.md, "Publishing never blocks an agent").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from celery import Celery
from kombu.entity import Queue

from retold.config import Config

__all__ = [
    "EXTRACTION_TASKS", "PUBLISH_SOCKET_TIMEOUT_SECONDS", "Role",
    "VISIBILITY_TIMEOUT_SECONDS", "WORKER_SOCKET_TIMEOUT_SECONDS", "broker_url", "celery_app",
]

Role = Literal["publisher", "worker"]

EXTRACTION_TASKS = ("retold.extract_session", "retold.review_session")
"""Tasks routed to ``queue.extraction_queue``; every other task goes to the maintenance queue."""

VISIBILITY_TIMEOUT_SECONDS = 2 * 3600
"""Redis redelivers an unacknowledged (late-ack) message only after this long, so it must
exceed the longest task: an extraction is bounded by its claim timeout (30 min default)."""

PUBLISH_SOCKET_TIMEOUT_SECONDS = 0.75
"""A publisher's wait for one connect or one reply. A publish is not retried (redis-py
already replaces a pooled connection the broker closed, and a retry would only double
the wait on a hung broker), so a hung broker costs one such wait, leaving room inside the
two seconds an agent may spend for a process's first publish to import Celery."""

WORKER_SOCKET_TIMEOUT_SECONDS = 10.0
"""A worker's wait for one Redis reply: long enough for a busy broker, short enough that
a hung one fails a publish (``recover``) instead of holding the worker forever."""

EMBEDDED_PUBLISH_BUSY_SECONDS = PUBLISH_SOCKET_TIMEOUT_SECONDS
"""How long a publisher waits for the embedded broker's file lock."""


def broker_url(config: Config) -> str:
    """``queue.broker_url``, or the embedded file broker next to the store when unset."""
    if config.queue.broker_url:
        return config.queue.broker_url
    queue_file = Path(config.store.path).resolve().with_name("queue.sqlite")
    return f"sqla+sqlite:///{queue_file}"


def _queue(name: str) -> Queue:
    make: Any = Queue  # kombu's constructor is untyped
    queue: Queue = make(name)
    return queue


def _is_redis(url: str) -> bool:
    return url.startswith(("redis://", "rediss://", "redis+socket://"))


def _transport_options(url: str, role: Role) -> dict[str, Any]:
    publisher = role == "publisher"
    # kombu otherwise retries a refused connection for a while before a publish even starts.
    options: dict[str, Any] = {"max_retries": 0} if publisher else {}
    if _is_redis(url):
        timeout = PUBLISH_SOCKET_TIMEOUT_SECONDS if publisher else WORKER_SOCKET_TIMEOUT_SECONDS
        options.update({
            "visibility_timeout": VISIBILITY_TIMEOUT_SECONDS,
            # kombu sets no socket timeout by default: a broker that stops answering
            # without closing the connection would hold every caller for as long as it hangs.
            "socket_timeout": timeout,
            "socket_connect_timeout": PUBLISH_SOCKET_TIMEOUT_SECONDS if publisher else 1.0,
        })
    elif url.startswith("sqla+") and publisher:
        # The SQLAlchemy transport hands its other options to create_engine; sqlite3 would
        # otherwise wait five seconds for a lock a worker holds.
        options["connect_args"] = {"timeout": EMBEDDED_PUBLISH_BUSY_SECONDS}
    return options


def celery_app(config: Config, role: Role = "worker") -> Celery:
    """A Celery app for ``config``: JSON only, late acks, one message prefetched, tasks
    routed to the configured queues. A ``publisher`` app waits briefly on the broker and
    does not become Celery's current app, so a worker process that builds one keeps its own.
    """
    url = broker_url(config)
    queue = config.queue
    publisher = role == "publisher"
    celery = Celery("retold", broker=url, backend=queue.result_backend, set_as_current=not publisher)
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
        "broker_connection_timeout": PUBLISH_SOCKET_TIMEOUT_SECONDS if publisher else 1.0,
        "broker_connection_retry_on_startup": True,
    }
    if options := _transport_options(url, role):
        settings["broker_transport_options"] = options
    celery.conf.update(settings)
    return celery
