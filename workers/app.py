"""The Celery application, built from ``config.queue`` (DESIGN.md decision 3).

Worker, beat and Flower processes are started by the Celery command line, which offers
no other way to pass settings, so this entry point (and only it; the library never reads
the environment) takes ``RETOLD_CONFIG`` (the config file), ``RETOLD_STORE`` (overrides
``store.path``) and ``RETOLD_BROKER_URL`` (overrides ``queue.broker_url``).
"""

from __future__ import annotations

import os
from pathlib import Path

from celery import Celery

from beat_schedule import SCHEDULE
from retold.config import Config, load_config

__all__ = ["app", "broker_url", "config_from_environment", "create_app"]


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


def create_app(config: Config | None = None) -> Celery:
    """A Celery app for ``config``: JSON only, late acks, one message prefetched."""
    config = config or config_from_environment()
    celery = Celery("retold", broker=broker_url(config), backend=config.queue.result_backend)
    celery.conf.update(
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_ignore_result=True,
        task_default_queue=config.queue.maintenance_queue,
        beat_schedule={
            name: {"task": entry["task"], "schedule": entry["seconds"]}
            for name, entry in SCHEDULE.items()
        },
    )
    return celery


app = create_app()
