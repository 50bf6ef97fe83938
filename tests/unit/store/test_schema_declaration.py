"""The schema declared once (retold.store.tables, and the PostgreSQL layer over it in
retold.store.postgres.tables) is the schema the migrations make, on each backend: for a
new store and for one migrated from an old version, table by table, column by column
(type as the database spells it, nullability, server default), keys, checks and indexes
(their keys, in order, and whether they are unique or partial). Objects only one dialect
has are compared with the lists its declaration keeps, so none appears unannounced."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.types import NullType

from retold.store import tables
from retold.store.location import open_store
from retold.store.migrations import LATEST, MIGRATIONS, migrate
from retold.store.postgres import schema as pg_schema
from retold.store.postgres.url import conninfo
from retold.store.tables import METADATA, SQLITE_ONLY_TABLES, SQLITE_TRIGGERS
from tests import postgres
from tests.sql import rows

# SQLAlchemy cannot read SQLite's expression index and says so; this module reads every
# index from its definition instead.
pytestmark = pytest.mark.filterwarnings("ignore:Skipped unsupported reflection of expression-based index")


@dataclass(frozen=True)
class Column:
    type: str  # as the dialect spells it in DDL
    nullable: bool
    default: str | None


@dataclass(frozen=True)
class Shape:
    """One table as both sides are compared: read from the database or from the declaration."""

    columns: dict[str, Column]
    primary_key: tuple[str, ...]
    unique: frozenset[tuple[str, ...]]
    foreign_keys: frozenset[tuple[tuple[str, ...], str, tuple[str, ...], str | None]]
    checks: tuple[str, ...]  # names on PostgreSQL; SQLite's are unnamed, so one "?" each
    indexes: dict[str, tuple[bool, tuple[str, ...], str | None]]  # unique, keys, predicate


def _spelled(type_: Any, dialect: Dialect) -> str:
    """A type as the dialect writes it; an undeclared SQLite type is the empty string."""
    if isinstance(type_, NullType):
        return ""
    return str(type_.compile(dialect=dialect))


def _default(value: str | None) -> str | None:
    # PostgreSQL shows a text literal with its cast: 'none'::text
    return None if value is None else re.sub(r"::[a-z ]+$", "", value)


def _key(element: str, table: str) -> str:
    """An index key as both sides compare it: lower case, no quotes, spaces or table name."""
    return re.sub(r'[\s"]', "", element.lower()).replace(f"{table}.", "")


def _split(keys: str) -> list[str]:
    """A key list cut at its top-level commas (an expression may hold commas of its own)."""
    parts, depth, start = [], 0, 0
    for at, char in enumerate(keys):
        depth += char == "("
        depth -= char == ")"
        if char == "," and depth == 0:
            parts.append(keys[start:at])
            start = at + 1
    return [*parts, keys[start:]]


_INDEX = re.compile(r"CREATE (UNIQUE )?INDEX \S+ ON \S+\s*(?:USING \w+ )?\((?P<keys>.*?)\)\s*"
                    r"(?:WHERE (?P<where>.*))?$", re.S | re.I)


def _index(sql: str, table: str, dialect: str) -> tuple[bool, tuple[str, ...], str | None]:
    """An index read from its definition: SQLite keeps the statement as written, PostgreSQL
    gives it back from pg_get_indexdef. Only SQLite's predicate reads as it was declared;
    on PostgreSQL the comparison says whether there is one."""
    found = _INDEX.match(sql.strip())
    assert found is not None, sql
    # The key list ends at the parenthesis that closes it, before any WHERE.
    head, where = found.group("keys"), found.group("where")
    if where is not None:
        where = _key(where, table) if dialect == "sqlite" else "partial"
    return bool(found.group(1)), tuple(_key(k, table) for k in _split(head)), where


def _declared_index(index: sa.Index, dialect: Dialect) -> tuple[bool, tuple[str, ...], str | None]:
    table = index.table
    assert table is not None
    keys = tuple(_key(str(e.compile(dialect=dialect)), table.name) for e in index.expressions)
    where = index.dialect_options[dialect.name]["where"]
    if where is not None:
        where = _key(str(where), table.name) if dialect.name == "sqlite" else "partial"
    return bool(index.unique), keys, where


def declared(metadata: sa.MetaData, dialect: Dialect) -> dict[str, Shape]:
    """Each table of ``metadata`` as ``dialect`` would hold it."""
    shapes = {}
    for table in metadata.tables.values():
        default = {c.name: (str(c.server_default.arg.text) if isinstance(c.server_default.arg, sa.TextClause)
                            else f"'{c.server_default.arg}'")
                   for c in table.columns if isinstance(c.server_default, sa.DefaultClause)}
        checks = [c for c in table.constraints if isinstance(c, sa.CheckConstraint)]
        shapes[table.name] = Shape(
            columns={c.name: Column(_spelled(c.type, dialect), c.nullable and not c.primary_key,
                                    default.get(c.name)) for c in table.columns},
            primary_key=tuple(table.primary_key.columns.keys()),
            unique=frozenset(tuple(c.columns.keys()) for c in table.constraints
                             if type(c) is sa.UniqueConstraint),
            foreign_keys=frozenset(
                (tuple(fk.column_keys), fk.referred_table.name, tuple(e.column.name for e in fk.elements),
                 fk.ondelete.upper() if fk.ondelete else None)
                for fk in table.foreign_key_constraints),
            checks=tuple(sorted(str(c.name) for c in checks)) if dialect.name == "postgresql"
            else ("?",) * len(checks),
            indexes={str(ix.name): _declared_index(ix, dialect) for ix in table.indexes},
        )
    return shapes


def _index_sql(conn: sa.Connection, table: str) -> dict[str, str]:
    """Each index of ``table`` that no key constraint made, by name, as its definition."""
    if conn.dialect.name == "sqlite":
        found = conn.exec_driver_sql("SELECT name, sql FROM sqlite_master WHERE type = 'index'"
                                     " AND tbl_name = ? AND sql IS NOT NULL", (table,))
    else:
        found = conn.exec_driver_sql(
            "SELECT c.relname, pg_get_indexdef(i.indexrelid) FROM pg_index i JOIN pg_class c"
            " ON c.oid = i.indexrelid WHERE i.indrelid = %s::regclass"
            " AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid)", (table,))
    return {str(name): str(sql) for name, sql in found}


def _foreign_keys(conn: sa.Connection, inspector: sa.Inspector, table: str) -> frozenset[
        tuple[tuple[str, ...], str, tuple[str, ...], str | None]]:
    """The table's foreign keys with their ON DELETE action. SQLAlchemy reads SQLite's
    action from the table's statement and misses it on a column-level key, so SQLite's
    own list of keys is read there."""
    if conn.dialect.name == "postgresql":
        return frozenset((tuple(fk["constrained_columns"]), fk["referred_table"],
                          tuple(fk["referred_columns"]), fk["options"].get("ondelete"))
                         for fk in inspector.get_foreign_keys(table))
    keys: dict[int, list[tuple[str, str, str, str]]] = {}
    for key, _, parent, column, referred, _, on_delete, _ in conn.exec_driver_sql(
            f"PRAGMA foreign_key_list({table})"):
        keys.setdefault(key, []).append((parent, column, referred, on_delete))
    return frozenset((tuple(c for _, c, _, _ in parts), parts[0][0], tuple(r for _, _, r, _ in parts),
                      None if parts[0][3] == "NO ACTION" else parts[0][3]) for parts in keys.values())


def live(conn: sa.Connection, names: set[str]) -> dict[str, Shape]:
    """Each table of ``names`` as the database holds it."""
    inspector = sa.inspect(conn)
    dialect = conn.dialect
    shapes = {}
    for name in sorted(names):
        key = tuple(inspector.get_pk_constraint(name)["constrained_columns"])
        checks = inspector.get_check_constraints(name)
        shapes[name] = Shape(
            columns={c["name"]: Column(_spelled(c["type"], dialect), c["nullable"] and c["name"] not in key,
                                       _default(c["default"]))
                     for c in inspector.get_columns(name)},
            primary_key=key,
            unique=frozenset(tuple(u["column_names"]) for u in inspector.get_unique_constraints(name)),
            foreign_keys=_foreign_keys(conn, inspector, name),
            checks=tuple(sorted(str(c["name"]) for c in checks)) if dialect.name == "postgresql"
            else ("?",) * len(checks),
            indexes={index: _index(sql, name, dialect.name) for index, sql in _index_sql(conn, name).items()},
        )
    return shapes


def differences(expected: dict[str, Shape], found: dict[str, Shape]) -> list[str]:
    """What differs between two schemas, one line each, readable in a failure."""
    lines = [f"table {t}: {'declared, not in the store' if t in expected else 'in the store, not declared'}"
             for t in sorted(expected.keys() ^ found.keys())]
    for table in sorted(expected.keys() & found.keys()):
        want, got = expected[table], found[table]
        for column in sorted(want.columns.keys() | got.columns.keys()):
            if want.columns.get(column) != got.columns.get(column):
                lines.append(f"{table}.{column}: declared {want.columns.get(column)},"
                             f" store {got.columns.get(column)}")
        for index in sorted(want.indexes.keys() | got.indexes.keys()):
            if want.indexes.get(index) != got.indexes.get(index):
                lines.append(f"{table} index {index}: declared {want.indexes.get(index)},"
                             f" store {got.indexes.get(index)}")
        for part in ("primary_key", "unique", "foreign_keys", "checks"):
            if getattr(want, part) != getattr(got, part):
                lines.append(f"{table} {part}: declared {getattr(want, part)}, store {getattr(got, part)}")
    return lines


def _without(metadata: sa.MetaData, table: str, column: str) -> sa.MetaData:
    """A copy of ``metadata`` whose ``table`` lacks ``column``: a declaration a migration
    has got ahead of."""
    copy = sa.MetaData()
    for source in metadata.sorted_tables:
        source.to_metadata(copy)
    target = copy.tables[table]
    target._columns.remove(target.c[column])  # no public way to drop a column from a Table
    return copy


# SQLite -------------------------------------------------------------------------------


@contextmanager
def _sqlite(path: Path) -> Iterator[sa.Connection]:
    engine = sa.create_engine(f"sqlite:///{path}")
    try:
        with engine.connect() as conn:
            yield conn
    finally:
        engine.dispose()


def _sqlite_store(path: Path, upto: int = LATEST) -> None:
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        migrate(conn, str(path), MIGRATIONS[:upto])


def _sqlite_tables(conn: sa.Connection) -> set[str]:
    return set(sa.inspect(conn).get_table_names())


def test_a_new_sqlite_store_is_the_declared_schema(tmp_path: Path) -> None:
    open_store(tmp_path / "new.sqlite").close()
    with _sqlite(tmp_path / "new.sqlite") as conn:
        names = _sqlite_tables(conn)
        assert names - set(METADATA.tables) == set(SQLITE_ONLY_TABLES)
        found = live(conn, names & set(METADATA.tables))
        expected = declared(METADATA, conn.dialect)
        triggers = {name for (name,) in conn.exec_driver_sql(
            "SELECT name FROM sqlite_master WHERE type = 'trigger'")}
    assert differences(expected, found) == []
    assert triggers == set(SQLITE_TRIGGERS)


def test_a_column_a_migration_adds_and_the_declaration_lacks_is_a_difference(tmp_path: Path) -> None:
    _sqlite_store(tmp_path / "new.sqlite")
    with _sqlite(tmp_path / "new.sqlite") as conn:
        found = live(conn, set(METADATA.tables))
        behind = declared(_without(METADATA, "records", "sensitivity"), conn.dialect)
    assert differences(behind, found) == [
        "records.sensitivity: declared None, store Column(type='TEXT', nullable=False, default=\"'none'\")"]


def test_a_declared_column_no_migration_adds_is_a_difference(tmp_path: Path) -> None:
    _sqlite_store(tmp_path / "v17.sqlite", upto=17)  # before sensitivity and redacted content
    with _sqlite(tmp_path / "v17.sqlite") as conn:
        found = live(conn, set(METADATA.tables) & _sqlite_tables(conn))
        expected = declared(METADATA, conn.dialect)
    lines = differences(expected, found)
    assert ("records.sensitivity: declared Column(type='TEXT', nullable=False, default=\"'none'\"),"
            " store None") in lines
    assert "table audit_items: declared, not in the store" in lines


def test_a_sqlite_store_migrated_from_version_1_with_rows_is_the_new_schema(tmp_path: Path) -> None:
    """The migrations that rebuild a table (store_meta, the lexical index, search_log) or
    fill one from rows take their other branch on a store that holds some."""
    old = tmp_path / "old.sqlite"
    _sqlite_store(old, upto=1)
    with closing(sqlite3.connect(old, isolation_level=None)) as conn:
        conn.execute("INSERT INTO sessions(id, agent_id, user_id, started_at)"
                     " VALUES ('s1', 'a', 'u', '2026')")
        conn.execute("INSERT INTO records(id, seq, type, content, subject, scope_kind, scope_id, source_kind,"
                     " source_ref, creator_agent_id, created_at, event_at, confidence, status) VALUES"
                     " ('r1', 1, 'semantic', 'x', 'e/a', 'project', 'p', 'user_statement', 'session:s1', 'a',"
                     " '2026', '2026', 0.9, 'confirmed')")
        conn.execute("INSERT INTO search_log(id, at, agent_id, user_id, trigger, request, rewrite_status,"
                     " readable_scopes, dense, lexical, entity, fused, freshness, gated_out, deduped_out,"
                     " budget_out, returned, explanations, config_flags, warm, timings_ms) VALUES"
                     " ('q1', '2026', 'a', 'u', 'auto', '{}', 'off', '[]', '[]', '[]', '[]', '[]', '[]',"
                     " '[]', '[]', '[]', '[\"r1\"]', '[]', '{}', 0, '{}')")
    open_store(old).close()
    open_store(tmp_path / "new.sqlite").close()
    with _sqlite(old) as conn:
        migrated = live(conn, set(METADATA.tables))
        expected = declared(METADATA, conn.dialect)
        assert _sqlite_tables(conn) - set(METADATA.tables) == set(SQLITE_ONLY_TABLES)
    with _sqlite(tmp_path / "new.sqlite") as conn:
        new = live(conn, set(METADATA.tables))
    assert differences(expected, migrated) == []
    assert migrated == new
    assert rows(old, "SELECT trigger FROM search_log") == [("host",)]


# PostgreSQL ---------------------------------------------------------------------------

@contextmanager
def _pg(url: str) -> Iterator[sa.Connection]:
    import psycopg

    engine = sa.create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(conninfo(url)),
                              poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            yield conn
    finally:
        engine.dispose()


def _pg_tables(conn: sa.Connection) -> set[str]:
    return set(sa.inspect(conn).get_table_names())


def _pg_named(conn: sa.Connection, sql: str) -> set[str]:
    return {str(name) for (name,) in conn.exec_driver_sql(sql)}


def _pg_store(url: str) -> None:
    """Migrate the schema at ``url`` as a store opening it does, and nothing more."""
    from retold.store.postgres.connection import PgConnection

    conn = PgConnection(conninfo(url), connect_timeout=5)
    try:
        pg_schema.migrate(conn, url)
    finally:
        conn.close()


@pytest.fixture
def url(pg_database: str) -> str:
    pytest.importorskip("psycopg")
    return postgres.fresh_schema(pg_database)


def _pg_compare(url: str) -> dict[str, Shape]:
    """The store's tables, after checking that its tables, functions, triggers, text-search
    configurations and policies are those the declaration names."""
    from retold.store.postgres import tables as pg

    with _pg(url) as conn:
        names = _pg_tables(conn)
        assert names == set(pg.PG_METADATA.tables)
        # an extension created in this schema (btree_gin, unaccent) brings objects of its own
        here = ("n.nspname = current_schema() AND NOT EXISTS (SELECT 1 FROM pg_depend e"
                " WHERE e.objid = {}.oid AND e.deptype = 'e')")
        assert _pg_named(conn, "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
                               f" WHERE {here.format('p')}") == set(pg.PG_FUNCTIONS)
        assert _pg_named(conn, "SELECT t.tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid"
                               f" JOIN pg_namespace n ON n.oid = c.relnamespace WHERE {here.format('t')}"
                               " AND NOT t.tgisinternal") == set(pg.PG_TRIGGERS)
        assert _pg_named(conn, "SELECT cfgname FROM pg_ts_config c JOIN pg_namespace n"
                               f" ON n.oid = c.cfgnamespace WHERE {here.format('c')} UNION SELECT dictname"
                               " FROM pg_ts_dict d JOIN pg_namespace n ON n.oid = d.dictnamespace"
                               f" WHERE {here.format('d')}") == set(pg.PG_TEXT_SEARCH)
        assert _pg_named(conn, "SELECT tablename FROM pg_policies WHERE schemaname = current_schema()"
                               " AND policyname = 'retold_tenant'") == (
            names - set(pg.UNTENANTED) - {pg_schema.TENANT_REGISTRY})
        return live(conn, names)


def _pg_declared() -> dict[str, Shape]:
    from sqlalchemy.dialects import postgresql as pg_dialect

    from retold.store.postgres.tables import PG_METADATA

    return declared(PG_METADATA, pg_dialect.dialect())


def test_a_new_postgresql_store_is_the_declared_schema(url: str) -> None:
    open_store(url).close()
    assert differences(_pg_declared(), _pg_compare(url)) == []


def test_a_postgresql_store_migrated_from_its_first_schema_is_the_new_one(
        url: str, pg_database: str, pg_release: Any) -> None:
    """A store created at PG_BASE, as the first PostgreSQL release wrote it, then taken
    through every later migration (the tenant key rebuilds every key and index), is the
    store a new one is made as from the declaration."""
    with pg_release(url, pg_schema.PG_BASE):
        pass
    assert rows(url, "SELECT max(version) FROM schema_migrations") == [(pg_schema.PG_BASE,)]
    open_store(url).close()
    migrated = _pg_compare(url)
    assert differences(_pg_declared(), migrated) == []
    new = postgres.fresh_schema(pg_database)
    open_store(new).close()
    assert _pg_compare(new) == migrated


def test_a_postgresql_column_the_declaration_lacks_is_a_difference(url: str) -> None:
    from sqlalchemy.dialects import postgresql as pg_dialect

    from retold.store.postgres.tables import PG_METADATA

    _pg_store(url)
    behind = declared(_without(PG_METADATA, "sessions", "extraction_enqueued_at"), pg_dialect.dialect())
    assert differences(behind, _pg_compare(url)) == [
        "sessions.extraction_enqueued_at: declared None, store"
        " Column(type='TEXT COLLATE \"C\"', nullable=True, default=None)"]


def test_every_declared_table_has_a_name_the_store_modules_know() -> None:
    """The module's public names are its tables, so a query can be built from one by name."""
    assert {t for t in tables.__all__ if t.islower()} == set(METADATA.tables)
