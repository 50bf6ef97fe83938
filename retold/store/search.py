"""The read path's queries: the eligible set, candidate generators and the search log.

:meth:`SearchMixin.eligible_ids` is the hard filter every search starts from. The FTS5
and entity queries apply that restriction before their limit, so rows the caller may not
read can never crowd readable rows out of a generator's top k.
Two equivalent plans do that; :data:`ELIGIBLE_TEMP_TABLE_MAX` picks one by the size of
the eligible set:

* small sets are loaded into a TEMP table of seqs and joined, with ``LIMIT`` in SQL;
* large sets skip the table load (tens of thousands of inserts per search) and instead
  walk the query's ordered cursor, keeping rows whose seq a numpy lookup table marks
  eligible, until ``limit`` are kept.

TEMP tables belong to this connection and are filled, read and emptied within one hold
of the store lock, so threads sharing the connection never see each other's rows, and
writing them takes no lock on the store file.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from retold.clock import from_iso, to_iso
from retold.errors import StoreError
from retold.models import ACTIVE_STATUSES, RECORD_TYPES, Scope
from retold.store.base import StoreBase, chunks, marks
from retold.store.eligible import EligibleSet

__all__ = ["ELIGIBLE_TEMP_TABLE_MAX", "SEARCH_LOG_COLUMNS", "FtsRow", "RecordMeta", "SearchMixin"]

SEARCH_LOG_COLUMNS = (
    "id", "at", "agent_id", "user_id", "session_id", "trigger", "request", "context",
    "rewrite_status", "rewritten_queries", "readable_scopes", "dense", "lexical", "entity",
    "fused", "freshness", "gated_out", "deduped_out", "reranked", "reranked_out",
    "rerank_status", "rerank_error", "budget_out", "returned", "explanations", "config_flags",
    "warm", "timings_ms", "decision",
)

# Eligible sets up to this size go through the TEMP table; larger ones are streamed.
# Measured on a 50K-record store: the table costs about 0.25 ms per 1K eligible seqs to
# load, then bm25 is computed and sorted only for eligible matches; streaming costs
# nothing up front but scores and sorts every match (about 17 ms for a query matching
# 22K rows, 0.3 ms for a rare term). 20K is where the worst cases of the two cross.
ELIGIBLE_TEMP_TABLE_MAX = 20_000

# Column weights: the leading 0.0 skips the UNINDEXED record_id column, then content 1,
# subject 2, aliases 3 (a name match says more than a word in the text). SQLite's bm25 is
# negative, and lower is better.
_BM25 = "bm25(records_fts, 0.0, 1.0, 2.0, 3.0)"


@dataclass(frozen=True)
class RecordMeta:
    """The few columns the early search stages need (freshness, confidence, gate, the log)."""

    id: str
    type: str
    source_kind: str
    status: str
    event_at: datetime
    confidence: float
    valid_from: datetime | None = None
    valid_until: datetime | None = None


@dataclass(frozen=True)
class FtsRow:
    """One FTS5 match: the record, its seq, its bm25 (lower is better) and its fields."""

    record_id: str
    seq: int
    bm25: float
    content: str
    subject: str
    aliases: str


class SearchMixin(StoreBase):
    """The eligible set, lexical and entity candidate queries, and ``search_log``."""

    _eligible_token: int | None = None  # which EligibleSet temp.retold_eligible_seq holds
    _fts_rows: tuple[int, int] = (-1, 0)  # (records_version, rows of records_fts) last read
    _fts_vocab = False  # temp.retold_fts_vocab exists on this connection

    def eligible_ids(
        self,
        scopes: Sequence[Scope],
        types: Sequence[str] | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        include_history: bool = False,
        now: datetime | None = None,
        as_of: datetime | None = None,
    ) -> EligibleSet:
        """The hard filter as one query over a covering index.

        Readable scope, lifecycle status, expiry (``expires_at < now`` is ineligible),
        type and the ``event_at`` window. ``include_history`` admits superseded
        and expired rows; deleted rows are never eligible.

        ``as_of`` keeps what was valid then: a record whose validity window (from
        ``valid_from``, else ``event_at``, to ``valid_until``) covers it, superseded ones
        included when their window has an end (:mod:`retold.policy.validity`); expired
        rows only with ``include_history``. Expiry is retention, not validity, so it
        still applies to active rows as it does without ``as_of``.
        """
        if not scopes:
            return EligibleSet([], np.empty(0, dtype=np.int64), records_version=self.records_version())
        statuses = (*ACTIVE_STATUSES, "superseded", "expired") if include_history else ACTIVE_STATUSES
        if as_of is not None and not include_history:
            statuses = (*ACTIVE_STATUSES, "superseded")
        where = f"scope_kind = ? AND scope_id = ? AND status IN ({marks(statuses)})"
        tail: list[Any] = list(statuses)
        # Unary + keeps the planner on records_scope: scope is the selective, security
        # relevant filter, and without ANALYZE statistics SQLite would pick records_event.
        if not include_history:
            # A superseded row's expiry was never swept: it left the live set another way.
            lapsed = "status = 'superseded' OR " if as_of is not None else ""
            where += f" AND ({lapsed}expires_at IS NULL OR expires_at >= ?)"
            stamp = to_iso(now or self.clock.now())
            tail.append(stamp)
        if as_of is not None:
            moment = to_iso(as_of)
            where += (" AND coalesce(valid_from, event_at) <= ? AND (valid_until IS NULL OR valid_until > ?)"
                      " AND (status != 'superseded' OR valid_until IS NOT NULL)")
            tail += [moment, moment]
        if types:
            unknown = set(types) - set(RECORD_TYPES)
            if unknown:
                raise ValueError(f"unknown record types {sorted(unknown)}")
            where += f" AND {self._NOT_INDEXED}type IN ({marks(types)})"
            tail += list(types)
        if since is not None:
            where += f" AND {self._NOT_INDEXED}event_at >= ?"
            tail.append(to_iso(since))
        if until is not None:
            where += f" AND {self._NOT_INDEXED}event_at <= ?"
            tail.append(to_iso(until))
        # One branch per scope, each a range of the covering records_scope index; UNION ALL
        # is cheaper than SQLite's multi-index OR plan and scopes never overlap.
        sql = " UNION ALL ".join([f"SELECT id, seq, expires_at FROM records WHERE {where}"] * len(scopes))
        params: list[Any] = []
        for scope in scopes:
            params += [scope.kind, scope.id, *tail]
        version, rows = self._rows_with_version(sql, params)
        with self._one_view() as conn:
            self._scope_indexes_agree(conn, scopes, statuses)
        seqs = np.fromiter((row[1] for row in rows), dtype=np.int64, count=len(rows))
        expiries = [row[2] for row in rows if row[2] is not None]
        if as_of is not None and not include_history:  # a superseded row's past expiry changes nothing
            expiries = [e for e in expiries if e >= stamp]
        valid_until = from_iso(min(expiries)) if expiries and not include_history else None
        return EligibleSet([row[0] for row in rows], seqs, records_version=version,
                           valid_until=valid_until)

    def record_meta(self, ids: Sequence[str]) -> dict[str, RecordMeta]:
        """Type, source kind, status, event time, confidence and validity window of each
        record, by id."""
        out: dict[str, RecordMeta] = {}
        with self._lock:
            for chunk in chunks(ids):
                for rid, type_, source, status, event_at, confidence, since, until in self._conn.execute(
                    "SELECT id, type, source_kind, status, event_at, confidence, valid_from, valid_until"
                    f" FROM records WHERE id IN ({marks(chunk)})", chunk,
                ):
                    out[rid] = RecordMeta(rid, type_, source, status, from_iso(event_at), float(confidence),
                                          from_iso(since) if since else None,
                                          from_iso(until) if until else None)
        return out

    def records_about_mentioned(
        self, record_ids: Sequence[str], limit: int, broad: int
    ) -> list[tuple[str, str]]:
        """``(record_id, via)`` of active records about an entity that
        record ``via`` (one of ``record_ids``) mentions, newest first, at most ``limit``.

        The second hop of a question about someone's relative: "Ayla's brother is Quentin"
        mentions Quentin, and "Quentin works as a firefighter" is about him. An entity with
        ``broad`` links or more (the user, a large account) is no hop: its records are not
        about one relation, and reading them all would slow every search that meets it;
        the count stops at ``broad``. Eligibility is the caller's to check, as for every
        other candidate source.

        The sources and their hops are materialised first, so the few source records lead
        and the records are then read by key. Left to itself, PostgreSQL planned the query
        from its ``ORDER BY``: it walked the tenant's active records newest first and probed
        each for a link to the sources, a read of the whole tenant for a handful of links
        (1.1 s a search in a 100K-record scope).
        """
        wanted = list(dict.fromkeys(record_ids))
        if not wanted or limit <= 0:
            return []
        with self._lock:
            rows = self._conn.execute(
                "WITH src AS MATERIALIZED (SELECT s.record_id AS via, s.entity_id FROM record_entities s"
                f" WHERE s.role = 'mentions' AND s.record_id IN ({marks(wanted)})"
                " AND (SELECT count(*) FROM (SELECT 1 FROM record_entities c"
                "  WHERE c.entity_id = s.entity_id LIMIT ?) AS n) < ?),"
                " hop AS MATERIALIZED (SELECT h.record_id, src.via FROM src"
                " JOIN record_entities h ON h.entity_id = src.entity_id AND h.role = 'about')"
                " SELECT hop.record_id, hop.via FROM hop JOIN records r ON r.id = hop.record_id"
                f" WHERE r.status IN ({marks(ACTIVE_STATUSES)})"
                " ORDER BY r.event_at DESC, hop.record_id, hop.via LIMIT ?",
                [*wanted, broad, broad, *ACTIVE_STATUSES, limit],
            ).fetchall()
        # A record holds one link per entity, so it is never both the mention and the hop.
        return [(rid, via) for rid, via in rows]

    # -- search_log: one row per search ------------------------------------------------

    @contextmanager
    def _search_log_writes(self) -> Iterator[sqlite3.Connection]:
        """The transaction search-log rows are inserted in; it excludes erasures (here by
        the store's one write lock)."""
        with self.atomic() as conn:
            yield conn

    def insert_search_logs(self, rows: Sequence[Mapping[str, Any]]) -> int:
        """Insert complete rows in one transaction; return how many were written.

        JSON columns arrive already serialised. A row whose user or session was erased at
        or after the moment its search started is left out: rows may reach the store late
        (the background writer of this or another process), and a late row must not bring
        back what an erase removed (docs/decisions.md, "Search-log rows are written off
        the search path").
        """
        for row in rows:
            missing = [c for c in SEARCH_LOG_COLUMNS if c not in row]
            if missing:
                raise ValueError(f"search_log row lacks {', '.join(missing)}")
        if not rows:
            return 0
        oldest = min(str(row["at"]) for row in rows)
        with self._search_log_writes() as conn:
            # Read under the lock erasures take, so none can commit between this and the insert.
            erased: dict[tuple[str, str], str] = {}
            for kind, at, user_id, session_id in conn.execute(
                "SELECT kind, at, json_extract(payload, '$.user_id'),"
                " json_extract(payload, '$.session_id') FROM events"
                " WHERE kind IN ('user.erased', 'session.erased') AND at >= ?", (oldest,),
            ):
                key = ("user", user_id) if kind == "user.erased" else ("session", session_id)
                if key[1] is not None and at > erased.get(key, ""):
                    erased[key] = at
            kept = [row for row in rows
                    if str(row["at"]) > erased.get(("user", row["user_id"]), "")
                    and str(row["at"]) > erased.get(("session", row["session_id"]), "")]
            conn.executemany(
                f"INSERT INTO search_log({', '.join(SEARCH_LOG_COLUMNS)})"
                f" VALUES ({marks(SEARCH_LOG_COLUMNS)})",
                [[row[c] for c in SEARCH_LOG_COLUMNS] for row in kept],
            )
        return len(kept)

    def search_log_row(self, search_id: str) -> dict[str, Any] | None:
        """One logged search as a column -> value dict (JSON left as text)."""
        rows = self._search_logs("WHERE id = ?", (search_id,))
        return rows[0] if rows else None

    def search_log_rows(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Logged searches, oldest first (at most ``limit``)."""
        return self._search_logs("", (), limit)

    def latest_search_flags(self) -> tuple[str, dict[str, Any]] | None:
        """``(trigger, config_flags)`` of the most recent logged search, or None."""
        with self._lock:
            row = self._conn.execute(
                "SELECT trigger, config_flags FROM search_log ORDER BY at DESC, id DESC LIMIT 1"
            ).fetchone()
        if row is None:
            return None
        flags = json.loads(row[1]) if row[1] and row[1].startswith("{") else {}
        return str(row[0]), flags

    def _search_logs(
        self, where: str, params: tuple[Any, ...], limit: int | None = None
    ) -> list[dict[str, Any]]:
        sql = f"SELECT {', '.join(SEARCH_LOG_COLUMNS)} FROM search_log {where} ORDER BY at, id"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        with self._lock:
            rows = self._conn.execute(sql, params).fetchall()
        return [dict(zip(SEARCH_LOG_COLUMNS, row, strict=True)) for row in rows]

    # -- candidate generators -----------------------------------------------------------

    @property
    def can_keep_temp_tables(self) -> bool:
        """True outside a caller's write transaction (a snapshot read is fine)."""
        return self._depth == 0

    def fts_candidates(
        self,
        match: str,
        eligible: EligibleSet,
        limit: int,
        *,
        temp_table_max: int | None = None,
    ) -> list[FtsRow]:
        """The best ``limit`` eligible rows for an FTS5 ``MATCH`` expression, by bm25.

        The eligible restriction comes before the limit: up to
        ``temp_table_max`` eligible seqs (default :data:`ELIGIBLE_TEMP_TABLE_MAX`) are
        loaded into a TEMP table joined on ``records_fts.rowid`` (which is
        ``records.seq``) with ``LIMIT`` in SQL; above it the bm25-ordered match cursor is
        streamed and filtered through a boolean lookup table built from
        ``eligible.seqs``, with the same result and no table load. An empty or blank
        ``match`` returns ``[]``; an invalid FTS5 expression raises StoreError.
        """
        if not match.strip() or limit <= 0 or len(eligible) == 0:
            return []
        threshold = ELIGIBLE_TEMP_TABLE_MAX if temp_table_max is None else temp_table_max
        try:
            with self.snapshot() as conn:
                if len(eligible) <= threshold:
                    with _eligible_table(self, conn, eligible):
                        # CROSS JOIN keeps FTS5 as the outer loop: one MATCH evaluation
                        # probing the table's primary key, never one MATCH per eligible seq.
                        rows = conn.execute(
                            f"SELECT records_fts.rowid, {_BM25} AS score FROM records_fts"
                            " CROSS JOIN temp.retold_eligible_seq e ON e.seq = records_fts.rowid"
                            " WHERE records_fts MATCH ? ORDER BY score LIMIT ?",
                            (match, limit),
                        ).fetchall()
                else:
                    lookup = _lookup(eligible)
                    cursor = conn.execute(
                        f"SELECT rowid, {_BM25} AS score FROM records_fts"
                        " WHERE records_fts MATCH ? ORDER BY score",
                        (match,),
                    )
                    rows = _take_eligible(cursor, lookup, limit)
                    cursor.close()
                fields = _fts_fields(conn, [int(seq) for seq, _ in rows])
        except sqlite3.OperationalError as exc:
            if "fts5" not in str(exc):
                raise
            raise StoreError(f"invalid FTS5 query {match!r}: {exc}") from exc
        out: list[FtsRow] = []
        for seq, score in rows:
            record_id, content, subject, aliases = fields[int(seq)]
            out.append(FtsRow(record_id, int(seq), float(score), content, subject, aliases))
        return out

    def fts_document_counts(self, tokens: Sequence[str], *, min_rows: int = 0) -> tuple[int, dict[str, int]]:
        """How many rows the lexical index holds, and in how many of them each of these
        indexed tokens (stems, as the index stores them) occurs; a token in none is absent.
        Below ``min_rows`` rows no token is looked up (the caller needs none).

        The row count is read once per ``records_version``, from FTS5's docsize table (one
        short row per indexed row, so counting it reads a few pages where counting the
        virtual table reads every row's text); the counts come from FTS5's own vocabulary
        (one lookup a token), never from a scan of the matches."""
        if not tokens:
            return 0, {}
        with self.snapshot() as conn:
            version = self.read_version(conn)
            if self._fts_rows[0] != version:
                rows = int(conn.execute("SELECT count(*) FROM records_fts_docsize").fetchone()[0])
                self._fts_rows = (version, rows)
            if self._fts_rows[1] < min_rows:
                return self._fts_rows[1], {}
            if not self._fts_vocab:  # a temp table lives as long as this connection
                conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.retold_fts_vocab"
                             " USING fts5vocab(main, records_fts, row)")
                self._fts_vocab = True
            counts = {str(term): int(doc) for term, doc in conn.execute(
                f"SELECT term, doc FROM temp.retold_fts_vocab WHERE term IN ({marks(tokens)})", list(tokens))}
        return self._fts_rows[1], counts

    def count_fts_matches(self, match: str) -> int:
        """How many FTS rows an FTS5 ``MATCH`` expression matches, before eligibility
        (how broad a query's terms are)."""
        with self._lock:
            return int(self._conn.execute(
                "SELECT count(*) FROM records_fts WHERE records_fts MATCH ?", (match,)).fetchone()[0])

    def records_for_entities(
        self,
        entity_ids: Sequence[str],
        eligible: EligibleSet,
        limit: int,
        *,
        temp_table_max: int | None = None,
    ) -> list[tuple[str, str]]:
        """``(record_id, entity_id)`` of eligible records linked to these entities, best first.

        ``about`` links rank before ``mentions``, then the most recent ``event_at``;
        a record linked to several of the entities appears once, with its best link.
        The entity ids travel through a TEMP table, never one bound parameter each
        (a long query's n-grams would pass SQLite's bound-parameter limit), and the
        eligible restriction comes before the limit, by the same two plans as
        :meth:`fts_candidates`.
        """
        wanted = list(dict.fromkeys(entity_id for entity_id in entity_ids if entity_id))
        if not wanted or limit <= 0 or len(eligible) == 0:
            return []
        threshold = ELIGIBLE_TEMP_TABLE_MAX if temp_table_max is None else temp_table_max
        small = len(eligible) <= threshold
        # CROSS JOIN fixes the plan: probe -> record_entities_by_entity -> records by id,
        # instead of scanning every link in record order. A record's links share its
        # event_at, so the first row of each record in this order is its best link.
        sql = (
            "SELECT re.record_id, re.entity_id, r.seq FROM temp.retold_entity_probe p"
            " CROSS JOIN record_entities re ON re.entity_id = p.entity_id"
            " CROSS JOIN records r ON r.id = re.record_id"
            + (" CROSS JOIN temp.retold_eligible_seq e ON e.seq = r.seq" if small else "")
            + " ORDER BY re.role = 'mentions', r.event_at DESC, re.record_id DESC, re.entity_id"
        )
        with self.snapshot() as conn:
            conn.execute(
                "CREATE TEMP TABLE IF NOT EXISTS retold_entity_probe(entity_id TEXT PRIMARY KEY)"
            )
            conn.execute("DELETE FROM temp.retold_entity_probe")
            try:
                conn.executemany(
                    "INSERT INTO temp.retold_entity_probe(entity_id) VALUES (?)",
                    ((entity_id,) for entity_id in wanted),
                )
                if small:
                    with _eligible_table(self, conn, eligible):
                        # A record has at most one link per entity, so this many rows
                        # always hold ``limit`` distinct records when there are that many.
                        cursor = conn.execute(sql + " LIMIT ?", (limit * len(wanted),))
                        rows = take_links(cursor, None, limit)
                else:
                    cursor = conn.execute(sql)
                    rows = take_links(cursor, _lookup(eligible), limit)
                cursor.close()
            finally:
                conn.execute("DELETE FROM temp.retold_entity_probe")
        return [(record_id, entity_id) for record_id, entity_id, _ in rows]


@contextmanager
def _eligible_table(store: SearchMixin, conn: sqlite3.Connection, eligible: EligibleSet) -> Iterator[None]:
    """Have ``temp.retold_eligible_seq`` hold exactly ``eligible`` for the body.

    Outside a caller's transaction the table is kept after the body, tagged with the set's
    token, so the next search over the same (cached) eligible set skips the load, which
    dominates lexical search at 50K records. Inside a caller's transaction, whose rollback
    would silently empty it, the table is loaded and emptied every time.
    """
    keep = store.can_keep_temp_tables
    if not (keep and store._eligible_token == eligible.token):
        conn.execute("CREATE TEMP TABLE IF NOT EXISTS retold_eligible_seq(seq INTEGER PRIMARY KEY)")
        conn.execute("DELETE FROM temp.retold_eligible_seq")
        store._eligible_token = None
        # One statement parsing a JSON array in C loads 20K seqs in about 5 ms, 2.5x
        # faster than executemany (JSON1 is already required by the store).
        conn.execute(
            "INSERT OR IGNORE INTO temp.retold_eligible_seq(seq) SELECT value FROM json_each(?)",
            ("[" + ",".join(map(str, eligible.seqs.tolist())) + "]",),
        )
    try:
        yield
    finally:
        if keep:
            store._eligible_token = eligible.token
        else:
            conn.execute("DELETE FROM temp.retold_eligible_seq")


def _lookup(eligible: EligibleSet) -> np.ndarray:
    """A boolean table indexed by seq: True where the record is eligible."""
    seqs = eligible.seqs
    table = np.zeros(int(seqs.max()) + 1 if seqs.size else 0, dtype=bool)
    table[seqs] = True
    return table


def _eligible(lookup: np.ndarray, seq: int) -> bool:
    return 0 <= seq < lookup.shape[0] and bool(lookup[seq])


def _take_eligible(
    cursor: sqlite3.Cursor, lookup: np.ndarray, limit: int
) -> list[tuple[int, float]]:
    """The first ``limit`` ``(seq, score)`` rows of an ordered cursor that are eligible."""
    kept: list[tuple[int, float]] = []
    for seq, score in cursor:
        if _eligible(lookup, seq):
            kept.append((seq, score))
            if len(kept) == limit:
                break
    return kept


def take_links(
    cursor: sqlite3.Cursor, lookup: np.ndarray | None, limit: int
) -> list[tuple[str, str, int]]:
    """The first ``limit`` distinct records of an ordered ``(record_id, entity_id, seq)``
    cursor, each with its first (best) link; with a ``lookup``, eligible ones only."""
    kept: list[tuple[str, str, int]] = []
    seen: set[str] = set()
    for record_id, entity_id, seq in cursor:
        if record_id in seen or (lookup is not None and not _eligible(lookup, seq)):
            continue
        seen.add(record_id)
        kept.append((record_id, entity_id, seq))
        if len(kept) == limit:
            break
    return kept


def _fts_fields(conn: sqlite3.Connection, seqs: list[int]) -> dict[int, tuple[str, str, str, str]]:
    """``record_id, content, subject, aliases`` of the kept FTS rows, by seq.

    Read after ranking so the sort above carries two numbers per match, not every
    matching record's text; chunked to stay under the bound-parameter limit.
    """
    out: dict[int, tuple[str, str, str, str]] = {}
    for start in range(0, len(seqs), 500):
        chunk = seqs[start : start + 500]
        for seq, record_id, content, subject, aliases in conn.execute(
            "SELECT rowid, record_id, content, subject, aliases FROM records_fts"
            f" WHERE rowid IN ({marks(chunk)})",
            chunk,
        ):
            out[int(seq)] = (record_id, content, subject, aliases)
    return out
