"""Upserts: the store's insert-or-update statements, built from the declared tables.

An :class:`Upsert` names a table, the columns each row binds, in order, and the columns a
stored row takes from the new one when the key is taken (none: the stored row stays). Its
conflict target is the table's primary key as each dialect declares it: SQLite's from
:data:`retold.store.tables.METADATA`, PostgreSQL's from
:data:`retold.store.postgres.tables.PG_METADATA`, where the key leads with ``tenant``.
The statement never names the tenant column: it fills itself from the connection's tenant.
An upsert that keeps the stored row names the key too, the only unique key each such
table has, so it ignores exactly the rows whose key is already taken.

SQLAlchemy Core builds the statement with each dialect's own insert and compiles it once
per dialect, on first use, with positional placeholders (``?`` for sqlite3, ``%s`` for
psycopg). Parameters go to the driver as the caller gives them (reordered only where the
caller names the columns in another order than the table declares them, since the
compiled text follows the table's). PostgreSQL's text reaches
:class:`~retold.store.postgres.connection.PgConnection` through its ``*_compiled``
methods, which run it as written. See docs/decisions.md, "One declaration of the schema".
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from sqlalchemy import Dialect, MetaData, Select, bindparam
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.dialects.postgresql.base import PGDialect
from sqlalchemy.dialects.sqlite.base import SQLiteDialect

from retold.store.postgres.connection import PgConnection
from retold.store.postgres.tables import PG_METADATA
from retold.store.tables import METADATA

__all__ = ["Source", "Upsert"]

# The rows an upsert copies (INSERT ... SELECT), as a SELECT over one dialect's tables.
Source = Callable[[MetaData], Select[Any]]


@dataclass(frozen=True)
class Upsert:
    """``INSERT INTO table (columns) ... ON CONFLICT (primary key) DO UPDATE SET update``,
    or ``DO NOTHING`` where ``update`` is empty.

    Without a ``source`` a row binds ``columns`` in order; with one the statement copies
    the rows ``source`` selects into ``columns``, and the parameters are the SELECT's, in
    the order it binds them (both dialects bind in the same order).
    """

    table: str
    columns: tuple[str, ...]
    update: tuple[str, ...] = ()
    source: Source | None = None

    def execute(self, conn: sqlite3.Connection | PgConnection, params: Sequence[Any]) -> int:
        """Run the upsert once; how many rows it inserted or updated (0 or 1 for one row)."""
        if isinstance(conn, PgConnection):
            sql, order = self._postgresql
            return int(conn.execute_compiled(sql, _ordered(order, params)).rowcount)
        sql, order = self._sqlite
        return conn.execute(sql, _ordered(order, params)).rowcount

    def executemany(self, conn: sqlite3.Connection | PgConnection, rows: Iterable[Sequence[Any]]) -> None:
        """Run the upsert once per row of ``rows``."""
        if isinstance(conn, PgConnection):
            sql, order = self._postgresql
            conn.executemany_compiled(sql, (_ordered(order, row) for row in rows))
        else:
            sql, order = self._sqlite
            conn.executemany(sql, (_ordered(order, row) for row in rows))

    @cached_property
    def _sqlite(self) -> tuple[str, tuple[int, ...] | None]:
        return self._compile(self._build(METADATA, sqlite.insert), SQLiteDialect(paramstyle="qmark"))

    @cached_property
    def _postgresql(self) -> tuple[str, tuple[int, ...] | None]:
        dialect = PGDialect(paramstyle="format")  # type: ignore[no-untyped-call]
        return self._compile(self._build(PG_METADATA, postgresql.insert), dialect)

    def _compile(self, statement: Any, dialect: Dialect) -> tuple[str, tuple[int, ...] | None]:
        """The statement's text, and where its VALUES list takes each of ``columns`` (SQLAlchemy
        writes a table's columns in the order the table declares them); None when in order."""
        compiled = statement.compile(dialect=dialect)
        if self.source is not None:
            return str(compiled), None
        order = tuple(self.columns.index(name) for name in compiled.positiontup)
        return str(compiled), None if order == tuple(range(len(self.columns))) else order

    def _build(self, metadata: MetaData, insert: Callable[[Any], Any]) -> Any:
        table = metadata.tables[self.table]
        if self.source is None:
            statement = insert(table).values({name: bindparam(name) for name in self.columns})
        else:
            statement = insert(table).from_select(list(self.columns), self.source(metadata))
        # inline: the statement asks for no generated key back (PostgreSQL's tenant has a
        # server default, which SQLAlchemy would otherwise return)
        statement = statement.inline()
        key = list(table.primary_key.columns)
        if not self.update:
            return statement.on_conflict_do_nothing(index_elements=key)
        return statement.on_conflict_do_update(
            index_elements=key, set_={name: statement.excluded[name] for name in self.update})


def _ordered(order: tuple[int, ...] | None, params: Sequence[Any]) -> Sequence[Any]:
    return params if order is None else [params[i] for i in order]
