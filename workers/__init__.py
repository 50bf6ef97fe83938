"""Retold's Celery workers: ``celery -A workers worker -Q extraction,maintenance``.

Each task (:mod:`workers.tasks`) is a thin wrapper over a plain function in ``retold/``,
so the CLI and tests run the same code without Celery. The app is built from the config every
Retold process loads (:mod:`workers.app`); each worker process builds one runtime
(:mod:`workers.process_runtime`). Agent processes need nothing from here: their runtime
publishes ended sessions with :class:`retold.broker.CeleryScheduler` to the broker the same config names.
"""

from retold.broker import CeleryScheduler

# The metrics endpoint, the start-up check, the lost-ack watch and the tasks register here.
from workers import liveness, prometheus_endpoint, startup, tasks
from workers.app import app, create_app

__all__ = ["CeleryScheduler", "app", "create_app", "liveness", "prometheus_endpoint", "startup", "tasks"]
