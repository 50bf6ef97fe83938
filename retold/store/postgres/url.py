"""A PostgreSQL store's URL: the libpq form psycopg connects with, and the form shown in
messages. A URL may carry a password, so every message shows it through :func:`redact`.
Nothing here imports psycopg."""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, quote, urlencode

__all__ = ["conninfo", "redact"]

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
