"""CeleryScheduler: the agent process's :class:`ExtractionScheduler` over the broker.

The message carries only the session id, never memory content: SQLite is the truth.
Publishing retries the connection once, briefly, so an unreachable broker raises within
about two seconds; ``SessionHooks`` logs one warning and returns, and the ``recover``
beat task enqueues the session later.
"""

from __future__ import annotations

from typing import Any

from celery import Celery

__all__ = ["RETRY_POLICY", "CeleryScheduler"]

RETRY_POLICY: dict[str, Any] = {
    "max_retries": 1, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.5,
}


class CeleryScheduler:
    """Enqueue ``retold.extract_session(session_id)`` on the extraction queue of ``app``."""

    def __init__(self, app: Celery, queue: str | None = None) -> None:
        self.app = app
        self.queue = queue

    def schedule(self, session_id: str) -> None:
        self.app.send_task(
            "retold.extract_session", args=[session_id], queue=self.queue,
            retry=True, retry_policy=RETRY_POLICY,
        )
