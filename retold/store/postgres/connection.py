"""A psycopg 3 connection that speaks the part of ``sqlite3`` the store uses.

Most of the store's SQL is still written once, with ``?`` placeholders, and runs on both
backends. This adapter turns such a statement into PostgreSQL's form once per distinct text
(the translation is cached): ``?`` becomes ``%s``, a numbered ``?N`` is bound by position
(the parameter repeated where the text repeats it), a literal ``%`` is escaped, and the
``temp.`` schema of SQLite's TEMP tables is PostgreSQL's ``pg_temp.``. The translation
changes placeholders and that one schema name, never what a statement does: a statement
whose meaning differs between the dialects is built for each from the declared tables
(the upserts, :mod:`retold.store.upserts`, whose conflict target is PostgreSQL's own key
with ``tenant``) and arrives already compiled, through :meth:`PgConnection.execute_compiled`,
which runs it as written; or it is a named part of the PostgreSQL store. See
docs/decisions.md, "PostgreSQL as a shared store" and "One declaration of the schema".
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any

__all__ = ["PgConnection", "translate_sql"]

# A string literal, a quoted identifier, or one of the tokens the translation rewrites.
_TOKENS = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|\?(\d+)?|%|\btemp\.")
_TEMP = re.compile(r"\btemp\.")
_NAMED = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|(?<!:):[A-Za-z_]\w*|%|\btemp\.")


def _fixed(token: str) -> str | None:
    """A quoted literal, ``%`` or ``temp.`` as PostgreSQL needs it; None for a parameter."""
    if token[0] in "'\"":
        return token.replace("%", "%%")
    if token == "%":
        return "%%"
    if token == "temp.":
        return "pg_temp."
    return None


@lru_cache(maxsize=2048)
def translate_sql(sql: str) -> tuple[str, tuple[int, ...] | None]:
    """``sql`` with PostgreSQL placeholders, and for numbered ``?N`` the 0-based parameter
    index each ``%s`` takes (None when the parameters pass through in order)."""
    order: list[int] = []
    numbered = False

    def swap(found: re.Match[str]) -> str:
        nonlocal numbered
        fixed = _fixed(found.group(0))
        if fixed is not None:
            return fixed
        if found.group(1):
            numbered = True
            order.append(int(found.group(1)) - 1)
        else:
            order.append(len(order))
        return "%s"

    return _TOKENS.sub(swap, sql), tuple(order) if numbered else None


@lru_cache(maxsize=256)
def translate_named(sql: str) -> str:
    """``sql`` with sqlite3's ``:name`` parameters as psycopg's ``%(name)s``."""

    def swap(found: re.Match[str]) -> str:
        token = found.group(0)
        fixed = _fixed(token)
        return fixed if fixed is not None else f"%({token[1:]})s"

    return _NAMED.sub(swap, sql)


def _clean(value: Any) -> Any:
    """PostgreSQL text cannot hold NUL, which SQLite stores; it becomes U+FFFD, so a query
    with one still runs (and matches nothing) and a write keeps the rest of its text."""
    if isinstance(value, str) and "\x00" in value:
        return value.replace("\x00", "\ufffd")
    if isinstance(value, list) and value and isinstance(value[0], str):  # not a list of seqs
        return [_clean(item) for item in value]
    return value


def _bind(order: tuple[int, ...] | None, params: Sequence[Any]) -> Sequence[Any]:
    if order is None:
        return [_clean(value) for value in params]
    return [_clean(params[i]) for i in order]


class PgConnection:
    """One psycopg connection in autocommit mode: the store issues BEGIN, SAVEPOINT and
    COMMIT itself, exactly as it does on SQLite."""

    def __init__(self, conninfo: str, *, connect_timeout: float) -> None:
        import psycopg  # the optional `postgres` extra; only a PostgreSQL store needs it

        self._raw = psycopg.connect(conninfo, autocommit=True,
                                    connect_timeout=max(1, int(connect_timeout)))
        self._idle = psycopg.pq.TransactionStatus.IDLE

    def execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None = None) -> Any:
        """Run one statement; the cursor offers fetchone, fetchall, rowcount, description
        and iteration, like sqlite3's."""
        if not params:
            # Without parameters psycopg sends the text as written (a script may hold
            # several statements), so only the TEMP schema is renamed.
            return self._raw.execute(_TEMP.sub("pg_temp.", sql))
        if isinstance(params, Mapping):  # sqlite3's :name parameters
            return self._raw.execute(translate_named(sql), {k: _clean(v) for k, v in params.items()})
        text, order = translate_sql(sql)
        return self._raw.execute(text, _bind(order, params))

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> Any:
        text, order = translate_sql(sql)
        return self._many(text, order, rows)

    def execute_compiled(self, sql: str, params: Sequence[Any]) -> Any:
        """Run one statement already in PostgreSQL's form, with ``%s`` placeholders bound in
        order (SQLAlchemy compiled it from the declared tables): no translation."""
        return self._raw.execute(sql, _bind(None, params))

    def executemany_compiled(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """:meth:`execute_compiled` once per row of ``rows``."""
        self._many(sql, None, rows).close()

    def _many(self, text: str, order: tuple[int, ...] | None, rows: Iterable[Sequence[Any]]) -> Any:
        """``text`` (PostgreSQL's form) once per row, on one cursor, which is returned."""
        cursor = self._raw.cursor()
        batch = [_bind(order, row) for row in rows]
        if batch:
            cursor.executemany(text, batch)
        return cursor

    def copy_rows(self, table: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> int:
        """Load ``rows`` into ``table`` with one ``COPY ... FROM STDIN``; the number loaded.

        One statement however many rows: a bulk load pays no round trip per row, and the
        table's foreign keys are checked at the statement's end, so a row may name one that
        comes later in the same load (a record superseding a newer one, an entity merged
        into a later one). ``table`` and ``columns`` come from the schema, never from input.

        PostgreSQL refuses COPY into a table under row-level security, so the rows are
        copied into a TEMP table of the same columns and moved with one INSERT, which the
        table's policy checks and whose foreign keys are again checked at its end."""
        names = ", ".join(columns)
        loaded = 0
        with self._raw.cursor() as cursor:
            cursor.execute("DROP TABLE IF EXISTS pg_temp.retold_copy")
            cursor.execute(f"CREATE TEMP TABLE retold_copy AS SELECT {names} FROM {table} WITH NO DATA")
            with cursor.copy(f"COPY pg_temp.retold_copy ({names}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row([_clean(value) for value in row])
                    loaded += 1
            cursor.execute(f"INSERT INTO {table} ({names}) SELECT {names} FROM pg_temp.retold_copy")
            cursor.execute("DROP TABLE pg_temp.retold_copy")
        return loaded

    @property
    def in_transaction(self) -> bool:
        return self._raw.info.transaction_status != self._idle

    def close(self) -> None:
        self._raw.close()
