"""Versioned, forward-only schema migrations.

Each migration runs inside one ``BEGIN IMMEDIATE`` transaction together with the row in
``schema_migrations`` that records it, so a crash leaves either both or neither. Two
processes opening a new store at once serialise on the write lock and the second finds
the work done. Whether anything is pending is read first, without a lock, so opening an
up-to-date store never waits for (or blocks) another process's write. A migration may
return a note for the operator; ``retold migrate`` prints it and the store logs it.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import resources

from retold.clock import SystemClock, to_iso
from retold.errors import NotADatabaseError, SchemaTooNewError
from retold.store.family import families_of_vectors, write_family
from retold.store.fts import create_fts_table, is_stemmed, write_fts_rows
from retold.store.validity_backfill import backfill_validity

__all__ = [
    "AUDIT_COLUMNS", "AUDIT_INDEX", "LATEST", "MIGRATIONS", "Migration", "MigrationReport", "check_is_retold",
    "check_not_newer", "current_version", "migrate",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    apply: Callable[[sqlite3.Connection], str | None]  # may return a note for the operator


@dataclass(frozen=True)
class MigrationReport:
    applied: tuple[int, ...]  # versions applied by this call, in order
    version: int  # schema version after the call
    unresolved: int  # rows in migration_issues that still need an operator
    notes: tuple[str, ...] = ()  # what the migrations applied by this call want said


def _statements(script: str) -> Iterator[str]:
    """Split a SQL script into statements.

    ``executescript`` would COMMIT first, which breaks the one-transaction rule, so the
    script is cut at statement boundaries and executed statement by statement.
    """
    buffer = ""
    for line in script.splitlines(keepends=True):
        if not buffer and (not line.strip() or line.lstrip().startswith("--")):
            continue
        buffer += line
        if sqlite3.complete_statement(buffer):
            yield buffer.strip()
            buffer = ""
    if buffer.strip():
        raise ValueError(f"incomplete SQL statement at end of script: {buffer[:80]!r}")


def _initial_schema(conn: sqlite3.Connection) -> None:
    script = resources.files("retold.store").joinpath("schema.sql").read_text("utf-8")
    for statement in _statements(script):
        conn.execute(statement)


def _extraction_stages(conn: sqlite3.Connection) -> None:
    """Persisted outputs of the extraction stages, so that a crash after a hosted call
    resumes from the saved output instead of paying for the call again."""
    conn.execute(
        "CREATE TABLE extraction_stages ("
        " session_id TEXT NOT NULL REFERENCES sessions(id),"
        " stage TEXT NOT NULL CHECK (stage IN ('extract','review')),"
        " output TEXT NOT NULL,"
        " model TEXT NOT NULL,"
        " prompt_version TEXT NOT NULL,"
        " at TEXT NOT NULL,"
        " PRIMARY KEY (session_id, stage))"
    )


def _embedding_family(conn: sqlite3.Connection) -> str | None:
    """Let ``store_meta`` hold text and record the family of the stored vectors.

    The value column was declared INTEGER, whose affinity would turn a version tag such
    as "1.0" into the number 1; the table is rebuilt with an undeclared type, which keeps
    every value as written (``records_version`` stays an integer). A store whose vectors
    are of one family records it; an empty store records none until its first vector; a
    store holding several families (an interrupted re-embed) records none and says so.
    """
    conn.execute("CREATE TABLE store_meta_next (key TEXT PRIMARY KEY, value NOT NULL)")
    conn.execute("INSERT INTO store_meta_next(key, value) SELECT key, value FROM store_meta")
    conn.execute("DROP TABLE store_meta")
    conn.execute("ALTER TABLE store_meta_next RENAME TO store_meta")
    families = families_of_vectors(conn)
    if len(families) == 1:
        write_family(conn, families[0][0])
        return None
    if not families:
        return None
    held = "; ".join(f"{family}: {count} vectors" for family, count in families)
    return (f"the store holds vectors of {len(families)} embedding families ({held}), so none is "
            "recorded; run `retold reembed --model ... --version ...` to settle on one")


def _stemmed_fts(conn: sqlite3.Connection) -> None:
    """Rebuild ``records_fts`` with the Porter tokenizer and index every record again.

    An FTS5 table cannot change its tokenizer in place, so the table is dropped, created
    as a new store creates it and refilled by the store's own row writer, which skips
    deleted records as it always does. A store created with the stemming schema already
    has the table and is left alone.
    """
    if is_stemmed(conn):
        return
    conn.execute("DROP TABLE records_fts")
    create_fts_table(conn)
    # Records have no redacted form yet at this version (migration 18 adds it).
    write_fts_rows(conn, [rid for (rid,) in conn.execute(
        "SELECT id FROM records WHERE status != 'deleted' ORDER BY seq").fetchall()], redacted=False)


_SEEDED_BY = "migration: scope members"  # what members list shows as added_by


def _scope_members(conn: sqlite3.Connection) -> str | None:
    """Add ``scope_members`` and decide who belongs to the shared scopes of an existing store.

    From now on a project or org scope needs both the agent's grant and the user's
    membership. The one membership this migration assumes is the store's own evidence:
    a user whose session wrote a live record into a shared scope belongs to it. Everyone
    else served by a granted agent loses that scope until an operator adds them, which
    fails closed instead of keeping every user of an agent in every scope it was granted.
    A principal whose session names a project belongs to that project without a row.
    """
    conn.execute(
        "CREATE TABLE scope_members ("
        " scope_kind TEXT NOT NULL CHECK (scope_kind IN ('project','org')),"
        " scope_id TEXT NOT NULL,"
        " user_id TEXT NOT NULL,"
        " added_at TEXT NOT NULL,"
        " added_by TEXT NOT NULL,"
        " PRIMARY KEY (scope_kind, scope_id, user_id))"
    )
    conn.execute("CREATE INDEX scope_members_user ON scope_members(user_id)")
    writers: set[tuple[str, str, str]] = set()
    for kind, ident, ref in conn.execute(
        "SELECT DISTINCT scope_kind, scope_id, source_ref FROM records"
        " WHERE scope_kind IN ('project','org') AND status != 'deleted'"
        " AND source_ref LIKE 'session:%'"
    ).fetchall():
        # 'session:<id>' or 'session:<id><turn:n>'
        row = conn.execute("SELECT user_id FROM sessions WHERE id = ?",
                           (ref.removeprefix("session:").partition("<")[0],)).fetchone()
        if row is not None:
            writers.add((kind, ident, row[0]))
    now = to_iso(SystemClock().now())
    conn.executemany(
        "INSERT INTO scope_members(scope_kind, scope_id, user_id, added_at, added_by)"
        " VALUES (?, ?, ?, ?, ?)",
        [(*member, now, _SEEDED_BY) for member in sorted(writers)],
    )
    # Users an agent granted a shared scope has served, who are not members now (a
    # session naming the project counts as membership).
    left_out = int(conn.execute(
        "SELECT count(*) FROM (SELECT DISTINCT g.scope_kind, g.scope_id, s.user_id"
        " FROM grants g JOIN sessions s ON s.agent_id = g.agent_id"
        " WHERE g.scope_kind IN ('project','org') AND (g.can_read OR g.can_write)"
        " AND NOT (g.scope_kind = 'project' AND s.project_id IS g.scope_id)"
        " AND NOT EXISTS (SELECT 1 FROM scope_members m WHERE m.scope_kind = g.scope_kind"
        "  AND m.scope_id = g.scope_id AND m.user_id = s.user_id))"
    ).fetchone()[0])
    if not writers and not left_out:
        return None
    return (f"project and org scopes now need members; assumed {len(writers)} (every user whose"
            f" session wrote a live record into a shared scope); {left_out} user-scope pairs"
            " reachable before through an agent's grant are not members now; add them with"
            " `retold members add SCOPE USER`")


_ATTEMPT_COLUMNS = (
    ("claim_token", "TEXT"),  # who holds the claim; the apply step checks it
    ("claim_heartbeat_at", "TEXT"),  # the holder's last sign of life (its lease)
    ("extraction_attempts", "INTEGER NOT NULL DEFAULT 0"),  # failed runs since the last reset
    ("extraction_last_error", "TEXT"),  # why the last run applied nothing (no transcript text)
    ("extraction_next_attempt_at", "TEXT"),  # a failed session is not due before this
    ("extraction_failed_at", "TEXT"),  # parked after the last allowed attempt
    ("extraction_blocked_by", "TEXT"),  # the model setup that found no hosted model
    ("extraction_enqueued_at", "TEXT"),  # published and not yet taken by a worker
)


def _extraction_attempts(conn: sqlite3.Connection) -> None:
    """Give each session's extraction a lease, an attempt count with backoff, a parked
    state and the time it was last handed to the queue.

    A claim taken before this migration has no heartbeat; its start stands in for one, so
    it expires one lease after it was taken. Columns already there (a half-copied store)
    are left alone.
    """
    present = {row[1] for row in conn.execute("PRAGMA table_info(sessions)")}
    for name, declaration in _ATTEMPT_COLUMNS:
        if name not in present:
            conn.execute(f"ALTER TABLE sessions ADD COLUMN {name} {declaration}")
    conn.execute("UPDATE sessions SET claim_heartbeat_at = extraction_started_at"
                 " WHERE claim_heartbeat_at IS NULL AND extraction_started_at IS NOT NULL")


def _reembed_staging(conn: sqlite3.Connection) -> None:
    """Vectors of a re-embed in progress, kept apart from the live ones until the swap.

    Searches keep using the live family while a re-embed runs, and a re-embed that
    stopped (a killed worker) resumes from what it staged instead of starting over.
    """
    conn.execute(
        "CREATE TABLE reembed_vectors ("
        " record_id TEXT PRIMARY KEY REFERENCES records(id),"
        " model TEXT NOT NULL,"
        " version TEXT NOT NULL,"
        " dims INTEGER NOT NULL,"
        " vector BLOB NOT NULL)"
    )


def _activation_and_profiles(conn: sqlite3.Connection) -> None:
    """Each record's activation and each session's profile block.

    Activation lives beside the record rather than in it, so the one record writer stays
    as it was and a record with no row is simply ``conditional`` (every record written
    before this migration). The row repeats the record's scope, which never changes, and
    whether its status is a live one (the status writers keep it in step), so counting a
    reader's records per category needs no join. A profile block is written
    once per session and only erasure changes it afterwards.
    """
    conn.execute(
        "CREATE TABLE record_activation ("
        " record_id TEXT PRIMARY KEY REFERENCES records(id),"
        " scope_kind TEXT NOT NULL,"
        " scope_id TEXT NOT NULL,"
        " live INTEGER NOT NULL DEFAULT 1,"
        " activation TEXT NOT NULL CHECK (activation IN ('ambient','conditional','review')),"
        " rule TEXT NOT NULL,"
        " reason TEXT NOT NULL,"
        " category TEXT,"
        " decided_by TEXT NOT NULL,"
        " decided_at TEXT NOT NULL,"
        " review_opened_at TEXT)"
    )
    conn.execute("CREATE INDEX record_activation_state ON record_activation(activation, review_opened_at)")
    # The profile's inventory counts a reader's records per category from this index alone.
    conn.execute("CREATE INDEX record_activation_scope"
                 " ON record_activation(scope_kind, scope_id, live, category, activation)")
    conn.execute(
        "CREATE TABLE profile_blocks ("
        " session_id TEXT PRIMARY KEY REFERENCES sessions(id),"
        " agent_id TEXT NOT NULL,"
        " user_id TEXT NOT NULL,"
        " text TEXT NOT NULL,"
        " record_ids TEXT NOT NULL,"
        " omitted INTEGER NOT NULL,"
        " tokens INTEGER NOT NULL,"
        " inventory TEXT NOT NULL,"
        " assembled_at TEXT NOT NULL)"
    )
    conn.execute("CREATE INDEX profile_blocks_user ON profile_blocks(user_id)")


def _source_ref_index(conn: sqlite3.Connection) -> None:
    """Records by source reference. A session's summaries are found by ``session:<id>``
    whenever a run writes one or a supersession retires the ones that restated the old
    value; the partial index on live summaries cannot serve those lookups (their filters
    are bound parameters), so without this each of them read every record."""
    conn.execute("CREATE INDEX records_source_ref ON records(source_ref)")


def _search_decision(conn: sqlite3.Connection) -> str | None:
    """Each logged search's answer-or-abstain decision, as a named JSON object. Rows logged
    before it have none and cannot be replayed: their columns hold the older positional
    lists and the rules that read them are gone."""
    conn.execute("ALTER TABLE search_log ADD COLUMN decision TEXT")
    if conn.execute("SELECT 1 FROM search_log LIMIT 1").fetchone() is None:
        return None
    return "search_log rows written before this migration are kept but cannot be replayed"


def _host_trigger(conn: sqlite3.Connection) -> str | None:
    """Host-issued searches were logged with trigger ``auto``; they are ``host`` now, so the
    counts by trigger and the gate's replay read one name for them. The column's CHECK
    names the allowed values and SQLite cannot alter a CHECK, so the table is rebuilt from
    its own stored definition (whatever columns later migrations added) and its indexes
    are made again."""
    (table,) = conn.execute(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'search_log'").fetchone()
    indexes = [sql for (sql,) in conn.execute(
        "SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'search_log' AND sql IS NOT NULL")]
    conn.execute(table.replace("CREATE TABLE search_log", "CREATE TABLE search_log_next", 1)
                 .replace("('tool','auto')", "('tool','host')"))
    columns = [name for _, name, *_ in conn.execute("PRAGMA table_info(search_log)")]
    chosen = ", ".join("CASE trigger WHEN 'auto' THEN 'host' ELSE trigger END" if name == "trigger" else name
                       for name in columns)
    conn.execute(f"INSERT INTO search_log_next({', '.join(columns)}) SELECT {chosen} FROM search_log")
    conn.execute("DROP TABLE search_log")
    conn.execute("ALTER TABLE search_log_next RENAME TO search_log")
    for sql in indexes:
        conn.execute(sql)
    return None


def _record_pins(conn: sqlite3.Connection) -> None:
    """Pinned records: kept from ageing out. A table of its own rather than a column, so a
    pin carries who set it and when, and the sweeps skip pinned rows by one lookup."""
    conn.execute("CREATE TABLE record_pins (record_id TEXT PRIMARY KEY REFERENCES records(id),"
                 " pinned_at TEXT NOT NULL, actor TEXT NOT NULL)")


def _pending_embeddings(conn: sqlite3.Connection) -> None:
    """Records stored without their vector (the embedder failed or ran out of time during
    the write), until the backfill embeds them. A row rather than a missing vector alone,
    so the integrity check tells a record waiting for its vector from one that lost it."""
    conn.execute("CREATE TABLE pending_embeddings (record_id TEXT PRIMARY KEY REFERENCES records(id),"
                 " since TEXT NOT NULL, reason TEXT NOT NULL)")


def _supersedes_index(conn: sqlite3.Connection) -> None:
    """Records by what they superseded. Walking a record's lineage forward (what replaced
    it), as ``memory_get`` and the inspector's record page do, otherwise read every record:
    about 57 ms a walk at 100K records. Partial, since most records supersede nothing."""
    conn.execute("CREATE INDEX records_supersedes ON records(supersedes_id) WHERE supersedes_id IS NOT NULL")


def _search_returned(conn: sqlite3.Connection) -> None:
    """Which logged searches returned each record, at what rank: a record's access log. A
    search-log row is large (every channel's candidates), and finding a record's id in the
    returned list of each row read the rows whole, about 150 ms per 20,000 searches. A
    trigger fills this table as rows arrive and the foreign key empties it as retention
    and erasure delete them, so no writer or sweep has to remember it."""
    conn.execute("CREATE TABLE search_returned (record_id TEXT NOT NULL, search_id TEXT NOT NULL"
                 " REFERENCES search_log(id) ON DELETE CASCADE, rank INTEGER NOT NULL,"
                 " PRIMARY KEY (record_id, search_id)) WITHOUT ROWID")
    conn.execute("CREATE INDEX search_returned_search ON search_returned(search_id)")
    conn.execute(f"CREATE TRIGGER search_returned_fill AFTER INSERT ON search_log BEGIN {_RETURNED_ROWS}"
                 " FROM json_each(CASE WHEN json_valid(NEW.returned) THEN NEW.returned ELSE '[]' END) AS j"
                 " WHERE j.type = 'text'; END")
    conn.execute(_RETURNED_ROWS.replace("NEW.id", "s.id")
                 + " FROM search_log AS s, json_each(s.returned) AS j WHERE json_valid(s.returned)"
                 " AND j.type = 'text'")


def _utility_tables(conn: sqlite3.Connection) -> None:
    """Turn decisions (one row per host-decided user turn) and the bundle results that
    decide whether a configuration may serve; see retold.store.turn_decisions and
    retold.store.bundles. The decision's lists go in one JSON body: they are read with the
    row, never searched."""
    for sql in UTILITY_TABLES:
        conn.execute(sql)


# The same statements on both backends: every column is text or a number.
UTILITY_TABLES = (
    "CREATE TABLE turn_decisions (id TEXT PRIMARY KEY, at TEXT NOT NULL, agent_id TEXT NOT NULL,"
    " user_id TEXT NOT NULL, session_id TEXT NOT NULL, turn INTEGER NOT NULL, bundle TEXT NOT NULL,"
    " disposition TEXT NOT NULL, failed_stage TEXT, error TEXT, body TEXT NOT NULL,"
    " total_ms REAL NOT NULL, hosted_calls INTEGER NOT NULL, hosted_tokens INTEGER NOT NULL,"
    " admitted INTEGER NOT NULL)",
    "CREATE INDEX turn_decisions_at ON turn_decisions(at)",
    "CREATE INDEX turn_decisions_user ON turn_decisions(user_id)",
    "CREATE INDEX turn_decisions_session ON turn_decisions(session_id)",
    "CREATE TABLE bundle_results (id TEXT PRIMARY KEY, bundle TEXT NOT NULL, at TEXT NOT NULL,"
    " passed INTEGER NOT NULL, evidence TEXT NOT NULL, recorded_by TEXT NOT NULL, components TEXT NOT NULL)",
    "CREATE INDEX bundle_results_bundle ON bundle_results(bundle, at)",
)


def _tenant_key(conn: sqlite3.Connection) -> None:
    """Nothing on SQLite, where a tenant is a file of its own; PostgreSQL adds a tenant key
    to every table at this version, and both backends keep one version sequence."""


def _record_sensitivity(conn: sqlite3.Connection) -> None:
    """Each record's sensitivity class from its tenant's memory pack, and the masked form
    of its content that the indexes and hosted models get instead (NULL: nothing masked).
    Records written before packs were acted on are in class ``none``, unmasked, as they
    were written; re-writing them is the way to classify them."""
    conn.execute("ALTER TABLE records ADD COLUMN sensitivity TEXT NOT NULL DEFAULT 'none'")
    conn.execute("ALTER TABLE records ADD COLUMN redacted_content TEXT")


def _sensitivity_label(conn: sqlite3.Connection) -> None:
    """The class the session extractor labelled a record with, beside the class it is in:
    a label an earlier class outranked used to be lost, so a pack that later dropped that
    class could not let the label decide. Records written before have NULL, which
    ``retold pack apply`` reads as it did before (see retold.pack_apply)."""
    conn.execute("ALTER TABLE records ADD COLUMN sensitivity_label TEXT")


# Bumped by the triggers below on every change to who may read what.
_ACCESS_BUMP = ("INSERT INTO store_meta(key, value) VALUES ('access_version', 1)"
                " ON CONFLICT(key) DO UPDATE SET value = value + 1")


def _access_version(conn: sqlite3.Connection) -> None:
    """A counter of changes to grants and memberships, kept by triggers, so a process may
    keep a principal's readable scopes until it moves (retold.policy.grants.ScopeCache).
    Triggers rather than the store's own methods: an import, an erasure or a hand-written
    statement changes these tables too, and a stale grant is a leak. A store without the
    row yet reads 0: nothing has changed since the triggers exist."""
    for table in ("grants", "scope_members"):
        for event in ("INSERT", "UPDATE", "DELETE"):
            conn.execute(f"CREATE TRIGGER {table}_{event.lower()}_access AFTER {event} ON {table}"
                         f" BEGIN {_ACCESS_BUMP}; END")


# The write path's scan of a subject's live records, most recently reinforced first
# (``active_for_subject``), read in the index's order: the scan stops at its cap instead of
# reading and sorting every record about the subject, which grows with the scope.
SUBJECT_RECENT_INDEX = ("CREATE INDEX records_subject_recent ON records(scope_kind, scope_id,"
                        " subject_entity_id, type, coalesce(last_reinforced_at, created_at) DESC, seq DESC)")


def _subject_recent_index(conn: sqlite3.Connection) -> None:
    """A subject's records by recency (``SUBJECT_RECENT_INDEX``). Before it, a write about
    someone with thousands of memories in the scope read all of them to keep the 64 newest:
    about 12 ms a write at 100K records, 10 times that at 1M."""
    conn.execute(SUBJECT_RECENT_INDEX)


def _validity_windows(conn: sqlite3.Connection) -> str | None:
    """Superseded records end where their successors start, as supersession now keeps
    them; see retold.store.validity_backfill."""
    return backfill_validity(conn).note()


# The extraction audit's queue (retold.store.audit): one row per sampled record, with a
# person's three answers once given. Its columns after the record's id, the same on both
# backends; PostgreSQL puts its tenant key in front (retold.store.postgres.schema).
AUDIT_COLUMNS = ("session_id TEXT NOT NULL, written_at TEXT NOT NULL, sampled_at TEXT NOT NULL,"
                 " rule TEXT NOT NULL CHECK (rule IN ('rate','weekly')),"
                 " verdict_true INTEGER CHECK (verdict_true IN (0, 1)),"
                 " verdict_atomic INTEGER CHECK (verdict_atomic IN (0, 1)),"
                 " verdict_keep INTEGER CHECK (verdict_keep IN (0, 1)),"
                 " answered_by TEXT, answered_at TEXT,"
                 # answered whole or not at all: three answers, who gave them and when
                 " CHECK ((answered_at IS NULL) = (answered_by IS NULL)"
                 " AND (answered_at IS NULL) = (verdict_true IS NULL)"
                 " AND (answered_at IS NULL) = (verdict_atomic IS NULL)"
                 " AND (answered_at IS NULL) = (verdict_keep IS NULL))")
AUDIT_INDEX = "CREATE INDEX audit_items_sampled ON audit_items(sampled_at)"


def _audit_items(conn: sqlite3.Connection) -> None:
    """The extraction audit's queue: records extraction wrote, sampled each week for a
    person to answer whether each is true, atomic and worth keeping. A table of its own
    rather than columns on the record: most records are never sampled, and an answer
    carries who gave it and when."""
    conn.execute("CREATE TABLE audit_items (record_id TEXT PRIMARY KEY REFERENCES records(id),"
                 f" {AUDIT_COLUMNS})")
    conn.execute(AUDIT_INDEX)


def _tenant_indexes(conn: sqlite3.Connection) -> None:
    """Nothing on SQLite, where a tenant is a file of its own; PostgreSQL puts the tenant
    key first in every index at this version, and both backends keep one version sequence."""


_RETURNED_ROWS = ("INSERT OR IGNORE INTO search_returned(record_id, search_id, rank)"
                  " SELECT j.value, NEW.id, j.key + 1")


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "initial schema", _initial_schema),
    Migration(2, "extraction stages", _extraction_stages),
    Migration(3, "embedding family", _embedding_family),
    Migration(4, "stemmed full-text index", _stemmed_fts),
    Migration(5, "scope members", _scope_members),
    Migration(6, "extraction attempts and leases", _extraction_attempts),
    Migration(7, "re-embed staging", _reembed_staging),
    Migration(8, "activation and profile blocks", _activation_and_profiles),
    Migration(9, "source reference index", _source_ref_index),
    Migration(10, "search decision column", _search_decision),
    Migration(11, "host trigger name", _host_trigger),
    Migration(12, "record pins", _record_pins),
    Migration(13, "pending embeddings", _pending_embeddings),
    Migration(14, "supersedes index", _supersedes_index),
    Migration(15, "returned records", _search_returned),
    Migration(16, "turn decisions and bundle results", _utility_tables),
    Migration(17, "tenant key", _tenant_key),
    Migration(18, "record sensitivity", _record_sensitivity),
    Migration(19, "access version", _access_version),
    Migration(20, "subject recency index", _subject_recent_index),
    Migration(21, "validity windows", _validity_windows),
    Migration(22, "extraction audit", _audit_items),
    Migration(23, "tenant-leading indexes", _tenant_indexes),
    Migration(24, "sensitivity label", _sensitivity_label),
)
LATEST = MIGRATIONS[-1].version


def _has_table(conn: sqlite3.Connection, name: str) -> bool:
    row = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
    ).fetchone()
    return row is not None


def current_version(conn: sqlite3.Connection) -> int:
    """The highest applied migration, 0 for a new file. Reads only."""
    if not _has_table(conn, "schema_migrations"):
        return 0
    row = conn.execute("SELECT max(version) FROM schema_migrations").fetchone()
    return int(row[0] or 0)


def check_not_newer(conn: sqlite3.Connection, path: str) -> int:
    """Refuse a file written by a newer schema than this code knows, before touching it."""
    version = current_version(conn)
    if version > LATEST:
        raise SchemaTooNewError(
            f"store {path} has schema version {version}, newer than this Retold "
            f"(knows up to {LATEST}); upgrade Retold to open it"
        )
    return version


def check_is_retold(conn: sqlite3.Connection, path: str, version: int) -> None:
    """Refuse another application's SQLite database: tables, but no migration of ours.

    ``schema_migrations`` alone is a store whose first migration did not finish."""
    if version:
        return
    row = conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name != 'schema_migrations'"
        " AND name NOT LIKE 'sqlite_%' LIMIT 1"
    ).fetchone()
    if row is not None:
        raise NotADatabaseError(
            f"{path} is a SQLite database of another application (it has a table {row[0]!r} but "
            "no Retold schema); refusing to add Retold's tables to it"
        )


def _unresolved(conn: sqlite3.Connection) -> int:
    if not _has_table(conn, "migration_issues"):
        return 0
    return int(conn.execute("SELECT count(*) FROM migration_issues").fetchone()[0])


def migrate(
    conn: sqlite3.Connection, path: str = "", migrations: tuple[Migration, ...] = MIGRATIONS
) -> MigrationReport:
    """Apply every pending migration; idempotent. ``conn`` must be in autocommit mode.

    With none pending it only reads; each pending one is checked again under the lock."""
    applied: list[int] = []
    notes: list[str] = []
    if check_not_newer(conn, path) >= migrations[-1].version:
        return MigrationReport((), current_version(conn), _unresolved(conn))
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        " version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
    )
    for migration in migrations:
        conn.execute("BEGIN IMMEDIATE")
        try:
            # Re-read under the write lock: another process may have applied it already.
            if check_not_newer(conn, path) >= migration.version:
                conn.execute("ROLLBACK")
                continue
            note = migration.apply(conn)
            conn.execute(
                "INSERT INTO schema_migrations(version, name, applied_at) VALUES (?, ?, ?)",
                (migration.version, migration.name, to_iso(SystemClock().now())),
            )
            conn.execute(f"PRAGMA user_version = {migration.version}")
            conn.execute("COMMIT")
        except BaseException:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass  # the original error is the one worth reporting
            raise
        applied.append(migration.version)
        if note:
            log.warning("store %s, migration %d: %s", path, migration.version, note)
            notes.append(f"migration {migration.version}: {note}")
    return MigrationReport(tuple(applied), current_version(conn), _unresolved(conn), tuple(notes))
