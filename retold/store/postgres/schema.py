"""The PostgreSQL schema and its forward-only migrations.

A new PostgreSQL store is created at the latest version in one step, from the declaration
of its tables (:data:`retold.store.postgres.tables.PG_METADATA`) and the functions,
triggers, policies and grants this module makes, and ``schema_migrations`` records every
version as on SQLite, so ``retold migrate`` reports the same version on both backends. A
store an earlier release created (at :data:`PG_BASE` or later) takes each migration in
:data:`PG_MIGRATIONS` after its version; each has the SQLite one's version, and the
migrated store has the declared schema. Every step holds a transaction-scoped
advisory lock, so two processes opening a new store at once serialise and the second
finds the work done. See docs/decisions.md, "PostgreSQL as a shared store".
"""

from __future__ import annotations

import graphlib
import logging
import re
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy.dialects.postgresql.base import PGDialect
from sqlalchemy.schema import CreateIndex, CreateTable

from retold.clock import SystemClock, to_iso
from retold.errors import NotADatabaseError, SchemaTooNewError
from retold.store.migrations import (
    AUDIT_COLUMNS,
    AUDIT_INDEX,
    MIGRATIONS,
    SUBJECT_RECENT_INDEX,
    UTILITY_TABLES,
    MigrationReport,
)
from retold.store.postgres.tables import PG_METADATA, TENANT_REGISTRY
from retold.store.validity_backfill import Backfill, backfill_validity
from retold.tenant import DEFAULT_TENANT

__all__ = ["AGENT_ROLE", "PG_BASE", "PG_MIGRATIONS", "SCHEMA_LOCK", "TENANT_REGISTRY", "TENANT_VERSION",
           "check_version", "current_version", "migrate", "parents_first", "tenant_tables"]

log = logging.getLogger(__name__)

# The advisory lock key schema changes take (distinct from the write lock's).
SCHEMA_LOCK = 0x7265746F6C64_01  # "retold" + 1
# The schema version the first PostgreSQL release created stores at; a store of any release
# is at this version or later.
PG_BASE = 9


def _search_decision(conn: Any) -> None:
    conn.execute('ALTER TABLE search_log ADD COLUMN decision TEXT COLLATE "C"')


def _host_trigger(conn: Any) -> None:
    """Host-issued searches are logged as ``host`` (they were ``auto``), CHECK included."""
    conn.execute("ALTER TABLE search_log DROP CONSTRAINT search_log_trigger_check")
    conn.execute("UPDATE search_log SET trigger = 'host' WHERE trigger = 'auto'")
    conn.execute("ALTER TABLE search_log ADD CONSTRAINT search_log_trigger_check"
                 " CHECK (trigger IN ('tool','host'))")


def _record_pins(conn: Any) -> None:
    conn.execute('CREATE TABLE record_pins (record_id TEXT COLLATE "C" PRIMARY KEY REFERENCES records(id),'
                 ' pinned_at TEXT COLLATE "C" NOT NULL, actor TEXT COLLATE "C" NOT NULL)')


def _pending_embeddings(conn: Any) -> None:
    conn.execute('CREATE TABLE pending_embeddings (record_id TEXT COLLATE "C" PRIMARY KEY'
                 ' REFERENCES records(id), since TEXT COLLATE "C" NOT NULL,'
                 ' reason TEXT COLLATE "C" NOT NULL)')


def _supersedes_index(conn: Any) -> None:
    conn.execute("CREATE INDEX records_supersedes ON records(supersedes_id) WHERE supersedes_id IS NOT NULL")


# The access log's filler: the trigger function and the trigger on search_log.
_RETURNED_FILL = (
    "CREATE FUNCTION search_returned_fill() RETURNS trigger LANGUAGE plpgsql AS $fill$ BEGIN"
    " INSERT INTO search_returned(record_id, search_id, rank) SELECT e.value, NEW.id, e.n"
    " FROM jsonb_array_elements_text(NEW.returned::jsonb) WITH ORDINALITY AS e(value, n)"
    " ON CONFLICT DO NOTHING; RETURN NEW; END $fill$",
    "CREATE TRIGGER search_returned_fill AFTER INSERT ON search_log FOR EACH ROW"
    " EXECUTE FUNCTION search_returned_fill()",
)


