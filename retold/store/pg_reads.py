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

from retold.store.eligible import EligibleSet
from retold.store.entities import ENTITY_COLUMNS
from retold.store.search import FtsRow, take_links
from retold.store.store import Store

__all__ = ["PgReads"]

# ts_rank weights for labels {D, C, B, A}: content 1, subject 2, aliases 3, tags 1, the
# ratios of the FTS5 column weights (docs/decisions.md, "PostgreSQL as a shared store").
_WEIGHTS = "'{0.25, 0.5, 0.75, 0.25}'"
_PHRASE = re.compile(r'"([^"]*)"')


@lru_cache(maxsize=64)
def _tsquery(terms: int) -> str:
    """A subquery ``q(query)``: the tsquery OR-ing ``terms`` phrases, each stemmed or
    exactly as written.

    ``OFFSET 0`` keeps it a subquery computed once. psycopg prepares a statement after a
    few runs, and PostgreSQL's generic plan for a prepared statement does not know the
    parameters: flattened into the WHERE clause, the tsquery would be rebuilt for every
    row scanned (measured at 10K records: 25 ms a search instead of 3.5).
    """
    one = ("(phraseto_tsquery('retold_stem', retold_words(?))"
           " || phraseto_tsquery('retold_exact', retold_words(?)))")
    return f"(SELECT {' || '.join([one] * terms)} AS query OFFSET 0) q"


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
        """The best ``limit`` eligible rows for the retriever's phrase expression, by
        ``ts_rank`` over the weighted document (negated, so lower is better as with bm25).
        The eligible restriction is part of the query, before the limit."""
        phrases = _phrases(match)
        if not phrases or limit <= 0 or len(eligible) == 0:
            return []
        params: list[Any] = [p for phrase in phrases for p in (phrase, phrase)]
        with self._lock:
            rows = self._conn.execute(
                f"SELECT f.rowid, -ts_rank({_WEIGHTS}, f.document, q.query, 1) AS score,"
                " f.record_id, f.content, f.subject, f.aliases"
                f" FROM records_fts f, {_tsquery(len(phrases))}"
                " WHERE f.document @@ q.query AND f.rowid = ANY(?::bigint[])"
                " ORDER BY score, f.rowid LIMIT ?",
                [*params, self._seqs(eligible), limit]).fetchall()
        return [FtsRow(rid, int(seq), float(score), content, subject, aliases)
                for seq, score, rid, content, subject, aliases in rows]

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
