"""The extraction scheduler a runtime gets from ``queue.scheduler``.

``celery`` (the default) publishes each ended session to the configured broker, where a
worker built from the same config consumes it; ``in_process`` extracts it in the calling
process (docs/decisions.md, "One configuration for agents and workers"). The message
carries only the session id and, outside the default tenant, the tenant's name, never
memory content: the store is the truth.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from retold.config import Config
from retold.ingest.session import ExtractionScheduler, InProcessScheduler
from retold.tenant import DEFAULT_TENANT

if TYPE_CHECKING:
    from celery import Celery

__all__ = ["CeleryScheduler", "scheduler_from_config", "tenant_kwargs"]


def tenant_kwargs(tenant: str) -> dict[str, str]:
    """The keyword arguments that name ``tenant`` in a task message: none for the default
    tenant, so a message reads as it did before tenants existed and a worker of either age
    takes it."""
    return {} if tenant == DEFAULT_TENANT else {"tenant": tenant}


class CeleryScheduler:
    """Publish ``retold.extract_session(session_id)`` on the extraction queue of
    ``config``'s broker, giving up within two seconds when the broker refuses, drops or
    hangs (the caller logs; the ``recover`` task enqueues the session later).

    ``app`` is the Celery app to publish with (a worker passes its own); without it a
    publisher app is built from ``config`` on the first publish, so a runtime that never
    ends a session never imports Celery.
    """

    deferred = True  # a worker takes it off the queue later

    def __init__(self, config: Config, *, app: Celery | None = None) -> None:
        self.config = config
        self.queue = config.queue.extraction_queue
        self._app = app
        self._owns_app = app is None
        self._lock = threading.Lock()

    @property
    def broker_url(self) -> str:
        """Where sessions are published: ``queue.broker_url`` or the embedded file broker."""
        from retold.broker.celery_app import broker_url

        return broker_url(self.config)

    @property
    def app(self) -> Celery:
        """The Celery app publishes go through, built on first use."""
        with self._lock:
            if self._app is None:
                from retold.broker.celery_app import celery_app

                self._app = celery_app(self.config, "publisher")
            return self._app

    def schedule(self, session_id: str) -> None:
        """Publish one session id, once; raises the broker's error when it cannot."""
        self.app.send_task("retold.extract_session", args=[session_id], kwargs=tenant_kwargs(self.tenant),
                           queue=self.queue, retry=False)

    @property
    def tenant(self) -> str:
        """The tenant whose sessions this scheduler publishes."""
        return self.config.tenancy.tenant

    def close(self) -> None:
        """Release the broker connections of an app this scheduler built; safe to call twice."""
        with self._lock:
            app, owned = self._app, self._owns_app
            if owned:
                self._app = None
        if owned and app is not None:
            app.close()


def scheduler_from_config(config: Config, extract: Callable[[str], object]) -> ExtractionScheduler:
    """The scheduler ``queue.scheduler`` names; ``extract`` runs one session's extraction
    in this process (used by ``in_process``)."""
    if config.queue.scheduler == "in_process":
        return InProcessScheduler(extract)
    return CeleryScheduler(config)
