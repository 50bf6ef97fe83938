"""Where a store lives: a SQLite file path or a PostgreSQL URL, and how each opens.

``store.url`` (or ``--store``/``RETOLD_STORE`` given a URL) selects PostgreSQL; anything
else is a SQLite path. :func:`open_store` is the one factory the runtime, the CLI and the
workers call. A URL may carry a password, so messages show it through :func:`redact`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode

from retold.config import is_database_url
from retold.errors import StoreError
from retold.store.store import Store

__all__ = ["conninfo", "is_database_url", "open_store", "redact"]

_PASSWORD = re.compile(r"^([a-z+]+://[^:/@]*):[^@]*@")


def conninfo(url: str, *, read_only: bool = False) -> str:
    """The libpq URL for ``url``: SQLAlchemy's ``+psycopg`` driver suffix is dropped, and a
    read-only store asks the server to refuse every write in its transactions."""
    plain = "postgresql://" + url.split("://", 1)[1]
    if not read_only:
        return plain
    base, _, query = plain.partition("?")
    pairs = parse_qsl(query, keep_blank_values=True)
    options = " ".join([v for k, v in pairs if k == "options"] + ["-c default_transaction_read_only=on"])
    pairs = [(k, v) for k, v in pairs if k != "options"] + [("options", options)]
    return f"{base}?{urlencode(pairs, quote_via=quote)}"


def redact(url: str) -> str:
    """``url`` without its password, for messages and logs."""
    return _PASSWORD.sub(r"\1:***@", url)


def open_store(target: str | Path, **options: Any) -> Store:
    """The store at ``target``: a :class:`~retold.store.postgres.PgStore` for a PostgreSQL
    URL (psycopg is imported only then), else the SQLite :class:`Store` at that path.
    ``options`` are the Store's keyword arguments."""
    if is_database_url(target):
        try:
            import psycopg  # noqa: F401  (the optional `postgres` extra)
        except ImportError as exc:
            raise StoreError(f"store {redact(str(target))} is a PostgreSQL database, which needs "
                             "psycopg: install the `postgres` extra (pip install 'retold[postgres]')"
                             ) from exc
        from retold.store.postgres import PgStore

        return PgStore(str(target), **options)
    return Store(target, **options)
