"""Retold's Celery workers: ``celery -A workers worker``.

Each task module is a thin wrapper over a plain function in ``retold/`` (STYLE.md
habit 4). The app is built from the runtime's config loader; see :mod:`workers.app`.
"""

from workers.app import app, create_app

__all__ = ["app", "create_app"]
