"""The PostgreSQL store's tables: the shared declaration with the tenant key, and the tables
and objects only this backend has.

:data:`PG_METADATA` is :data:`retold.store.tables.METADATA` as a PostgreSQL store holds it
at the latest migration. Every table but the version log gets ``tenant``, filled from the
connection's tenant, which leads its primary key, every unique key and every index, and
which every foreign key carries (no row can point into another tenant). Two tables exist
here only: the tenant registry and ``records_fts``, the lexical index as a table with a
weighted ``tsvector`` (SQLite's is an FTS5 virtual table). A new store's tables are made
from it (``retold.store.postgres.schema``); an older store's migrations arrive at it, and
tests compare both with it. See docs/decisions.md, "One declaration of the schema".

Objects of this backend that are not tables are named in the ``PG_*`` tuples below, so a
test can tell one that appears or disappears without a declaration.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    Computed,
    DefaultClause,
    ForeignKeyConstraint,
    Index,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import TEXT, TSVECTOR
from sqlalchemy.sql import ColumnElement
from sqlalchemy.sql.visitors import ExternallyTraversible, replacement_traverse

from retold.store.tables import METADATA

__all__ = ["PG_FUNCTIONS", "PG_METADATA", "PG_TEXT_SEARCH", "PG_TRIGGERS", "TENANT", "TENANT_REGISTRY",
           "UNTENANTED"]

TENANT = "tenant"
# The tenants a database holds; read and written by the login role only (list, add, drop),
# so an agent connection cannot learn which other customers share its database.
TENANT_REGISTRY = "retold_tenants"
# Tables that hold no tenant's rows: the version log (every tenant shares the schema).
UNTENANTED = ("schema_migrations",)


def _c() -> TEXT:
    return TEXT(collation="C")


def _tenant_column() -> Column[str]:
    return Column(TENANT, _c(), nullable=False, server_default=text("retold_tenant()"))


def _tenanted(source: Table, metadata: MetaData) -> Table:
    """``source`` with the tenant key: a column of its own, first in every key and index."""
    name = source.name
    columns = [Column(c.name, c.type, nullable=c.nullable,
                      server_default=DefaultClause(c.server_default.arg)
                      if isinstance(c.server_default, DefaultClause) else None)
               for c in source.columns]
    table = Table(name, metadata, *columns, _tenant_column(),
                  PrimaryKeyConstraint(TENANT, *source.primary_key.columns.keys(), name=f"{name}_pkey"),
                  ForeignKeyConstraint([TENANT], [f"{TENANT_REGISTRY}.name"], name=f"{name}_tenant_fkey"))
    for constraint in source.constraints:
        if isinstance(constraint, UniqueConstraint):
            keys = constraint.columns.keys()
            table.append_constraint(UniqueConstraint(TENANT, *keys, name=f"{name}_{'_'.join(keys)}_key"))
        elif isinstance(constraint, CheckConstraint):
            table.append_constraint(CheckConstraint(constraint.sqltext, name=constraint.name))
        elif isinstance(constraint, ForeignKeyConstraint):
            parent = constraint.referred_table.name
            table.append_constraint(ForeignKeyConstraint(
                [TENANT, *constraint.column_keys],
                [f"{parent}.{TENANT}", *(f"{parent}.{e.column.name}" for e in constraint.elements)],
                ondelete=constraint.ondelete, name=f"{name}_{'_'.join(constraint.column_keys)}_fkey"))

    def here(element: ExternallyTraversible, **kw: Any) -> ExternallyTraversible | None:
        # an index expression over the source table's columns, rebuilt over this table's
        if isinstance(element, Column) and element.table is source:
            return table.c[element.name]
        return None

    for index in source.indexes:
        exprs: list[ColumnElement[Any]] = [
            table.c[expr] if isinstance(expr, str) else replacement_traverse(expr, {}, here)
            for expr in index.expressions]
        Index(index.name, table.c[TENANT], *exprs, unique=index.unique,
              postgresql_where=index.dialect_options["postgresql"]["where"])
    return table


def _declare() -> MetaData:
    metadata = MetaData()
    # The tenants a database holds; read and written by the login role only.
    Table(TENANT_REGISTRY, metadata,
          Column("name", _c(), primary_key=True),
          Column("added_at", _c(), nullable=False))
    for source in METADATA.sorted_tables:
        if source.name in UNTENANTED:
            source.to_metadata(metadata)
        else:
            _tenanted(source, metadata)
    # The lexical index. rowid is the record's seq, named after FTS5's rowid so the shared
    # statements run unchanged; the document weighs tags A, aliases B, subject C and
    # content D, stemming content and tags and keeping names and identifiers as written.
    # Without the btree_gin extension the GIN index holds the document alone (the
    # migration says what to run).
    fts = Table(
        "records_fts", metadata,
        Column("rowid", BigInteger(), nullable=False),
        Column("record_id", _c(), nullable=False),
        Column("content", _c(), nullable=False),
        Column("subject", _c(), nullable=False),
        Column("aliases", _c(), nullable=False),
        Column("tags", _c(), nullable=False, server_default=""),
        Column("document", TSVECTOR(), Computed(
            "setweight(to_tsvector('retold_stem', retold_words(content)), 'D')"
            " || setweight(to_tsvector('retold_exact', retold_words(subject)), 'C')"
            " || setweight(to_tsvector('retold_exact', retold_words(aliases)), 'B')"
            " || setweight(to_tsvector('retold_stem', retold_words(tags)), 'A')", persisted=True)),
        _tenant_column(),
        PrimaryKeyConstraint(TENANT, "rowid", name="records_fts_pkey"),
        ForeignKeyConstraint([TENANT], [f"{TENANT_REGISTRY}.name"], name="records_fts_tenant_fkey"),
    )
    Index("records_fts_document", fts.c[TENANT], fts.c.document, postgresql_using="gin")
    return metadata


PG_METADATA = _declare()

# Functions in the store's schema: SQLite's json_extract, instr and json_each with the
# meaning the shared SQL gives them, the lexical index's word splitter, the connection's
# tenant, and the bodies of the triggers below.
PG_FUNCTIONS = ("instr", "json_each", "json_extract", "retold_access_bump", "retold_tenant", "retold_words",
                "search_returned_fill")
# Triggers: the access log's filler on search_log, and the counter of changes to who may
# read what on grants and scope_members (per statement, where SQLite's are per row).
PG_TRIGGERS = ("grants_access", "scope_members_access", "search_returned_fill")
# The lexical index's text-search configurations, and the dictionary stemming without
# stopwords that retold_stem uses.
PG_TEXT_SEARCH = ("retold_english", "retold_exact", "retold_stem")
# Not in the schema and not listed: the agent role (cluster-wide), the policy
# ``retold_tenant`` with FORCE ROW LEVEL SECURITY on every table that has a tenant key,
# and the btree_gin and unaccent extensions (database-wide, created where the role may).
