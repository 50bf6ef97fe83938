"""A record's lexical row: its content, subject, the aliases of every entity it links to
(each once, in order) and, on PostgreSQL, its tags; rewritten when an alias is added and
removed when the record is deleted. PostgreSQL writes it in one statement, SQLite with
write_fts_rows; both must hold the same text."""

from __future__ import annotations

import pytest

from retold.models import Scope
from retold.store import Store
from retold.testing import make_record
from tests.sql import rows

ADITYA = Scope("user", "aditya")


def _row(store: Store, seq: int | None, backend: str) -> list[tuple[str, ...]]:
    tags = ", tags" if backend == "postgres" else ""  # FTS5 has no tags column
    return rows(store, f"SELECT record_id, content, subject, aliases{tags} FROM records_fts"
                " WHERE rowid = ?", seq)


def test_the_lexical_row_follows_links_aliases_tags_and_deletion(store: Store, backend: str) -> None:
    dana = store.create_entity("person", "Dana Reyes", ADITYA)
    acme = store.create_entity("org", "Acme North", ADITYA)
    for entity, alias in ((dana, "dana reyes"), (dana, "dana"), (acme, "acme"), (acme, "dana")):
        store.add_alias(entity.id, alias)
    rec = make_record(content="Dana handles billing at Acme.", subject="billing_contact",
                      tags=["billing", "finance team"])
    store.write_record(rec, links=[(dana.id, "about"), (acme.id, "mentions")])
    tags = ("billing finance team",) if backend == "postgres" else ()
    expected = (rec.id, rec.content, "billing_contact", "acme dana dana reyes", *tags)
    assert _row(store, rec.seq, backend) == [expected]

    store.add_alias(acme.id, "acme north")
    assert _row(store, rec.seq, backend) == [(*expected[:3], "acme acme north dana dana reyes", *tags)]

    untagged = make_record(content="No links, no tags.")
    store.write_record(untagged)
    assert _row(store, untagged.seq, backend) == [
        (untagged.id, untagged.content, untagged.subject, "", *(("",) if backend == "postgres" else ()))]

    assert store.transition(rec.id, "deleted", from_statuses=("confirmed",)) is not None
    assert _row(store, rec.seq, backend) == []


def test_tags_holding_nul_or_backslashes_are_indexed_as_text_can_hold_them(
    store: Store, backend: str,
) -> None:
    if backend == "sqlite":
        pytest.skip("FTS5 indexes no tags")
    # PostgreSQL text cannot hold NUL: it reads as U+FFFD, as in every text parameter. A
    # backslash followed by "u0000" is text, not an escape, and stays as it is.
    rec = make_record(tags=["a\x00b", "c\\u0000d", "e\x00\x00"])
    store.write_record(rec)
    assert rows(store, "SELECT tags FROM records_fts WHERE rowid = ?", rec.seq) == [
        ("a\ufffdb c\\u0000d e\ufffd\ufffd",)]
