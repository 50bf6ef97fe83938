"""The ``records_fts`` table: its definition and the one function that writes its rows.

Both the store's writer and the migration that rebuilt the table with stemming fill it
through :func:`write_fts_rows`, so a migrated store indexes exactly what a new one would.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator

__all__ = ["FTS_COLUMNS", "FTS_TOKENIZER", "all_fts_rows", "create_fts_table", "is_stemmed", "write_fts_rows"]

# Porter stems over unicode61 words: "deploying" finds "deploys" (docs/decisions.md,
# "The lexical channel stems words").
FTS_TOKENIZER = "porter unicode61 remove_diacritics 2"
# The columns of an FTS row as the writer fills them; the PostgreSQL index adds "tags".
FTS_COLUMNS = ("rowid", "record_id", "content", "subject", "aliases")


def create_fts_table(conn: sqlite3.Connection) -> None:
    """Create an empty ``records_fts`` as schema.sql declares it."""
    conn.execute(
        "CREATE VIRTUAL TABLE records_fts USING fts5("
        " record_id UNINDEXED, content, subject, aliases,"
        f" tokenize = '{FTS_TOKENIZER}')"
    )


def is_stemmed(conn: sqlite3.Connection) -> bool:
    """Whether ``records_fts`` already uses :data:`FTS_TOKENIZER`."""
    row = conn.execute(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'records_fts'"
    ).fetchone()
    return row is not None and FTS_TOKENIZER in str(row[0])


def _row(seq: int, record_id: str, content: str, subject: str, aliases: Iterable[str], tags: str,
         with_tags: bool) -> tuple[object, ...]:
    """One FTS row's values in :data:`FTS_COLUMNS` order (then the tags, space-joined)."""
    row = (seq, record_id, content, subject, " ".join(aliases))
    return (*row, " ".join(json.loads(tags))) if with_tags else row


def write_fts_rows(conn: sqlite3.Connection, record_ids: Iterable[str], *, with_tags: bool = False,
                   redacted: bool = True) -> None:
    """Rewrite the FTS rows of these records from their content (its redacted form where
    the tenant's pack masked it: the index never holds what was masked), subject and the
    aliases of every entity they link to; ``with_tags`` adds the tags, space-joined (the
    PostgreSQL index has a column for them, FTS5 has none). ``redacted=False`` reads the
    content alone, for a migration that runs before records had a redacted form.

    The aliases column is a copy, so a new link, a new alias or an entity merge must
    rewrite every record it touches. A deleted record keeps no FTS row: a forgotten
    memory must not be found by its words.
    """
    text = "coalesce(redacted_content, content)" if redacted else "content"
    for record_id in dict.fromkeys(record_ids):
        row = conn.execute(
            f"SELECT seq, {text}, subject, status, tags FROM records WHERE id = ?", (record_id,)
        ).fetchone()
        if row is None:
            continue
        seq, content, subject, status, tags = row
        conn.execute("DELETE FROM records_fts WHERE rowid = ?", (seq,))
        if status == "deleted":
            continue
        aliases = [
            alias
            for (alias,) in conn.execute(
                "SELECT DISTINCT a.alias_norm FROM record_entities re"
                " JOIN entity_aliases a ON a.entity_id = re.entity_id"
                " WHERE re.record_id = ? ORDER BY a.alias_norm",
                (record_id,),
            )
        ]
        values = _row(seq, record_id, content, subject, aliases, tags, with_tags)
        columns = (*FTS_COLUMNS, "tags") if with_tags else FTS_COLUMNS
        conn.execute(f"INSERT INTO records_fts({', '.join(columns)})"
                     f" VALUES ({', '.join('?' for _ in values)})", values)


def all_fts_rows(conn: sqlite3.Connection, *, with_tags: bool = False) -> Iterator[tuple[object, ...]]:
    """The FTS row of every record that is not deleted, in ``seq`` order, exactly as
    :func:`write_fts_rows` would write them one record at a time: for loading a whole
    index in bulk (a store moving into PostgreSQL), with two statements in all rather
    than three per record. The links and aliases are read first, then the records."""
    aliases: dict[str, list[str]] = {}
    for record_id, alias in conn.execute(
        "SELECT re.record_id, a.alias_norm FROM record_entities re"
        " JOIN entity_aliases a ON a.entity_id = re.entity_id ORDER BY re.record_id, a.alias_norm"
    ).fetchall():
        held = aliases.setdefault(record_id, [])
        if not held or held[-1] != alias:  # DISTINCT, as the writer's query has it
            held.append(alias)
    for seq, record_id, content, subject, tags in conn.execute(
        "SELECT seq, id, coalesce(redacted_content, content), subject, tags FROM records"
        " WHERE status != 'deleted' ORDER BY seq"
    ):
        yield _row(seq, record_id, content, subject, aliases.get(record_id, ()), tags, with_tags)
