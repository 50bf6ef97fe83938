"""The worker side's Celery application: :func:`retold.broker.celery_app.celery_app` for the
config every Retold process loads, plus the beat schedule and Flower's auth.

Worker, beat and Flower processes are started by the Celery command line, which offers
no other way to pass settings, so they find their config the way an agent's
``build_runtime()`` and the ``retold`` command do
(:func:`retold.config.env.load_config_from_environment`): ``RETOLD_CONFIG`` (the config
file; else ``config.yaml`` in the working folder, if any), then ``RETOLD_STORE``
(``store.path``, or ``store.url`` for a PostgreSQL URL) and ``RETOLD_BROKER_URL``
(``queue.broker_url``). Only this entry point (plus :mod:`workers.process_runtime` for the
replay switch) reads the environment, for these and:

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

from beat_schedule import schedule_for
from retold.broker.celery_app import EXTRACTION_TASKS, VISIBILITY_TIMEOUT_SECONDS, broker_url, celery_app
from retold.config import Config
from retold.config.env import load_config_from_environment

__all__ = [
    "EXTRACTION_TASKS", "FAST_SCHEDULE", "VISIBILITY_TIMEOUT_SECONDS", "app", "broker_url",
    "config_from_environment", "create_app", "purge_consumed_messages",
]

EMBEDDED_POLLING_INTERVAL_SECONDS = 0.1

FAST_SCHEDULE: dict[str, dict[str, Any]] = {
    "recover": {"task": "retold.recover", "seconds": 1},
    "expire": {"task": "retold.expire", "seconds": 1},
}
"""The ``RETOLD_BEAT_FAST=1`` test schedule."""


def config_from_environment() -> Config:
    """The config this process runs with, found as every Retold process finds it."""
    return load_config_from_environment(os.environ)


def _use_short_embedded_polling() -> None:
    # kombu's SQLAlchemy transport polls its table every second by default, which adds up
    # to a second to every hop of an embedded-broker pipeline. Its transport options go
    # straight to sqlalchemy.create_engine (so a ``polling_interval`` there makes
    # create_engine raise); the only place to set it is the transport class itself.
    from kombu.transport import sqlalchemy as sqla_transport

    sqla_transport.Transport.polling_interval = EMBEDDED_POLLING_INTERVAL_SECONDS


def create_app(config: Config | None = None, *, schedule: dict[str, dict[str, Any]] | None = None) -> Celery:
    """The worker app for ``config``: the shared broker settings plus the beat schedule.

    ``schedule`` replaces :data:`beat_schedule.SCHEDULE` (tests pass their own); entries
    that do not apply to the broker are dropped by :func:`beat_schedule.schedule_for`.
    """
    config = config or config_from_environment()
    celery = celery_app(config, "worker")
    settings: dict[str, Any] = {
        "beat_schedule": {
            name: {"task": entry["task"], "schedule": float(entry["seconds"])}
            for name, entry in schedule_for(config, schedule).items()
        },
    }
    if str(celery.conf.broker_url).startswith("sqla+"):
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
