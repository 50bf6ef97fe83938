"""Where a store lives: a SQLite file path or a PostgreSQL URL, and how each opens.

``store.url`` (or ``--store``/``RETOLD_STORE`` given a URL) selects PostgreSQL; anything
else is a SQLite path. :func:`open_store` is the one factory the runtime, the CLI and the
workers call.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from retold.config import is_database_url
from retold.errors import StoreError
from retold.store.postgres.url import redact
from retold.store.store import Store

__all__ = ["is_database_url", "open_store"]


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
