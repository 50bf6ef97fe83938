"""Retold's Celery workers: ``celery -A workers worker -Q extraction,maintenance``.

Each task (:mod:`workers.tasks`) is a thin wrapper over a plain function in ``retold/``,
so the CLI and tests run the same code without Celery. The app is built from the runtime's
config loader (:mod:`workers.app`); each worker process builds one runtime (:mod:`workers.runtime`);
agent processes enqueue extraction with :class:`workers.scheduler.CeleryScheduler`.
"""

from workers import tasks  # registers the tasks on ``app``
from workers.app import app, create_app
from workers.scheduler import CeleryScheduler

__all__ = ["CeleryScheduler", "app", "create_app", "tasks"]
