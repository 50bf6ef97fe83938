"""A PostgreSQL database for one test run, and a fresh schema in it for each test.

The run creates ``retold_test_<pid>`` on the server at ``RETOLD_TEST_PG`` (default the
machine's PostgreSQL at 127.0.0.1:5432, user postgres) and drops it at the end. Each test
that asks for a PostgreSQL store gets its own schema, named in the URL's ``search_path``,
so tests never see each other's rows.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from contextlib import contextmanager

SERVER = os.environ.get("RETOLD_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
_schemas = itertools.count(1)


def _admin(url: str) -> object:
    import psycopg

    return psycopg.connect(url, autocommit=True, connect_timeout=2)


def available() -> str | None:
    """None when a PostgreSQL server answers and psycopg is installed, else why not."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed (the `postgres` extra)"
    try:
        with psycopg.connect(SERVER, connect_timeout=2):
            return None
    except psycopg.OperationalError:
        return f"no PostgreSQL answering at {SERVER.rsplit('@', 1)[-1]}"


@contextmanager
def test_database(suffix: str = "", *, template: str = "template1") -> Iterator[str]:
    """A database of this run's own (``suffix`` names a second one, for a test that needs
    a whole database, such as one without or with an extension); its URL, dropped
    afterwards. ``template0`` gives a database with no extension the server's template1
    may carry."""
    name = f"retold_test_{os.getpid()}{suffix}"
    base = SERVER.rsplit("/", 1)[0]
    with _admin(SERVER) as conn:  # type: ignore[attr-defined]
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {template}")
    try:
        yield f"{base}/{name}"
    finally:
        with _admin(SERVER) as conn:  # type: ignore[attr-defined]
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def fresh_schema(database_url: str) -> str:
    """A new, empty schema in the run's database; a store URL that uses it."""
    schema = f"t{next(_schemas)}"
    with _admin(database_url) as conn:  # type: ignore[attr-defined]
        conn.execute(f"CREATE SCHEMA {schema}")
    return f"{database_url}?options=-csearch_path%3D{schema}"
