"""Candidate-generator queries: FTS5 and entity lookups restricted to an eligible set (LLD 10.2).

Both queries apply the eligible restriction before their limit (LLD 10.2 step 4), so
rows the caller may not read can never crowd readable rows out of a generator's top k.
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

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from retold.errors import StoreError
from retold.store.base import StoreBase, marks
from retold.store.eligible import EligibleSet

__all__ = ["ELIGIBLE_TEMP_TABLE_MAX", "FtsRow", "SearchMixin"]

# Eligible sets up to this size go through the TEMP table; larger ones are streamed.
# Measured on a 50K-record store: the table costs about 0.25 ms per 1K eligible seqs to
# load, then bm25 is computed and sorted only for eligible matches; streaming costs
# nothing up front but scores and sorts every match (about 17 ms for a query matching
# 22K rows, 0.3 ms for a rare term). 20K is where the worst cases of the two cross.
ELIGIBLE_TEMP_TABLE_MAX = 20_000

# LLD 10.2 step 3: the leading 0.0 skips the UNINDEXED record_id column, then content 1,
# subject 2, aliases 3. SQLite's bm25 is negative, and lower is better.
_BM25 = "bm25(records_fts, 0.0, 1.0, 2.0, 3.0)"


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
    """Lexical and entity candidate queries."""

    _eligible_token: int | None = None  # which EligibleSet temp.retold_eligible_seq holds

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

        The eligible restriction comes before the limit (LLD 10.2 step 4): up to
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
        (LLD 2.3 max_alias_tokens), and the eligible restriction comes before the limit
        (LLD 10.2), by the same two plans as :meth:`fts_candidates`.
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
                        rows = _take_links(cursor, None, limit)
                else:
                    cursor = conn.execute(sql)
                    rows = _take_links(cursor, _lookup(eligible), limit)
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


def _take_links(
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
