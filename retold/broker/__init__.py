"""The Celery broker as agents and workers share it.

One app built from ``config.queue`` (:mod:`retold.broker.celery_app`) and the agent
side's extraction scheduler (:mod:`retold.broker.scheduler`). Celery itself is imported
only when a session is first published, so building a runtime stays cheap."""

from retold.broker.scheduler import CeleryScheduler, scheduler_from_config

__all__ = ["CeleryScheduler", "scheduler_from_config"]
