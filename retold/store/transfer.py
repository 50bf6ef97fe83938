"""Moving a SQLite store into PostgreSQL: every row, in one transaction, checked by count.

The tables to copy are read from the two schemas themselves, not from a list kept here:
every table of the SQLite store except its migration log and its full-text index must
exist on PostgreSQL with the same columns, or the move is refused before anything is
written, so a table added by a later migration is copied without a change to this file.
Rows keep their ids, ``seq`` numbers and ``index_version`` stamps, and ``store_meta``
(``records_version``, the embedding family) comes across as it is, so the first write on
PostgreSQL continues where the SQLite store stopped. The lexical index is not copied but
rebuilt: each record's row is made as ``PgStore``'s FTS writer makes it (with the tags),
and PostgreSQL computes the weighted document from it.

The source is read in one snapshot through a read-only connection, so the SQLite file is
never changed; the target is written in one transaction that holds the store's write
lock, and any failure rolls all of it back. See docs/decisions.md, "Moving a SQLite store
into PostgreSQL".
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from retold.config import is_database_url
from retold.errors import StoreError
from retold.store.fts import FTS_COLUMNS, all_fts_rows
from retold.store.location import open_store
from retold.store.migrations import LATEST, check_is_retold, check_not_newer
from retold.store.opening import connect
from retold.store.postgres.schema import TENANT_REGISTRY, parents_first
from retold.store.postgres.store import PgStore
from retold.store.postgres.url import redact
from retold.store.store import Store

__all__ = [
    "DERIVED", "NOT_COPIED", "REBUILT", "TableCount", "TransferReport", "advance_sequences", "check_source",
    "copied_tables", "move_store", "transfer",
]

# Filled on each backend by a trigger as search-log rows arrive: counted, not copied.
DERIVED = "search_returned"
# Each backend keeps its own record of the migrations that built its schema.
NOT_COPIED = ("schema_migrations", DERIVED)
# The lexical index: an FTS5 table on SQLite, a tsvector table on PostgreSQL. Its rows are
# written again from the copied records rather than copied.
REBUILT = "records_fts"
_BATCH = 1000  # source rows fetched at a time, so a large table never sits in memory whole
_TEXT_TYPES = ("text", "character varying")


@dataclass(frozen=True)
class TableCount:
    """One table's rows on each side after the copy. For the rebuilt lexical index the
    source side is the records that must have a row (every record not deleted)."""

    table: str
    source: int
    target: int
    rebuilt: bool = False

    @property
    def ok(self) -> bool:
        return self.source == self.target


@dataclass(frozen=True)
class TransferReport:
    """What a move copied: rows per table, the counter it carried and how long it took."""

    source: str
    target: str  # the URL without its password
    tables: tuple[TableCount, ...]
    records_version: int
    sequences_advanced: int  # PostgreSQL sequences moved past the copied rows
    seconds: float

    @property
    def rows(self) -> int:
        return sum(count.target for count in self.tables if not count.rebuilt)


@dataclass(frozen=True)
class _Table:
    name: str
    columns: tuple[str, ...]
    text_columns: frozenset[str]  # PostgreSQL text columns a SQLite value may reach as a number
    blob_columns: frozenset[str]


def check_source(path: str | Path, busy_timeout_seconds: float = 30.0) -> None:
    """Refuse a source that is not a Retold SQLite store at the latest schema, reading
    only. An older store is refused rather than migrated, so moving never changes the
    file; ``retold migrate`` brings it up to date first."""
    where = str(path)
    if is_database_url(where):
        raise StoreError(f"{redact(where)} is a PostgreSQL URL; the store to move from is a SQLite file")
    if not Path(where).is_file():
        raise StoreError(f"no SQLite store at {where}")
    conn = connect(where, busy_timeout_seconds, "it is only read while it is moved")
    try:
        version = check_not_newer(conn, where)
        check_is_retold(conn, where, version)
    finally:
        conn.close()
    if version < LATEST:
        raise StoreError(f"store {where} has schema version {version}, not the latest ({LATEST}); run "
                         f"`retold migrate --store {where}` first")


def move_store(
    source_path: str | Path, target_url: str, *, busy_timeout_seconds: float = 30.0,
) -> TransferReport:
    """Copy the SQLite store at ``source_path`` into the PostgreSQL database at
    ``target_url`` (its schema is created when the database is empty). Refused, with
    nothing written, unless the source is at the latest schema and the target holds no
    rows; see :func:`transfer`."""
    if not is_database_url(target_url):
        raise StoreError(f"{target_url} is not a PostgreSQL URL (postgresql://user@host:5432/db)")
    check_source(source_path, busy_timeout_seconds)
    source = Store(source_path, busy_timeout_seconds=busy_timeout_seconds, read_only=True,
                   migrate_schema=False)
    try:
        target = open_store(target_url, busy_timeout_seconds=busy_timeout_seconds)
        try:
            return transfer(source, target)
        finally:
            target.close()
    finally:
        source.close()


def transfer(source: Store, target: Store) -> TransferReport:
    """Copy every row of ``source`` (SQLite) into ``target`` (PostgreSQL) in one
    transaction, rebuild the lexical index, move any sequence past the copied rows and
    compare the row counts of every table before committing. Raises StoreError, having
    written nothing, when the schemas differ, the target holds rows, or a count differs."""
    if source.backend != "sqlite" or target.backend != "postgres":
        raise StoreError("a store moves from SQLite into PostgreSQL")
    started = time.monotonic()
    try:
        counts, tables, sequences, version = _copy_all(source, target)
    except (*source._driver_errors, *target._driver_errors) as exc:
        # A row PostgreSQL refuses, or a statement that fails: the transaction rolled back.
        raise StoreError(f"the copy into {target.path} failed ({' '.join(str(exc).split())}); "
                         "nothing was written") from exc
    _analyze(target, [table.name for table in tables] + [REBUILT])
    return TransferReport(source.path, target.path, tuple(counts), version, sequences,
                          time.monotonic() - started)


def _copy_all(source: Store, target: Store) -> tuple[list[TableCount], list[_Table], int, int]:
    with source.snapshot() as src, target.atomic() as dst:
        tables = copied_tables(src, dst)
        _refuse_rows(dst, tables)
        # store_meta last, emptied just before: the new schema's records_version 0 goes, and
        # so does the access counter that loading grants and memberships moved (a trigger).
        tables = [t for t in tables if t.name != "store_meta"] + [t for t in tables if t.name == "store_meta"]
        counts = []
        for table in tables:
            if table.name == "store_meta":
                dst.execute("DELETE FROM store_meta")
            counts.append(TableCount(table.name, _load(dst, table.name, table.columns, _rows(src, table)),
                                     _count(dst, table.name)))
        # The rows PgStore's writer would write for each record, loaded in one statement.
        indexed = _load(dst, REBUILT, (*FTS_COLUMNS, "tags"), all_fts_rows(src, with_tags=True))
        counts.append(TableCount(REBUILT, indexed, _count(dst, REBUILT), rebuilt=True))
        counts.append(TableCount(DERIVED, _count(src, DERIVED), _count(dst, DERIVED), rebuilt=True))
        sequences = advance_sequences(dst)
        wrong = [c for c in counts if not c.ok]
        if wrong:
            raise StoreError("row counts differ after the copy (" + "; ".join(
                f"{c.table}: {c.source} in SQLite, {c.target} in PostgreSQL" for c in wrong)
                + "); nothing was written")
        return counts, tables, sequences, target.read_version(dst)


def copied_tables(src: Any, dst: Any) -> list[_Table]:
    """The tables a move copies, parents before the tables whose foreign keys name them:
    every SQLite table but the migration log and the full-text index (with its shadow
    tables). Each must exist on PostgreSQL with the same columns; a difference refuses
    the move, naming it."""
    names = _sqlite_tables(src)
    on_target = _pg_tables(dst)
    only_source, only_target = sorted(set(names) - set(on_target)), sorted(set(on_target) - set(names))
    if only_source or only_target:
        raise StoreError("the SQLite store and the PostgreSQL schema have different tables (only in "
                         f"SQLite: {', '.join(only_source) or 'none'}; only in PostgreSQL: "
                         f"{', '.join(only_target) or 'none'}); is one of them from another Retold?")
    tables = []
    for name in parents_first(dst, names):
        columns = [str(row[1]) for row in src.execute(f"PRAGMA table_info({name})").fetchall()]
        types = dict(dst.execute(
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_schema ="
            " current_schema() AND table_name = ? AND is_generated = 'NEVER' AND column_name <> 'tenant'",
            (name,)).fetchall())
        if set(columns) != set(types):
            raise StoreError(f"table {name} has other columns in the SQLite store"
                             f" ({', '.join(sorted(columns))}) than in the PostgreSQL schema"
                             f" ({', '.join(sorted(types))})")
        tables.append(_Table(name, tuple(columns),
                             frozenset(c for c in columns if types[c] in _TEXT_TYPES),
                             frozenset(c for c in columns if types[c] == "bytea")))
    return tables


def _sqlite_tables(src: Any) -> list[str]:
    rows = src.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'"
                       " AND name NOT LIKE 'sqlite_%' ORDER BY name").fetchall()
    virtual = [name for name, sql in rows if str(sql).upper().startswith("CREATE VIRTUAL TABLE")]
    return [name for name, _ in rows
            if name not in NOT_COPIED and name not in virtual
            and not any(name.startswith(f"{v}_") for v in virtual)]  # FTS5's shadow tables


def _pg_tables(dst: Any) -> list[str]:
    rows = dst.execute("SELECT table_name FROM information_schema.tables WHERE table_schema ="
                       " current_schema() AND table_type = 'BASE TABLE' ORDER BY table_name").fetchall()
    return [str(name) for (name,) in rows
            if name not in NOT_COPIED and name not in (REBUILT, TENANT_REGISTRY)]


def _refuse_rows(dst: Any, tables: Sequence[_Table]) -> None:
    """Refuse a target that holds anything beyond a new store's own ``records_version`` 0:
    a move never merges two stores, and it never overwrites one."""
    held = [table.name for table in tables if table.name != "store_meta"
            and dst.execute(f"SELECT 1 FROM {table.name} LIMIT 1").fetchone() is not None]
    if dst.execute(f"SELECT 1 FROM {REBUILT} LIMIT 1").fetchone() is not None:
        held.append(REBUILT)
    # The access counter only counts changes to grants and memberships, whose own rows speak.
    meta = dst.execute("SELECT key, value FROM store_meta WHERE key != 'access_version'").fetchall()
    if [tuple(row) for row in meta] not in ([], [("records_version", "0")]):
        held.append("store_meta")
    if held:
        raise StoreError(f"the PostgreSQL store already holds rows ({', '.join(sorted(held))}); a store "
                         "moves only into an empty one, so nothing was written")


def _rows(src: Any, table: _Table) -> Iterator[list[Any]]:
    """The table's rows as SQLite stores them (a rowid table scans in insertion order),
    with the few values whose PostgreSQL type is stricter converted: a number in a text
    column (``store_meta`` keeps counters and names in one untyped column) and text in a
    bytea column."""
    text = [i for i, c in enumerate(table.columns) if c in table.text_columns]
    blob = [i for i, c in enumerate(table.columns) if c in table.blob_columns]
    cursor = src.execute(f"SELECT {', '.join(table.columns)} FROM {table.name}")
    while batch := cursor.fetchmany(_BATCH):
        for values in batch:
            row = list(values)
            for i in text:
                if row[i] is not None and not isinstance(row[i], str):
                    row[i] = str(row[i])
            for i in blob:
                if isinstance(row[i], str):
                    row[i] = row[i].encode("utf-8")
            yield row


def _load(dst: Any, table: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> int:
    """Load ``rows`` into one table with a single COPY; how many there were."""
    return int(dst.copy_rows(table, columns, rows))


def _count(dst: Any, table: str) -> int:
    return int(dst.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


def advance_sequences(dst: Any) -> int:
    """Move every sequence behind a serial or identity column past the copied rows, so a
    new row never collides with a copied one; how many there were. The schema has none
    today (``records.seq`` is the largest plus one, under the write lock, and
    ``records_version`` was copied), but a later one must not depend on remembering this."""
    columns = dst.execute(
        "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema ="
        " current_schema() AND (is_identity = 'YES' OR column_default LIKE 'nextval(%')").fetchall()
    for table, column in columns:
        dst.execute(f"SELECT setval(pg_get_serial_sequence(?, ?), coalesce(max({column}), 0) + 1, false)"
                    f" FROM {table}", (table, column))
    return len(columns)


def _analyze(target: Store, tables: Sequence[str]) -> None:
    """Give the planner statistics for the loaded tables now, rather than at autovacuum's
    next pass (until then the index-version and lexical queries would be planned as scans)."""
    if isinstance(target, PgStore):  # ANALYZE is the tables' owner's, not the agent role's
        target.analyze(tables)

