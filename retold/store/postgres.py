"""PgStore: the store on a PostgreSQL database that agents and workers on many hosts share.

It is :class:`~retold.store.Store` with the few parts that differ between the dialects
replaced by name: how the connection opens and migrates, how a write transaction takes
the store's write lock, how ``records_version`` is bumped, and the lexical and entity
candidate queries (``tsvector`` instead of FTS5). Every other query is the store's shared
SQL, run through :class:`~retold.store.pg_connection.PgConnection`. See docs/decisions.md,
"PostgreSQL as a shared store".
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from retold.errors import StoreError
from retold.store.eligible import EligibleSet
from retold.store.entities import ENTITY_COLUMNS
from retold.store.failures import StoreLock
from retold.store.fts import write_fts_rows
from retold.store.migrations import MigrationReport
from retold.store.pg_connection import PgConnection
from retold.store.pg_schema import migrate as pg_migrate
from retold.store.search import FtsRow, take_links
from retold.store.store import Store
from retold.store.url import conninfo, redact

__all__ = ["WRITE_LOCK", "PgStore"]

# The transaction-scoped advisory lock every write transaction takes first: writers queue
# on it as SQLite's writers queue on BEGIN IMMEDIATE, so a decide-and-write (read the
# current truth, then supersede it) never interleaves with another writer's.
WRITE_LOCK = 0x7265746F6C64  # "retold"
# ts_rank weights for labels {D, C, B, A}: content 1, subject 2, aliases 3, tags 1, the
# ratios of the FTS5 column weights (docs/decisions.md, "PostgreSQL as a shared store").
_WEIGHTS = "'{0.25, 0.5, 0.75, 0.25}'"
_PHRASE = re.compile(r'"([^"]*)"')
# What an erase blanks or deletes rows of, and what the retention sweeps do.
_ERASED_TABLES = ("records", "records_fts", "embeddings", "reembed_vectors", "events", "session_turns",
                  "search_log", "extraction_stages", "entities", "entity_aliases", "record_entities",
                  "profile_blocks", "record_activation", "scope_members")
_RETAINED_TABLES = ("session_turns", "extraction_stages", "search_log", "events")


_ONE_PHRASE = ("(phraseto_tsquery('retold_stem', retold_words(?))"
               " || phraseto_tsquery('retold_exact', retold_words(?)))")
# Rows a phrase's document frequency is counted up to: past it the phrase is common and
# its weight is near its floor anyway, and counting on would cost a scan per search.
_DF_CAP = 5000
# BM25's term-frequency saturation and length normalisation, FTS5's defaults. A phrase's
# term frequency is its ts_rank without normalisation scaled so that one occurrence in
# content counts 1 (ts_rank gives weight / 1.645 for a single occurrence; content's
# weight is 0.25), an alias 3: saturation then keeps a name in the aliases column from
# outweighing the rarer word the question asks about, as it does under FTS5's bm25.
_K1, _B = 1.2, 0.75
_TF_SCALE = 1.6449 / 0.25


@lru_cache(maxsize=64)
def _tsquery(terms: int) -> str:
    """A tsquery OR-ing ``terms`` phrases, each stemmed or exactly as written."""
    return " || ".join([_ONE_PHRASE] * terms)


@lru_cache(maxsize=64)
def _idf_phrases(terms: int) -> str:
    """``terms`` phrase queries with BM25's inverse document frequency, as a derived table
    ``p(query, idf)``. The row count is the planner's estimate (exact below autovacuum's
    first ANALYZE, when the table is small enough to count)."""
    rows = ", ".join(f"({_ONE_PHRASE})" for _ in range(terms))
    return (
        "(SELECT v.query, ln(1 + (t.n - d.n + 0.5) / (d.n + 0.5)) AS idf"
        f" FROM (VALUES {rows}) AS v(query)"
        " CROSS JOIN (SELECT CASE WHEN c.reltuples > 0 THEN c.reltuples::float8"
        " ELSE (SELECT count(*) FROM records_fts)::float8 END AS n"
        " FROM pg_class c WHERE c.oid = 'records_fts'::regclass) t"
        " CROSS JOIN LATERAL (SELECT count(*)::float8 AS n FROM (SELECT 1 FROM records_fts g"
        f" WHERE g.document @@ v.query LIMIT {_DF_CAP}) m) d)"
    )


def _phrases(match: str) -> list[str]:
    """The quoted phrases of the FTS5 expression the retriever builds (``"a" OR "b c"``)."""
    return [p for p in dict.fromkeys(_PHRASE.findall(match)) if p.strip()]


class PgStore(Store):
    """The store on PostgreSQL: one connection per process, shared by its threads."""

    backend = "postgres"
    _BEGIN_READ = "BEGIN ISOLATION LEVEL REPEATABLE READ"
    _BUMP_VERSION = ("UPDATE store_meta SET value = (value::bigint + 1)::text"
                     " WHERE key = 'records_version' RETURNING value")
    _COUNTED_TRUE = "json_extract(payload, '$.counted') = 'true'"
    _NOT_INDEXED = ""

    def _open(self, migrate_schema: bool) -> None:
        import psycopg

        self._driver_errors = (psycopg.Error,)
        self._integrity_errors = (psycopg.IntegrityError,)
        self.read_only = self._read_only_asked
        self.path = redact(self._target)
        self._lock = StoreLock(self.path, self.busy_timeout_seconds,
                               "store.read_only is set" if self.read_only else None)
        info = conninfo(self._target, read_only=self.read_only)
        try:
            self._conn = PgConnection(info, connect_timeout=self.busy_timeout_seconds)
        except psycopg.OperationalError as exc:
            raise StoreError(f"cannot connect to the store {self.path}: {exc}") from exc
        try:
            # A writer waits for the write lock at most this long, as busy_timeout on SQLite.
            self._conn.execute(f"SET lock_timeout = '{int(self.busy_timeout_seconds * 1000)}ms'")
            self.migration_report = (pg_migrate(self._conn, self.path)
                                     if migrate_schema and not self.read_only else None)
        except BaseException:
            self._conn.close()
            raise

    def _begin_write(self) -> None:
        self._conn.execute("BEGIN")
        try:
            self._conn.execute("SELECT pg_advisory_xact_lock(?)", (WRITE_LOCK,))
        except BaseException:
            self._conn.execute("ROLLBACK")  # a lock wait that timed out leaves nothing open
            raise

    def migrate(self) -> MigrationReport:
        with self._lock:
            self.migration_report = pg_migrate(self._conn, self.path)
            return self.migration_report

    def _write_fts(self, conn: Any, record_ids: Iterable[str]) -> None:
        write_fts_rows(conn, record_ids, with_tags=True)

    # -- lexical and entity candidates -------------------------------------------------

    def fts_candidates(
        self, match: str, eligible: EligibleSet, limit: int, *, temp_table_max: int | None = None,
    ) -> list[FtsRow]:
        """The best ``limit`` eligible rows for the retriever's phrase expression, scored
        as BM25 scores them: each matched phrase's term frequency (from ``ts_rank`` over
        the weighted document, so the column counts), saturated and normalised by the
        document's length against the matched rows' mean, times the phrase's inverse
        document frequency; summed and negated so lower is better as with FTS5's bm25.
        Without IDF and saturation a name most records carry (a speaker's) outweighs the
        rare word the question is about. The eligible restriction is part of the query,
        before the limit."""
        phrases = _phrases(match)
        if not phrases or limit <= 0 or len(eligible) == 0:
            return []
        params: list[Any] = [p for phrase in phrases for p in (phrase, phrase)]
        with self.snapshot() as conn:
            rows = conn.execute(
                f"WITH p AS MATERIALIZED {_idf_phrases(len(phrases))}"
                " SELECT m.rowid, -(SELECT sum(p.idf * t.tf * (1 + ?) / (t.tf + ? * (1 - ? + ?"
                " * length(m.document) / m.avglen)))"
                f" FROM p CROSS JOIN LATERAL (SELECT ts_rank({_WEIGHTS}, m.document, p.query, 0)"
                f" * {_TF_SCALE} AS tf) t WHERE m.document @@ p.query) AS score,"
                " m.record_id, m.content, m.subject, m.aliases"
                " FROM (SELECT f.*, greatest(avg(length(f.document)) OVER (), 1) AS avglen"
                f" FROM records_fts f, (SELECT {_tsquery(len(phrases))} AS query) q"
                " WHERE f.document @@ q.query AND f.rowid = ANY(?)) m"
                " ORDER BY score, m.rowid LIMIT ?",
                [*params, _K1, _K1, _B, _B, *params, eligible.seqs.tolist(), limit]).fetchall()
        return [FtsRow(rid, int(seq), float(score), content, subject, aliases)
                for seq, score, rid, content, subject, aliases in rows]

    def count_fts_matches(self, match: str) -> int:
        phrases = _phrases(match)
        if not phrases:
            return 0
        params = [p for phrase in phrases for p in (phrase, phrase)]
        with self._lock:
            return int(self._conn.execute(
                f"SELECT count(*) FROM records_fts WHERE document @@ ({_tsquery(len(phrases))})",
                params).fetchone()[0])

    def records_for_entities(
        self, entity_ids: Sequence[str], eligible: EligibleSet, limit: int, *,
        temp_table_max: int | None = None,
    ) -> list[tuple[str, str]]:
        """As on SQLite: eligible records linked to these entities, ``about`` links
        first, then the newest ``event_at``; each record once, with its best link. The
        ids travel as two array parameters."""
        wanted = list(dict.fromkeys(entity_id for entity_id in entity_ids if entity_id))
        if not wanted or limit <= 0 or len(eligible) == 0:
            return []
        with self.snapshot() as conn:
            cursor = conn.execute(
                "SELECT re.record_id, re.entity_id, r.seq FROM record_entities re"
                " JOIN records r ON r.id = re.record_id"
                " WHERE re.entity_id = ANY(?) AND r.seq = ANY(?)"
                " ORDER BY re.role = 'mentions', r.event_at DESC, re.record_id DESC, re.entity_id"
                " LIMIT ?", (wanted, eligible.seqs.tolist(), limit * len(wanted)))
            rows = take_links(cursor, None, limit)
        return [(record_id, entity_id) for record_id, entity_id, _ in rows]

    def _alias_probe(self, conn: Any, wanted: list[str], tail: str, args: list[str]) -> list[tuple[str, ...]]:
        # No TEMP table: a read-only PostgreSQL transaction may not create one.
        return list(conn.execute(
            f"SELECT p.alias_norm, {ENTITY_COLUMNS} FROM unnest(?::text[]) AS p(alias_norm){tail}",
            [wanted, *args]).fetchall())

    # -- erasure's and retention's vacuum ------------------------------------------------

    def compact(self) -> bool:
        """VACUUM the tables an erase touches, so their dead row versions (which still
        hold the erased text) are removed now rather than by autovacuum later. WAL
        segments and backups keep what they held until they are recycled; see README
        "PostgreSQL"."""
        return self._vacuum(_ERASED_TABLES)

    def truncate_wal(self) -> bool:
        """The server recycles its own WAL. What a client can remove after the retention
        sweeps is the dead row versions they left, which still hold the removed text, so
        the tables those sweeps delete from or rewrite are vacuumed."""
        return self._vacuum(_RETAINED_TABLES)

    def _vacuum(self, tables: tuple[str, ...]) -> bool:
        with self._lock:
            if self._depth:
                raise StoreError("VACUUM cannot run inside a transaction")
            for table in tables:
                self._conn.execute(f"VACUUM {table}")
            return True

    def backup_to(self, path: str | Path) -> None:
        raise StoreError("a PostgreSQL store is not saved as a snapshot file: use pg_dump (README "
                         "\"PostgreSQL\")")

    def restore_from(self, path: str | Path) -> None:
        raise StoreError("a PostgreSQL store is not loaded from a snapshot file: use pg_restore (README "
                         "\"PostgreSQL\")")

    def set_secure_delete(self, on: bool) -> None:
        """No such switch on PostgreSQL: :meth:`compact` removes dead row versions."""

