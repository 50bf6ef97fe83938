"""Migration 21 dates the superseded records of a store written before supersession kept
validity windows: from lineage and events, leaving corrections undated on purpose and
counting what it could not date. Both backends."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from retold.store import open_store
from retold.store.migrations import LATEST
from retold.store.postgres.connection import PgConnection
from retold.store.postgres.schema import AGENT_ROLE, TENANT_REGISTRY, _validity_windows
from retold.store.postgres.url import conninfo
from retold.testing import World, make_world
from retold.tools.handlers import ToolHandlers
from tests import postgres
from tests.sql import execute, rows

ACME = [("org", "Acme North", "about")]
DANA = "Billing contact for Acme North is Dana Reyes."
MARCUS = "Billing contact for Acme North is Marcus Chen."


def _said(world: World, content: str, **fields: object) -> str:
    world.say("user", content)
    result = world.write(content=content, source_kind="user_statement", evidence=content, **fields)
    assert result.record_id is not None, result
    return result.record_id


def test_an_older_store_gets_its_windows_and_hears_what_could_not_be_dated(world: World) -> None:
    assert LATEST == 24  # a later migration must be undone below as well (23 may run again)
    dana = _said(world, DANA, attribute="billing_contact", entities=ACME,
                 event_at=datetime(2026, 1, 10, tzinfo=UTC))
    world.judge.table[(DANA, MARCUS)] = "contradicts"
    _said(world, MARCUS, attribute="billing_contact", entities=ACME,
          valid_from=datetime(2026, 3, 1, tzinfo=UTC))
    # History that arrived late: held until the current value started.
    current = _said(world, "Aditya drinks tea.", attribute="drink", event_at=datetime(2026, 6, 1, tzinfo=UTC))
    world.judge.table[("Aditya drinks tea.", "Aditya drinks coffee.")] = "contradicts"
    late = _said(world, "Aditya drinks coffee.", attribute="drink", event_at=datetime(2026, 4, 1, tzinfo=UTC))
    assert world.record(late).status == "superseded" and world.record(current).valid_until is None
    # A correction, and a record whose successor is gone.
    typo = _said(world, "Aditya lives in Lisbn.", attribute="city")
    world.say("user", "Sorry, I live in Lisbon.")
    fixed = ToolHandlers(world.rt).call("memory_revise", world.p, {
        "id": typo, "action": "supersede", "reason": "typo", "content": "Aditya lives in Lisbon.",
        "source_kind": "user_statement", "evidence": "I live in Lisbon"})
    assert fixed["outcome"] == f"superseded:{typo}", fixed
    orphan = _said(world, "Aditya works remotely.", attribute="workplace")
    world.rt.close()

    # The store as version 20 left it: no windows on superseded records, no migration 21
    # or later.
    execute(world.target, "UPDATE records SET status = 'superseded' WHERE id = ?", orphan)
    assert execute(world.target, "UPDATE records SET valid_until = NULL WHERE status = 'superseded'") == 4
    execute(world.target, "DROP TABLE audit_items")
    execute(world.target, "ALTER TABLE records DROP COLUMN sensitivity_label")
    execute(world.target, "DELETE FROM schema_migrations WHERE version >= 21")

    store = open_store(world.target)
    try:
        report = store.migration_report
        assert report is not None and report.applied == (21, 22, 23, 24) and report.version == 24
        assert report.notes == (
            "migration 21: validity windows: 2 superseded records now end where their successor starts;"
            " 1 could not be dated (no successor found) and as-of search leaves them out;"
            " 1 replaced by corrections stay undated",)
        until = {rid: value for rid, value in rows(store, "SELECT id, valid_until FROM records")}
        assert until[dana] == "2026-03-01T00:00:00.000000Z"  # Marcus's stated start
        assert until[late] == "2026-06-01T00:00:00.000000Z"  # tea's event time
        assert until[typo] is None and until[orphan] is None
    finally:
        store.close()
    again = open_store(world.target)
    try:
        assert again.migration_report is not None and again.migration_report.applied == ()
    finally:
        again.close()


def test_a_new_store_has_no_windows_to_date(store_target: str) -> None:
    store = open_store(store_target)
    try:
        report = store.migration_report
        assert report is not None and 21 in report.applied and report.notes == ()
    finally:
        store.close()


def test_a_role_held_by_row_level_security_dates_every_tenant(tmp_path: Path, pg_database: str) -> None:
    """PostgreSQL: a migrating role that row-level security holds (as a table owner that is
    not a superuser is) sees one tenant at a time; each is dated in its own pass."""
    pytest.importorskip("psycopg")
    store_target = postgres.fresh_schema(pg_database)
    ids = []
    for tenant in ("default", "beta"):
        world = make_world(tmp_path / tenant, store=store_target, tenant=tenant)
        dana = _said(world, DANA, attribute="billing_contact", entities=ACME)
        world.judge.table[(DANA, MARCUS)] = "contradicts"
        world.clock.advance(days=3)
        _said(world, MARCUS, attribute="billing_contact", entities=ACME)
        ids.append(dana)
        world.rt.close()
    execute(store_target, "UPDATE records SET valid_until = NULL")  # the tests' role sees every tenant
    conn = PgConnection(conninfo(store_target), connect_timeout=5)
    try:
        # All in one transaction that is rolled back, the grant that lets the agent role
        # read the tenant list included: the agent role bypasses nothing and is bound to
        # no tenant, as a migrating owner is.
        conn.execute("BEGIN")
        conn.execute(f"GRANT SELECT ON {TENANT_REGISTRY} TO {AGENT_ROLE}")
        conn.execute(f"SET LOCAL ROLE {AGENT_ROLE}")
        note = _validity_windows(conn)
        conn.execute("RESET ROLE")
        dated = dict(conn.execute("SELECT id, valid_until FROM records").fetchall())
        conn.execute("ROLLBACK")
    finally:
        conn.close()
    assert note is not None and note.startswith("validity windows: 2 superseded records now end")
    assert [dated[rid] for rid in ids] == ["2026-09-06T12:00:00.000000Z"] * 2