def _search_returned(conn: Any) -> None:
    """As on SQLite (retold.store.migrations): a record's access log, filled by a trigger
    as search-log rows arrive and emptied with them by the foreign key."""
    conn.execute('CREATE TABLE search_returned (record_id TEXT COLLATE "C" NOT NULL,'
                 ' search_id TEXT COLLATE "C" NOT NULL REFERENCES search_log(id) ON DELETE CASCADE,'
                 ' rank INTEGER NOT NULL, PRIMARY KEY (record_id, search_id))')
    conn.execute("CREATE INDEX search_returned_search ON search_returned(search_id)")
    for sql in _RETURNED_FILL:
        conn.execute(sql)
    conn.execute("INSERT INTO search_returned(record_id, search_id, rank) SELECT e.value, s.id, e.n"
                 " FROM search_log AS s, jsonb_array_elements_text(s.returned::jsonb) WITH ORDINALITY"
                 " AS e(value, n) ON CONFLICT DO NOTHING")


def _utility_tables(conn: Any) -> None:
    """As on SQLite, with text compared byte by byte as everywhere in this schema."""
    for sql in UTILITY_TABLES:
        conn.execute(sql.replace(" TEXT", ' TEXT COLLATE "C"').replace(" REAL", " DOUBLE PRECISION"))


# The role every store connection takes after migrating: it owns nothing and cannot bypass
# row-level security, so its reads and writes see only the tenant its connection names.
AGENT_ROLE = "retold_agent"
# Tables that hold no tenant's data: the schema's version log and the registry itself.
_UNTENANTED = ("schema_migrations", TENANT_REGISTRY)

_TENANT_FUNCTION = """
CREATE OR REPLACE FUNCTION retold_tenant() RETURNS text LANGUAGE plpgsql STABLE PARALLEL SAFE AS $tenant$
DECLARE
  bound text := current_setting('retold.tenant', true);
BEGIN
  IF bound IS NULL OR bound = '' THEN
    RAISE EXCEPTION 'this connection is bound to no tenant, so it may read and write nothing'
      USING ERRCODE = 'insufficient_privilege',
            HINT = 'SELECT set_config(''retold.tenant'', <tenant>, false) first';
  END IF;
  RETURN bound;
END
$tenant$"""

# Roles are cluster-wide and stores in other databases or schemas may create the same one
# at the same moment: losing that race is the same as finding it there.
_AGENT_ROLE = f"""
DO $role$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{AGENT_ROLE}') THEN
    BEGIN
      CREATE ROLE {AGENT_ROLE} NOLOGIN NOBYPASSRLS;
    EXCEPTION
      WHEN duplicate_object OR unique_violation THEN NULL;
      WHEN insufficient_privilege THEN
        RAISE EXCEPTION 'role {AGENT_ROLE} does not exist and % may not create it', current_user
          USING ERRCODE = 'insufficient_privilege',
                HINT = 'a superuser runs: CREATE ROLE {AGENT_ROLE} NOLOGIN NOBYPASSRLS;'
                       ' GRANT {AGENT_ROLE} TO ' || current_user;
    END;
  END IF;
  IF NOT pg_has_role(current_user, '{AGENT_ROLE}', 'MEMBER') THEN
    BEGIN
      EXECUTE format('GRANT {AGENT_ROLE} TO %I', current_user);
    EXCEPTION WHEN insufficient_privilege THEN
      RAISE EXCEPTION '% is not a member of {AGENT_ROLE}, so its connections cannot take that role',
                      current_user
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'a superuser runs: GRANT {AGENT_ROLE} TO ' || current_user;
    END;
  END IF;
  IF NOT has_database_privilege('{AGENT_ROLE}', current_database(), 'TEMPORARY') THEN
    EXECUTE format('GRANT TEMPORARY ON DATABASE %I TO {AGENT_ROLE}', current_database());
  END IF;
END
$role$"""

_INDEX_KEYS = re.compile(r" USING (\w+) \(")


def _tenant_first(definition: str) -> str:
    """An index definition (as ``pg_get_indexdef`` gives it) with ``tenant`` put first."""
    return _INDEX_KEYS.sub(r" USING \1 (tenant, ", definition, count=1)


