"""Migration 4: a store indexed before stemming is rebuilt with the Porter tokenizer and
finds inflected words, with the same rows the store's writer would have written."""

from __future__ import annotations

import re
import sqlite3
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import pytest

from retold.retrieve.generators import lexical_candidates
from retold.store import Store
from retold.store.migrations import MIGRATIONS, migrate
from retold.testing import ADITYA, make_record
from tests.sql import execute, rows

# The table as schema versions 1 to 3 created it.
_UNSTEMMED_FTS = (
    "CREATE VIRTUAL TABLE records_fts USING fts5(record_id UNINDEXED, content, subject,"
    " aliases, tokenize = 'unicode61 remove_diacritics 2')"
)


@dataclass(frozen=True)
class OldStore:
    live: str  # active, linked to the "atlas" entity
    superseded: str  # history: still indexed for include_history searches
    forgotten: str  # deleted: never indexed




def _store_before_stemming(path: Path) -> OldStore:
    """A store at schema version 3 with an unstemmed FTS table, written by the store's
    own writer as the previous Retold did."""
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        migrate(conn, str(path), MIGRATIONS[:3])
        conn.execute("DROP TABLE records_fts")
        conn.execute(_UNSTEMMED_FTS)
    store = Store(path, migrate_schema=False)
    try:
        atlas = store.create_entity("project", "Project Atlas", ADITYA)
        store.add_alias(atlas.id, "atlas")
        live = make_record(content="Priya deploys the billing service every Friday.")
        superseded = make_record(content="Priya deploys the billing service on Mondays.",
                                 status="superseded")
        forgotten = make_record(content="Priya deploys the vault by hand.")
        for record in (live, superseded, forgotten):
            store.write_record(record)
        store.link_record(live.id, [(atlas.id, "about")])
    finally:
        store.close()
    # Forgotten as that Retold forgot: the status, and no FTS row (today's status writer
    # also keeps a table that version 3 did not have).
    execute(path, "UPDATE records SET status = 'deleted' WHERE id = ?", forgotten.id)
    execute(path, "DELETE FROM records_fts WHERE record_id = ?", forgotten.id)
    return OldStore(live.id, superseded.id, forgotten.id)


def _matching(path: Path, phrase: str) -> set[str]:
    return {rid for (rid,) in rows(path, "SELECT record_id FROM records_fts WHERE records_fts MATCH ?",
                                   f'"{phrase}"')}


def _fts_table(path: Path) -> tuple[list[str], str]:
    """The FTS table's columns and its tokenize argument."""
    columns = [name for _, name, *_ in rows(path, "PRAGMA table_info(records_fts)")]
    [(sql,)] = rows(path, "SELECT sql FROM sqlite_master WHERE name = 'records_fts'")
    found = re.search(r"tokenize\s*=\s*'([^']*)'", str(sql))
    assert found is not None
    return columns, found.group(1)


def test_migration_4_rebuilds_an_unstemmed_index(store_path: Path, tmp_path: Path) -> None:
    old = _store_before_stemming(store_path)
    assert _matching(store_path, "deploying") == set()  # unstemmed: the inflection misses
    before = rows(store_path, "SELECT rowid, record_id, content, subject, aliases FROM records_fts"
                              " ORDER BY rowid")

    store = Store(store_path)
    try:
        assert store.migration_report is not None
        assert store.migration_report.applied == tuple(m.version for m in MIGRATIONS[3:])
        assert _matching(store_path, "deploying") == {old.live, old.superseded}
        # The same rows as before, now stemmed: deleted records stay out, aliases stay in.
        after = rows(store_path, "SELECT rowid, record_id, content, subject, aliases FROM records_fts"
                                 " ORDER BY rowid")
        assert after == before and len(after) == 2
        assert ("atlas",) in [(aliases,) for *_, aliases in after]
        assert old.forgotten not in {record_id for _, record_id, *_ in after}
        # A new store gets the same table as the migrated one.
        fresh = Store(tmp_path / "fresh.sqlite")
        fresh.close()
        assert _fts_table(store_path) == _fts_table(tmp_path / "fresh.sqlite") == (
            ["record_id", "content", "subject", "aliases"], "porter unicode61 remove_diacritics 2")

        # Searching the migrated store: the stemmed word counts as a matched term.
        eligible = store.eligible_ids([ADITYA])
        (hit,) = lexical_candidates(store, ["deploying atlas"], eligible, 30, frozenset({"atlas"}))
        assert hit.record_id == old.live
        assert [t.value for t in hit.match.terms] == ["deploying", "atlas"]
    finally:
        store.close()
    again = Store(store_path)
    assert again.migration_report is not None and again.migration_report.applied == ()
    again.close()


@pytest.mark.sqlite_only("migration 4 rebuilds the FTS5 table")
def test_a_new_store_is_created_stemmed_and_migration_4_leaves_it(store: Store) -> None:
    record = make_record(content="Preferences were updated.")
    store.write_record(record)
    assert store.migration_report is not None and 4 in store.migration_report.applied
    assert _matching(Path(store.path), "preference") == {record.id}
