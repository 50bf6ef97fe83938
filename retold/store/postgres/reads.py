"""The store's hot reads on PostgreSQL, each one statement.

On SQLite a statement costs microseconds, so a read may take several (the rows, then
their links; a version, then the rows) inside one WAL snapshot. On PostgreSQL every
statement is a round trip to the server, and a snapshot adds a ``BEGIN`` and a
``COMMIT``, so the reads a search and a write decision make are written here as one
statement each, which is consistent on its own: the version is read in the same
statement as the rows it describes, links and aliases come back as array columns, and
the candidate queries take the eligible set as one array parameter. See
docs/decisions.md, "PostgreSQL reads are one statement each".
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

from retold.models import Scope
from retold.store.eligible import EligibleSet
from retold.store.entities import ENTITY_COLUMNS
from retold.store.search import FtsRow, take_links
from retold.store.store import Store

__all__ = ["PgReads"]

# ts_rank weights for labels {D, C, B, A}: content 1, subject 2, aliases 3, tags 1, the
# ratios of the FTS5 column weights (docs/decisions.md, "PostgreSQL as a shared store").
_WEIGHTS = "'{0.25, 0.5, 0.75, 0.25}'"
_PHRASE = re.compile(r'"([^"]*)"')


_ONE_PHRASE = ("(phraseto_tsquery('retold_stem', retold_words(?))"
               " || phraseto_tsquery('retold_exact', retold_words(?)))")
# The distinct lexemes of that query per word of the phrase (see _idf_phrases).
_ITEMS = ("length(to_tsvector('retold_stem', retold_words(?))"
          " || to_tsvector('retold_exact', retold_words(?)))::float8"
          " / greatest(length(to_tsvector('retold_exact', retold_words(?))), 1)")
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
    """A subquery ``q(query)``: the tsquery OR-ing ``terms`` phrases, each stemmed or
    exactly as written.

    ``OFFSET 0`` keeps it a subquery computed once. psycopg prepares a statement after a
    few runs, and PostgreSQL's generic plan for a prepared statement does not know the
    parameters: flattened into the WHERE clause, the tsquery would be rebuilt for every
    row scanned (measured at 10K records: 25 ms a search instead of 3.5).
    """
    return f"(SELECT {' || '.join([_ONE_PHRASE] * terms)} AS query OFFSET 0) q"


@lru_cache(maxsize=64)
def _idf_phrases(terms: int) -> str:
    """``terms`` phrase queries with BM25's inverse document frequency, as a derived table
    ``p(query, idf, items)`` (materialised by the caller, so computed once). The row count
    is the planner's estimate (counted while the table has never been analysed).

    ``items`` undoes ts_rank's averaging over the query's lexemes: a word whose stem is not
    its spelling ("allergic": 'allerg' | 'allergic') is two lexemes, of which a record's
    content holds one, and ts_rank halved its weight, while a name ("mei") is one lexeme
    and kept its full weight; the phrase's distinct lexemes per word restore it.
    """
    rows = ", ".join(f"({_ONE_PHRASE}, {_ITEMS})" for _ in range(terms))
    return (
        "(SELECT v.query, ln(1 + (t.n - d.n + 0.5) / (d.n + 0.5)) AS idf, v.items"
        f" FROM (VALUES {rows}) AS v(query, items)"
        " CROSS JOIN (SELECT CASE WHEN c.reltuples > 0 THEN c.reltuples::float8"
        " ELSE (SELECT count(*) FROM records_fts)::float8 END AS n"
        " FROM pg_class c WHERE c.oid = 'records_fts'::regclass) t"
        " CROSS JOIN LATERAL (SELECT count(*)::float8 AS n FROM (SELECT 1 FROM records_fts g"
        f" WHERE g.document @@ v.query LIMIT {_DF_CAP}) m) d)"
    )


def _phrases(match: str) -> list[str]:
    """The quoted phrases of the FTS5 expression the retriever builds (``"a" OR "b c"``)."""
    return [p for p in dict.fromkeys(_PHRASE.findall(match)) if p.strip()]


class PgReads(Store):
    """:class:`Store` with its multi-statement reads replaced by single statements."""

    _ENTITY_SELECT = (ENTITY_COLUMNS + ", ARRAY(SELECT x.alias_norm FROM entity_aliases x"
                      " WHERE x.entity_id = e.id ORDER BY x.alias_norm)")
    _RECORD_SELECT = ("*, ARRAY(SELECT l.entity_id FROM record_entities l WHERE l.record_id = records.id"
                      " ORDER BY l.role = 'mentions', l.entity_id) AS retold_links")

    _seq_text: tuple[int, str] | None = None  # the last eligible set's seqs as array text

    def _seqs(self, eligible: EligibleSet) -> str:
        """The eligible seqs as a PostgreSQL array literal, built once per set: searches
        over a cached set send the same text instead of adapting every integer again."""
        if self._seq_text is None or self._seq_text[0] != eligible.token:
            self._seq_text = (eligible.token, "{" + ",".join(map(str, eligible.seqs.tolist())) + "}")
        return self._seq_text[1]

    @contextmanager
    def _one_view(self) -> Iterator[Any]:
        with self._lock:
            yield self._conn

    def _rows_with_version(self, sql: str, params: Sequence[Any]) -> tuple[int, list[Any]]:
        # The version row joined to the rows: one statement, so one snapshot, and a row
        # (of NULLs past the version) even when the query finds nothing.
        with self._lock:
            rows = self._conn.execute(
                "SELECT v.value, q.* FROM store_meta v LEFT JOIN (" + sql + ") q ON true"
                " WHERE v.key = 'records_version'", params).fetchall()
        return int(rows[0][0]), [row[1:] for row in rows if row[1] is not None]

    def _record_links(self, conn: Any, rows: list[dict[str, Any]]) -> dict[str, list[str]]:
        return {row["id"]: list(row.pop("retold_links")) for row in rows}

    def _scanned_count(self, conn: Any, where: str, params: Sequence[Any]) -> int | None:
        return None  # page checksums and amcheck are PostgreSQL's own guard

    def _scope_indexes_agree(self, conn: Any, scopes: Sequence[Scope], statuses: Sequence[str]) -> None:
        return None  # the server fails a statement that reads a page failing its checksum

    def _check_indexes_once(self) -> None:
        return None

    def _every_scope_agrees(self, conn: Any) -> None:
        return None

    def _alias_lists(self, conn: Any, rows: list[Any], at: int) -> tuple[list[Any], dict[str, list[str]]]:
        return [row[:-1] for row in rows], {row[at]: list(row[-1]) for row in rows}

    def _alias_probe(self, conn: Any, wanted: list[str], tail: str, args: list[str]) -> list[tuple[str, ...]]:
        # No TEMP table: a read-only PostgreSQL transaction may not create one.
        return list(conn.execute(
            f"SELECT p.alias_norm, {self._ENTITY_SELECT} FROM unnest(?::text[]) AS p(alias_norm){tail}",
            [wanted, *args]).fetchall())

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
        idf_params = [phrase for phrase in phrases for _ in range(5)]
        with self._lock:
            rows = self._conn.execute(
                f"WITH p AS MATERIALIZED {_idf_phrases(len(phrases))}"
                " SELECT m.rowid, -(SELECT sum(p.idf * t.tf * (1 + ?) / (t.tf + ? * (1 - ? + ?"
                " * length(m.document) / m.avglen)))"
                f" FROM p CROSS JOIN LATERAL (SELECT ts_rank({_WEIGHTS}, m.document, p.query, 0)"
                f" * {_TF_SCALE} * p.items AS tf) t WHERE m.document @@ p.query) AS score,"
                " m.record_id, m.content, m.subject, m.aliases"
                " FROM (SELECT f.*, greatest(avg(length(f.document)) OVER (), 1) AS avglen"
                f" FROM records_fts f, {_tsquery(len(phrases))}"
                " WHERE f.document @@ q.query AND f.rowid = ANY(?::bigint[])) m"
                " ORDER BY score, m.rowid LIMIT ?",
                [*idf_params, _K1, _K1, _B, _B, *params, self._seqs(eligible), limit]).fetchall()
        return [FtsRow(rid, int(seq), float(score), content, subject, aliases)
                for seq, score, rid, content, subject, aliases in rows]

    def fts_document_counts(self, tokens: Sequence[str], *, min_rows: int = 0) -> tuple[int, dict[str, int]]:
        """No counts: this index weighs each phrase by the inverse document frequency it
        computes itself, so the retriever keeps every term here."""
        return 0, {}

    def count_fts_matches(self, match: str) -> int:
        phrases = _phrases(match)
        if not phrases:
            return 0
        params = [p for phrase in phrases for p in (phrase, phrase)]
        with self._lock:
            return int(self._conn.execute(
                f"SELECT count(*) FROM records_fts f, {_tsquery(len(phrases))} WHERE f.document @@ q.query",
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
        with self._lock:
            cursor = self._conn.execute(
                "SELECT re.record_id, re.entity_id, r.seq FROM record_entities re"
                " JOIN records r ON r.id = re.record_id"
                " WHERE re.entity_id = ANY(?) AND r.seq = ANY(?::bigint[])"
                " ORDER BY re.role = 'mentions', r.event_at DESC, re.record_id DESC, re.entity_id"
                " LIMIT ?", (wanted, self._seqs(eligible), limit * len(wanted)))
            rows = take_links(cursor, None, limit)
        return [(record_id, entity_id) for record_id, entity_id, _ in rows]