_FOREIGN_KEY = re.compile(r"FOREIGN KEY \((?P<cols>[^)]*)\) REFERENCES (?P<parent>[^(]+)\((?P<keys>[^)]*)\)")


def tenant_tables(conn: Any) -> list[str]:
    """The store's tables that hold tenants' rows, by name."""
    rows = conn.execute("SELECT c.relname FROM pg_class c WHERE c.relkind = 'r'"
                        " AND c.relnamespace = current_schema()::regnamespace ORDER BY c.relname").fetchall()
    return [str(name) for (name,) in rows if name not in _UNTENANTED]


def _constraints(conn: Any, table: str, kinds: str) -> list[tuple[str, str]]:
    return [(str(name), str(definition)) for name, definition in conn.execute(
        "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint"
        " WHERE conrelid = ?::regclass AND contype = ANY(?) ORDER BY conname",
        (table, list(kinds))).fetchall()]


def _tenant_key(conn: Any) -> None:
    """A tenant key on every table, row-level security on it, and the role connections take.

    Each row gets ``tenant``, filled from the connection's ``retold.tenant`` setting, so the
    shared SQL never names it; the rows already there belong to the ``default`` tenant.
    Every primary key, unique constraint and unique index starts with the tenant (two
    tenants may hold the same session id, user id or entity name, and each numbers its own
    records from 1), and every foreign key carries it, so no row can point into another
    tenant. The policy on each table admits only the connection's tenant, on reads and
    writes, and FORCE applies it to the tables' owner too; only a superuser or a role with
    BYPASSRLS (the admin path: listing, adding and dropping tenants) sees every tenant."""
    conn.execute(_TENANT_FUNCTION)
    conn.execute(f'CREATE TABLE IF NOT EXISTS {TENANT_REGISTRY} (name TEXT COLLATE "C" PRIMARY KEY,'
                 ' added_at TEXT COLLATE "C" NOT NULL)')
    conn.execute(f"INSERT INTO {TENANT_REGISTRY}(name, added_at) VALUES (?, ?) ON CONFLICT DO NOTHING",
                 (DEFAULT_TENANT, to_iso(SystemClock().now())))
    tables = [t for t in tenant_tables(conn) if not _has_column(conn, t, "tenant")]
    # Foreign keys go first (a key they name cannot be replaced under them) and come back
    # last, with the tenant added on both sides.
    foreign = {table: _constraints(conn, table, "f") for table in tables}
    for table, keys in foreign.items():
        for name, _ in keys:
            conn.execute(f"ALTER TABLE {table} DROP CONSTRAINT {name}")
    for table in tables:
        conn.execute(f"ALTER TABLE {table} ADD COLUMN tenant TEXT COLLATE \"C\" NOT NULL DEFAULT"
                     f" '{DEFAULT_TENANT}'")
        conn.execute(f"ALTER TABLE {table} ALTER COLUMN tenant SET DEFAULT retold_tenant()")
        for name, definition in _constraints(conn, table, "pu"):
            conn.execute(f"ALTER TABLE {table} DROP CONSTRAINT {name}")
            keyed = definition.replace("(", "(tenant, ", 1)
            conn.execute(f"ALTER TABLE {table} ADD CONSTRAINT {name} {keyed}")
        for name, definition in conn.execute(
                "SELECT c.relname, pg_get_indexdef(i.indexrelid) FROM pg_index i"
                " JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = ?::regclass AND i.indisunique"
                " AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid)",
                (table,)).fetchall():
            conn.execute(f"DROP INDEX {name}")
            conn.execute(_tenant_first(str(definition)))
        conn.execute(f"ALTER TABLE {table} ADD CONSTRAINT {table}_tenant_fkey FOREIGN KEY (tenant)"
                     f" REFERENCES {TENANT_REGISTRY}(name)")
    for table, keys in foreign.items():
        for name, definition in keys:
            conn.execute(f"ALTER TABLE {table} ADD CONSTRAINT {name} " + _FOREIGN_KEY.sub(
                r"FOREIGN KEY (tenant, \g<cols>) REFERENCES \g<parent>(tenant, \g<keys>)", definition))
    for table in tenant_tables(conn):
        _tenant_policy(conn, table)
    _grant_agent(conn)
    _lexical_match_leakproof(conn)


