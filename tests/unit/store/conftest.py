"""Stores as earlier releases wrote them, for the tests of migrating them forward."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, closing, contextmanager
from pathlib import Path

import pytest

from retold.clock import SystemClock, to_iso
from retold.store.migrations import MIGRATIONS
from retold.store.postgres import schema
from retold.store.postgres.connection import PgConnection
from retold.store.postgres.url import conninfo

# The first PostgreSQL release's schema, at schema.PG_BASE.
_FIRST_SCHEMA = Path(__file__).with_name("pg_schema_v9.sql")

PgRelease = Callable[[str, int], AbstractContextManager[None]]


def _first_release(url: str) -> None:
    """The empty store the first PostgreSQL release created at ``url``."""
    with closing(PgConnection(conninfo(url), connect_timeout=5)) as conn:
        conn.execute("BEGIN")
        schema._text_search(conn)
        conn.execute(_FIRST_SCHEMA.read_text("utf-8"))  # a parameterless script is one query
        conn.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY,"
                     " name TEXT NOT NULL, applied_at TEXT NOT NULL)")
        now = to_iso(SystemClock().now())
        conn.executemany("INSERT INTO schema_migrations(version, name, applied_at) VALUES (?, ?, ?)",
                         [(m.version, m.name, now) for m in MIGRATIONS if m.version <= schema.PG_BASE])
        conn.execute("COMMIT")


@pytest.fixture
def pg_release(monkeypatch: pytest.MonkeyPatch) -> PgRelease:
    """``with pg_release(url, version):`` writes an empty PostgreSQL store at ``url`` as the
    release whose schema was ``version`` (``schema.PG_BASE`` or later) did, and runs the
    block as that release: a store opened inside migrates no further."""

    @contextmanager
    def release(url: str, version: int) -> Iterator[None]:
        assert version >= schema.PG_BASE
        with monkeypatch.context() as then:
            then.setattr(schema, "PG_MIGRATIONS", tuple(m for m in schema.PG_MIGRATIONS if m[0] <= version))
            then.setattr(schema, "_PG_LATEST", version)
            _first_release(url)
            with closing(PgConnection(conninfo(url), connect_timeout=5)) as conn:
                assert schema.migrate(conn, url).version == version
            yield

    return release
