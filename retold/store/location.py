"""Where a store lives: a SQLite file path or a PostgreSQL URL, and how each opens and
is checked.

``store.url`` (or ``--store``/``RETOLD_STORE`` given a URL) selects PostgreSQL; anything
else is a SQLite path. :func:`open_store` is the one factory the runtime, the CLI and the
workers call, and :func:`check_store_at` the one integrity check ``retold check``, the
worker's start-up and beat's periodic check run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from retold.config import is_database_url
from retold.errors import StoreError
from retold.store.integrity import IntegrityReport, check_file
from retold.store.postgres.integrity import check_database
from retold.store.postgres.url import redact
from retold.store.store import Store

__all__ = ["check_store_at", "is_database_url", "open_store"]


def open_store(target: str | Path, **options: Any) -> Store:
    """The store at ``target``: a :class:`~retold.store.postgres.store.PgStore` for a PostgreSQL
    URL (psycopg is imported only then), else the SQLite :class:`Store` at that path.
    ``options`` are the Store's keyword arguments."""
    if is_database_url(target):
        try:
            import psycopg  # noqa: F401  (the optional `postgres` extra)
        except ImportError as exc:
            raise StoreError(f"store {redact(str(target))} is a PostgreSQL database, which needs "
                             "psycopg: install the `postgres` extra (pip install 'retold[postgres]')"
                             ) from exc
        from retold.store.postgres.store import PgStore

        return PgStore(str(target), **options)
    return Store(target, **options)


def check_store_at(target: str, *, quick: bool = False, busy_timeout: float = 30.0) -> IntegrityReport:
    """The integrity check of the store at ``target``: the agreement check with amcheck
    on a PostgreSQL URL, SQLite's page checks, the FTS check and the agreement check on a
    file (which also sets or clears its damage mark)."""
    if is_database_url(target):
        return check_database(target, quick=quick, busy_timeout=busy_timeout)
    return check_file(target, quick=quick, busy_timeout=busy_timeout)
