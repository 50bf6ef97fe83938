"""The scope-members migration on a store written before membership existed, and what
erasing a user does to their memberships."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from retold.cli import main
from retold.host import MemoryHost
from retold.models import Principal, Scope
from retold.policy.grants import readable_scopes
from retold.store import Store
from retold.store.migrations import MIGRATIONS, migrate
from retold.testing import T0, make_record
from tests.sql import execute

AGENT = "support-agent"
APOLLO = Scope("project", "apollo")
ACME = Scope("org", "acme")
_BEFORE = MIGRATIONS[:[m.name for m in MIGRATIONS].index("scope members")]


def _store_before_members(path: Path) -> None:
    """Two shared scopes granted to one agent that served five users: mia wrote into the
    project, ola into the org, dan's org record was forgotten, nick only read, and pia's
    sessions name the project."""
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        migrate(conn, str(path), _BEFORE)
    store = Store(path, migrate_schema=False)
    try:
        store.put_grant(AGENT, APOLLO, read=True, write=True)
        store.put_grant(AGENT, ACME, read=True, write=False)
        for user, project in (("mia", None), ("ola", None), ("dan", None), ("nick", None),
                              ("pia", "apollo")):
            store.create_session(f"s-{user}", AGENT, user, project, T0)
        store.write_record(make_record(scope=APOLLO, source_ref="session:s-mia<turn:1>"))
        store.write_record(make_record(scope=ACME, source_ref="session:s-ola", attribute="a2"))
        forgotten = make_record(scope=ACME, source_ref="session:s-dan<turn:2>", attribute="a3")
        store.write_record(forgotten)
    finally:
        store.close()
    # Forgotten as an older store would have it: today's status writer expects later tables.
    execute(path, "UPDATE records SET status = 'deleted' WHERE id = ?", forgotten.id)


def _reads(store: Store, user: str, project: str | None = None) -> set[Scope]:
    return set(readable_scopes(store, Principal(AGENT, user, "s", project))) & {APOLLO, ACME}


def test_writers_become_members_and_the_rest_lose_the_shared_scopes(store_path: Path) -> None:
    _store_before_members(store_path)
    store = Store(store_path)
    try:
        report = store.migration_report
        assert report is not None and MIGRATIONS[len(_BEFORE)].version in report.applied
        [note] = report.notes
        assert "assumed 2 (every user whose session wrote a live record into a shared scope)" in note
        # apollo: ola, nick, dan; acme: mia, nick, pia, dan (pia's sessions name apollo only)
        assert "7 user-scope pairs reachable before" in note
        assert "retold members add" in note

        assert _reads(store, "mia") == {APOLLO}
        assert _reads(store, "ola") == {ACME}
        assert _reads(store, "pia", "apollo") == {APOLLO}
        assert _reads(store, "nick") == set() and _reads(store, "dan") == set()
        [seeded] = store.members_of(ACME)
        assert (seeded.user_id, seeded.added_by) == ("ola", "migration: scope members")
        assert store.events(kind="membership.changed") == []  # assumed, not an operator's change
    finally:
        store.close()


def test_retold_migrate_prints_what_it_assumed(
    store_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _store_before_members(store_path)
    config = tmp_path / "config.yaml"
    config.write_text("embedding:\n  model: fake\n")
    assert main(["migrate", "--store", str(store_path), "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert f"migration {MIGRATIONS[len(_BEFORE)].version}: project and org scopes now need members" in out
    assert "assumed 2" in out and "retold members add SCOPE USER" in out


def test_a_store_without_shared_grants_migrates_without_a_note(store_path: Path) -> None:
    with closing(sqlite3.connect(store_path, isolation_level=None)) as conn:
        migrate(conn, str(store_path), _BEFORE)
    store = Store(store_path)
    try:
        assert store.migration_report is not None and store.migration_report.notes == ()
    finally:
        store.close()


def test_erasing_a_user_removes_their_memberships(store: Store) -> None:
    host = MemoryHost(store)
    host.add_member(APOLLO, "mia")
    host.add_member(ACME, "mia")
    host.add_member(APOLLO, "ola")

    erased = store.erase_user("mia", "admin", "asked to be forgotten")

    assert erased.counts["memberships"] == 2
    assert store.member_scopes("mia") == []
    assert [m.user_id for m in store.members_of(APOLLO)] == ["ola"]
    payloads = [e["payload"] for e in store.events(kind="membership.changed")]
    assert payloads.count({}) == 2  # mia's two events, blanked
    assert {"scope": "project:apollo", "user_id": "ola", "member": True} in payloads
    # A new user who later gets the same id starts outside every shared scope.
    store.put_grant(AGENT, APOLLO, read=True, write=True)
    assert _reads(store, "mia") == set()