def _tenant_policy(conn: Any, table: str) -> None:
    """Row-level security on ``table``: reads and writes see only the connection's tenant,
    its owner included."""
    # The setting is read once per statement (an InitPlan), not once per row.
    conn.execute(f"DROP POLICY IF EXISTS retold_tenant ON {table}")
    conn.execute(f"CREATE POLICY retold_tenant ON {table} USING (tenant = (SELECT retold_tenant()))"
                 " WITH CHECK (tenant = (SELECT retold_tenant()))")
    conn.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
    conn.execute(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")


# Row-level security lets the planner run a query's own conditions before the policy's only
# when they are leakproof, and PostgreSQL does not mark the full-text match so: without the
# mark, `document @@ query` cannot use the lexical GIN index, and every lexical read scans
# all of the tenant's rows. The match raises no error that depends on a row's text, so
# marking it discloses nothing; only a superuser may, once per database.
_LEAKPROOF_MATCH = "ALTER FUNCTION pg_catalog.ts_match_vq(tsvector, tsquery) LEAKPROOF"


def _lexical_match_leakproof(conn: Any) -> None:
    """Mark the full-text match leakproof where this role may; else say who must."""
    marked, superuser = conn.execute(
        "SELECT p.proleakproof, r.rolsuper FROM pg_proc p, pg_roles r"
        " WHERE p.oid = 'pg_catalog.ts_match_vq(tsvector, tsquery)'::regprocedure"
        " AND r.rolname = current_user").fetchone()
    if marked:
        return
    if superuser:
        conn.execute(_LEAKPROOF_MATCH)
        return
    log.warning("lexical search scans each tenant's rows until a superuser runs, once in this "
                "database: %s", _LEAKPROOF_MATCH)


def _grant_agent(conn: Any) -> None:
    """The agent role may use the schema and change rows of the tenants' tables (never
    their definitions), read the version log, and nothing of the registry. Tables later
    migrations create get the same grants."""
    conn.execute(_AGENT_ROLE)
    schema = conn.execute("SELECT quote_ident(current_schema())").fetchone()[0]
    conn.execute(f"GRANT USAGE ON SCHEMA {schema} TO {AGENT_ROLE}")
    tables = ", ".join(tenant_tables(conn))
    conn.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {tables} TO {AGENT_ROLE}")
    conn.execute(f"GRANT SELECT ON schema_migrations TO {AGENT_ROLE}")
    conn.execute(f"REVOKE ALL ON {TENANT_REGISTRY} FROM {AGENT_ROLE}")
    conn.execute(f"GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA {schema} TO {AGENT_ROLE}")
    conn.execute(f"GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA {schema} TO {AGENT_ROLE}")
    conn.execute(f"ALTER DEFAULT PRIVILEGES IN SCHEMA {schema} GRANT SELECT, INSERT, UPDATE, DELETE"
                 f" ON TABLES TO {AGENT_ROLE}")


def _record_sensitivity(conn: Any) -> None:
    """As on SQLite (retold.store.migrations): a record's sensitivity class and its masked
    content; the table's tenant key and row-level security cover the new columns as they are."""
    conn.execute("ALTER TABLE records ADD COLUMN sensitivity TEXT COLLATE \"C\" NOT NULL DEFAULT 'none'")
    conn.execute('ALTER TABLE records ADD COLUMN redacted_content TEXT COLLATE "C"')


def _sensitivity_label(conn: Any) -> None:
    """As on SQLite (retold.store.migrations): the extractor's label beside the record's
    class, NULL for the records written before; tenant key and row-level security cover it."""
    conn.execute('ALTER TABLE records ADD COLUMN sensitivity_label TEXT COLLATE "C"')


# The counter of changes to who may read what: the trigger function and its triggers.
_ACCESS_BUMP = (
    "CREATE FUNCTION retold_access_bump() RETURNS trigger LANGUAGE plpgsql AS $bump$ BEGIN"
    " INSERT INTO store_meta(key, value) VALUES ('access_version', '1')"
    " ON CONFLICT (tenant, key) DO UPDATE SET value = (store_meta.value::bigint + 1)::text;"
    " RETURN NULL; END $bump$",
    *(f"CREATE TRIGGER {table}_access AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON {table}"
      " FOR EACH STATEMENT EXECUTE FUNCTION retold_access_bump()" for table in ("grants", "scope_members")),
)


def _access_version(conn: Any) -> None:
    """As on SQLite (retold.store.migrations): a per-tenant counter of changes to grants
    and memberships, kept by statement triggers. The trigger runs as the caller, under
    its tenant's row-level security, so the row it bumps is that tenant's."""
    for sql in _ACCESS_BUMP:
        conn.execute(sql)
    conn.execute(f"GRANT EXECUTE ON FUNCTION retold_access_bump() TO {AGENT_ROLE}")


def _subject_recent_index(conn: Any) -> None:
    """As on SQLite (retold.store.migrations): a subject's records by recency, so the write
    path's capped scan reads its cap, not every record about the subject."""
    conn.execute(SUBJECT_RECENT_INDEX)


def _validity_windows(conn: Any) -> str | None:
    """As on SQLite (retold.store.validity_backfill), once per tenant: row-level security
    shows a statement only the rows of the tenant it is bound to, here for this
    transaction alone. A role that bypasses it sees every tenant in one pass."""
    (everything,) = conn.execute("SELECT rolsuper OR rolbypassrls FROM pg_roles"
                                 " WHERE rolname = current_user").fetchone()
    if everything:
        return backfill_validity(conn).note()
    done = [Backfill(0, 0, 0)]
    for (tenant,) in conn.execute(f"SELECT name FROM {TENANT_REGISTRY} ORDER BY name").fetchall():
        conn.execute("SELECT set_config('retold.tenant', ?, true)", (tenant,))
        done.append(backfill_validity(conn))
    return Backfill(sum(b.dated for b in done), sum(b.undated for b in done),
                    sum(b.corrections for b in done)).note()


def _audit_items(conn: Any) -> None:
    """As on SQLite (retold.store.migrations), keyed by tenant as the tenant key's migration
    left every table: the tenant is filled from the connection and leads the primary and
    foreign keys, and the tenant policy and the agent role's grants cover the table."""
    columns = AUDIT_COLUMNS.replace(" TEXT", ' TEXT COLLATE "C"')
    conn.execute(f'CREATE TABLE audit_items (tenant TEXT COLLATE "C" NOT NULL DEFAULT retold_tenant()'
                 f' REFERENCES {TENANT_REGISTRY}(name), record_id TEXT COLLATE "C" NOT NULL, {columns},'
                 " PRIMARY KEY (tenant, record_id),"
                 " FOREIGN KEY (tenant, record_id) REFERENCES records(tenant, id))")
    conn.execute(AUDIT_INDEX)
    _tenant_policy(conn, "audit_items")
    conn.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON audit_items TO {AGENT_ROLE}")


# The lexical index's operator classes for a plain column beside the tsvector ship with
# PostgreSQL's contrib as btree_gin, a trusted extension: any role that may create objects
# in the database may add it.
_BTREE_GIN = "CREATE EXTENSION IF NOT EXISTS btree_gin"


def _btree_gin(conn: Any) -> bool:
    """Whether ``btree_gin`` is there once this returns (created here where this role may)."""
    conn.execute("SAVEPOINT retold_btree_gin")
    try:
        conn.execute(_BTREE_GIN)
    except Exception as exc:  # not allowed for this role, or not installed on the server
        conn.execute("ROLLBACK TO SAVEPOINT retold_btree_gin")
        log.warning("lexical search reads every tenant's matching rows (%s) until an administrator"
                    " runs, once in this database: %s; DROP INDEX records_fts_document;"
                    " CREATE INDEX records_fts_document ON records_fts USING gin (tenant, document)",
                    " ".join(str(exc).split()), _BTREE_GIN)
        return False
    conn.execute("RELEASE SAVEPOINT retold_btree_gin")
    return True


def _tenant_indexes(conn: Any) -> None:
    """Every other index of a tenant's table leads with ``tenant`` too, as its keys do.

    Row-level security adds ``tenant = <the connection's tenant>`` to every statement, and
    an index that starts with the tenant turns that into a range of the index; one that
    does not reads every tenant's entries for a scope, a version or a term and leaves the
    policy to throw away the others', so a small tenant's reads grow with the whole
    database. The full-text index needs ``btree_gin`` to hold a text column beside the
    document; without it that index stays as it was and the store says what to run."""
    gin = _btree_gin(conn)
    for table in tenant_tables(conn):
        for name, definition, method in conn.execute(
                "SELECT c.relname, pg_get_indexdef(i.indexrelid), m.amname FROM pg_index i"
                " JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am m ON m.oid = c.relam"
                " WHERE i.indrelid = ?::regclass AND NOT i.indisunique"
                " AND i.indkey[0] IS DISTINCT FROM (SELECT a.attnum FROM pg_attribute a"
                " WHERE a.attrelid = i.indrelid AND a.attname = 'tenant')"
                " ORDER BY c.relname", (table,)).fetchall():
            if method == "gin" and not gin:
                continue
            conn.execute(f"DROP INDEX {name}")
            conn.execute(_tenant_first(str(definition)))


# Migrations after the initial PostgreSQL schema: (version, name, apply); apply may return
# a note for the operator.
PG_MIGRATIONS: tuple[tuple[int, str, Callable[[Any], str | None]], ...] = (
    (10, "search decision column", _search_decision),
    (11, "host trigger name", _host_trigger),
    (12, "record pins", _record_pins),
    (13, "pending embeddings", _pending_embeddings),
    (14, "supersedes index", _supersedes_index),
    (15, "returned records", _search_returned),
    (16, "turn decisions and bundle results", _utility_tables),
    (17, "tenant key", _tenant_key),
    (18, "record sensitivity", _record_sensitivity),
    (19, "access version", _access_version),
    (20, "subject recency index", _subject_recent_index),
    (21, "validity windows", _validity_windows),
    (22, "extraction audit", _audit_items),
    (23, "tenant-leading indexes", _tenant_indexes),
    (24, "sensitivity label", _sensitivity_label),
)
# The version from which every table has a tenant key under row-level security.
TENANT_VERSION = 17
_PG_LATEST = PG_MIGRATIONS[-1][0] if PG_MIGRATIONS else PG_BASE


def _has_column(conn: Any, table: str, column: str) -> bool:
    row = conn.execute("SELECT 1 FROM pg_attribute WHERE attrelid = ?::regclass AND attname = ?"
                       " AND NOT attisdropped", (table, column)).fetchone()
    return row is not None


def _has_table(conn: Any, name: str) -> bool:
    row = conn.execute("SELECT to_regclass(?) IS NOT NULL", (name,)).fetchone()
    return bool(row[0])


def current_version(conn: Any) -> int:
    """The highest applied migration, 0 for an empty database. Reads only."""
    if not _has_table(conn, "schema_migrations"):
        return 0
    return int(conn.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchone()[0])


def check_version(conn: Any, where: str) -> int:
    """The applied version, after refusing a schema newer than this code or a database
    that holds another application's ``records`` table. Reads only."""
    version = current_version(conn)
    if version > _PG_LATEST:
        raise SchemaTooNewError(f"store {where} has schema version {version}, newer than this Retold "
                                f"(knows up to {_PG_LATEST}); upgrade Retold to open it")
    if version == 0 and _has_table(conn, "records"):
        raise NotADatabaseError(f"{where} holds a table 'records' but no Retold schema; refusing to add "
                                "Retold's tables to it")
    return version


def _text_search(conn: Any) -> None:
    """The two text-search configurations the lexical index uses: ``retold_stem`` (English
    stems) and ``retold_exact`` (words as written), both folding accents when the
    ``unaccent`` extension can be had, as SQLite's tokenizer removes diacritics.

    The stems come from a snowball dictionary without a stopword list: ``english`` drops
    "up", "on" or "off" from a document and from a phrase, so "follow up" would match
    every "follow", where FTS5 (which indexes every word) needs both words together."""
    conn.execute("CREATE TEXT SEARCH DICTIONARY retold_english (TEMPLATE = snowball, Language = english)")
    conn.execute("CREATE TEXT SEARCH CONFIGURATION retold_stem (COPY = english)")
    conn.execute("ALTER TEXT SEARCH CONFIGURATION retold_stem ALTER MAPPING REPLACE english_stem"
                 " WITH retold_english")
    conn.execute("CREATE TEXT SEARCH CONFIGURATION retold_exact (COPY = simple)")
    available = conn.execute(
        "SELECT installed_version IS NOT NULL, true FROM pg_available_extensions WHERE name = 'unaccent'"
    ).fetchone()
    if available is None:
        log.info("PostgreSQL has no unaccent extension; accents are kept in the lexical index")
        return
    if not available[0]:
        conn.execute("SAVEPOINT retold_unaccent")
        try:
            conn.execute("CREATE EXTENSION IF NOT EXISTS unaccent")
        except Exception as exc:  # not allowed for this role: index without folding
            conn.execute("ROLLBACK TO SAVEPOINT retold_unaccent")
            log.info("cannot create the unaccent extension (%s); accents are kept", exc)
            return
        conn.execute("RELEASE SAVEPOINT retold_unaccent")
    # The extension lives in one schema of the database, not necessarily on this path.
    home = conn.execute("SELECT n.nspname FROM pg_extension e JOIN pg_namespace n"
                        " ON n.oid = e.extnamespace WHERE e.extname = 'unaccent'").fetchone()[0]
    for name, dictionary in (("retold_stem", "retold_english"), ("retold_exact", "simple")):
        conn.execute(f"ALTER TEXT SEARCH CONFIGURATION {name} ALTER MAPPING FOR"
                     f" asciiword, asciihword, hword_asciipart, word, hword, hword_part"
                     f' WITH "{home}".unaccent, {dictionary}')


# SQLite functions the shared statements call, with SQLite's meaning for the uses the store
# makes of them: a JSON value as text, a 1-based position, a JSON array's elements. And
# words as FTS5's unicode61 tokenizer cuts them, runs of letters and digits, where
# PostgreSQL's own parser would keep 'id/attribute' or 'a/b.py' whole as one path token.
_SHARED_FUNCTIONS = (
    "CREATE FUNCTION json_extract(doc text, path text) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE"
    " RETURN (doc::jsonb) #>> string_to_array(substr(path, 3), '.')",
    "CREATE FUNCTION instr(haystack text, needle text) RETURNS integer LANGUAGE sql IMMUTABLE PARALLEL SAFE"
    " RETURN strpos(haystack, needle)",
    "CREATE FUNCTION json_each(doc text) RETURNS TABLE(value text) LANGUAGE sql IMMUTABLE PARALLEL SAFE"
    " RETURN jsonb_array_elements_text(doc::jsonb)",
    "CREATE FUNCTION retold_words(body text) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE"
    " RETURN regexp_replace(body, '[^[:alnum:]]+', ' ', 'g')",
)
# The lexical index as it stands where btree_gin cannot be had (see _btree_gin).
_DOCUMENT_ONLY = "CREATE INDEX records_fts_document ON records_fts USING gin (document)"


def _create(conn: Any) -> None:
    """A new store at the latest version: the declared tables, then what is not a table
    (functions, triggers, the tenant policies, the agent role's grants), as the
    migrations leave an older store; recorded as every migration."""
    _text_search(conn)
    for sql in (*_SHARED_FUNCTIONS, _TENANT_FUNCTION):
        conn.execute(sql)
    gin = _btree_gin(conn)
    dialect = PGDialect()  # type: ignore[no-untyped-call]  # (SQLAlchemy leaves it untyped)
    for table in PG_METADATA.sorted_tables:
        conn.execute(str(CreateTable(table).compile(dialect=dialect)))
        for index in sorted(table.indexes, key=lambda i: str(i.name)):
            if index.name == "records_fts_document" and not gin:
                conn.execute(_DOCUMENT_ONLY)
            else:
                conn.execute(str(CreateIndex(index).compile(dialect=dialect)))
    now = to_iso(SystemClock().now())
    conn.execute(f"INSERT INTO {TENANT_REGISTRY}(name, added_at) VALUES (?, ?)", (DEFAULT_TENANT, now))
    conn.execute("INSERT INTO store_meta(tenant, key, value) VALUES (?, 'records_version', '0')",
                 (DEFAULT_TENANT,))
    for sql in (*_RETURNED_FILL, *_ACCESS_BUMP):
        conn.execute(sql)
    for name in tenant_tables(conn):
        _tenant_policy(conn, name)
    _grant_agent(conn)
    _lexical_match_leakproof(conn)
    conn.executemany("INSERT INTO schema_migrations(version, name, applied_at) VALUES (?, ?, ?)",
                     [(m.version, m.name, now) for m in MIGRATIONS])


def migrate(conn: Any, where: str, tenant: str = DEFAULT_TENANT) -> MigrationReport:
    """Create the schema on an empty database, apply later migrations; idempotent. The
    report counts ``tenant``'s unresolved migration issues. The login role needs to own
    the schema, not to be a superuser: what only an administrator can add is logged with
    the statement to run (docs/postgresql.md, "The role that migrates")."""
    if check_version(conn, where) >= _PG_LATEST:
        return MigrationReport((), current_version(conn), _unresolved(conn, tenant))
    applied: list[int] = []
    notes: list[str] = []
    steps: list[tuple[int, str, Callable[[Any], str | None]]] = [(_PG_LATEST, "new store", _create)]
    steps += PG_MIGRATIONS
    for version, name, apply in steps:
        conn.execute("BEGIN")
        try:
            conn.execute("SELECT pg_advisory_xact_lock(?)", (SCHEMA_LOCK,))
            # Re-read under the lock: another process may have done it meanwhile. A new store
            # is made whole; an existing one takes each migration after its version.
            current = check_version(conn, where)
            done = current > 0 if apply is _create else current >= version
            if done:
                conn.execute("ROLLBACK")
                continue
            note = apply(conn)
            if apply is not _create:
                conn.execute("INSERT INTO schema_migrations(version, name, applied_at) VALUES (?, ?, ?)",
                             (version, name, to_iso(SystemClock().now())))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        applied += [m.version for m in MIGRATIONS] if apply is _create else [version]
        if note:
            log.warning("store %s, migration %d: %s", where, version, note)
            notes.append(f"migration {version}: {note}")
    return MigrationReport(tuple(applied), current_version(conn), _unresolved(conn, tenant), tuple(notes))


def _unresolved(conn: Any, tenant: str) -> int:
    """``tenant``'s rows in migration_issues: what keeps its store from opening until
    ``retold migrate`` (bound to the same tenant) has reviewed them. The count runs in a
    transaction bound to the tenant, as the admin path binds itself, because row-level
    security holds the tables' owner too; the filter is for a role that bypasses it. See
    docs/decisions.md, "A plain owner migrates a PostgreSQL store"."""
    if not _has_table(conn, "migration_issues"):
        return 0
    if not _has_column(conn, "migration_issues", "tenant"):  # a store from before tenants
        return int(conn.execute("SELECT count(*) FROM migration_issues").fetchone()[0])
    conn.execute("BEGIN")
    try:
        conn.execute("SELECT set_config('retold.tenant', ?, true)", (tenant,))
        (count,) = conn.execute("SELECT count(*) FROM migration_issues WHERE tenant = ?",
                                (tenant,)).fetchone()
    finally:
        conn.execute("ROLLBACK")
    return int(count)


def parents_first(dst: Any, names: Sequence[str]) -> list[str]:
    """``names`` ordered so that a table comes after every table its foreign keys name
    (a table naming itself is loaded by one statement, which PostgreSQL checks at its end)."""
    graph: dict[str, set[str]] = {name: set() for name in names}
    for child, parent in dst.execute(
            "SELECT c.relname, p.relname FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid"
            " JOIN pg_class p ON p.oid = k.confrelid WHERE k.contype = 'f'"
            " AND c.relnamespace = current_schema()::regnamespace").fetchall():
        if child in graph and parent in graph and child != parent:
            graph[child].add(parent)
    sorter = graphlib.TopologicalSorter(graph)
    sorter.prepare()
    ordered: list[str] = []
    while sorter.is_active():
        ready = sorted(sorter.get_ready())  # a stable order among independent tables
        ordered += ready
        sorter.done(*ready)
    return ordered
