"""PostgreSQL: every index of a tenant's table leads with the tenant, so one tenant's
reads are a range of the index however many other tenants share the tables. A store
written before (schema 22) gets the same indexes as a new one, keeping its rows, and the
eligibility and lexical reads of one tenant use the tenant as an index condition."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import pytest

from retold.models import SearchRequest
from retold.store.location import open_store
from retold.store.postgres.schema import AGENT_ROLE
from retold.store.postgres.url import conninfo
from retold.testing import World, make_world
from tests import postgres
from tests.sql import execute, rows

psycopg = pytest.importorskip("psycopg")

TENANTS = ("default", "beta")
SAID = ("Aditya prefers concise technical explanations.", "Aditya reviews pull requests on Fridays.",
        "The staging cluster runs in Frankfurt.")


def _indexes(url: str) -> dict[str, str]:
    """Each index of the store's schema by name, its definition without the schema's name."""
    found = rows(url, "SELECT indexname, indexdef, schemaname FROM pg_indexes"
                      " WHERE schemaname = current_schema() ORDER BY indexname")
    return {str(name): str(definition).replace(f" ON {where}.", " ON ") for name, definition, where in found}


def _not_tenant_first(url: str) -> list[str]:
    return [d for d in _indexes(url).values() if "(tenant, " not in d and "_migrations" not in d
            and "retold_tenants" not in d]


def _filled(tmp_path: Path, url: str) -> dict[str, list[str]]:
    """Two tenants, each with the same three memories; the ids each wrote."""
    written: dict[str, list[str]] = {}
    for tenant in TENANTS:
        world = make_world(tmp_path / tenant, store=url, tenant=tenant)
        written[tenant] = [_said(world, content) for content in SAID]
        world.rt.close()
    return written


def _said(world: World, content: str) -> str:
    result = world.write(content=content, attribute=content.split()[1])
    assert result.record_id is not None, result
    return result.record_id


def _found(tmp_path: Path, url: str, tenant: str, query: str) -> list[str]:
    world = make_world(tmp_path / f"{tenant}-again", store=url, tenant=tenant)
    try:
        outcome = world.rt.retriever.search(world.p, SearchRequest(queries=[query]))
        return [result.record.id for result in outcome.response.results]
    finally:
        world.rt.close()


@pytest.fixture
def url(pg_database: str) -> str:
    return postgres.fresh_schema(pg_database)


def test_a_store_written_at_schema_22_migrates_with_its_rows_and_tenant_first_indexes(
        tmp_path: Path, url: str, pg_database: str, pg_release: Any) -> None:
    with pg_release(url, 22):  # this Retold as it was before migration 23
        written = _filled(tmp_path, url)
        assert rows(url, "SELECT max(version) FROM schema_migrations") == [(22,)]
        assert _indexes(url)["records_subject"] == (
            "CREATE INDEX records_subject ON records USING btree"
            " (scope_kind, scope_id, subject_entity_id, attribute, status)")
    store = open_store(url)
    try:
        assert store.migration_report is not None and store.migration_report.applied[0] == 23
    finally:
        store.close()
    assert _not_tenant_first(url) == []
    for tenant in TENANTS:
        found = _found(tmp_path, url, tenant, "Which explanations does Aditya prefer?")
        assert found[0] == written[tenant][0]
    counts = rows(url, "SELECT tenant, count(*) FROM records GROUP BY tenant ORDER BY tenant")
    assert counts == [("beta", 3), ("default", 3)]
    new = postgres.fresh_schema(pg_database)
    open_store(new).close()
    assert _indexes(new) == _indexes(url)


def test_a_new_store_indexes_every_tenant_table_by_tenant_first(url: str) -> None:
    open_store(url).close()
    indexes = _indexes(url)
    assert _not_tenant_first(url) == []
    assert indexes["records_fts_document"] == ("CREATE INDEX records_fts_document ON records_fts"
                                               " USING gin (tenant, document)")
    assert indexes["records_supersedes"] == ("CREATE INDEX records_supersedes ON records USING btree"
                                             " (tenant, supersedes_id) WHERE (supersedes_id IS NOT NULL)")


def _crowd(url: str, tenant: str, copies: int) -> None:
    """``copies`` more of each of ``tenant``'s records, each in a scope of its own and
    with text no query here asks for, then statistics: another tenant, many times the
    size of the one read, as a planner sees it."""
    execute(url, "INSERT INTO records SELECT (jsonb_populate_record(NULL::records, to_jsonb(r)"
                 " || jsonb_build_object('id', r.id || '-' || g, 'seq', r.seq + 10 * g, 'scope_id', 'u' || g,"
                 " 'subject_entity_id', NULL))).* FROM records r, generate_series(1, ?) g WHERE r.tenant = ?",
            copies, tenant)
    execute(url, "INSERT INTO records_fts(tenant, rowid, record_id, content, subject, aliases, tags)"
                 " SELECT tenant, seq, id, 'filler ' || seq, subject, '', '' FROM records"
                 " WHERE tenant = ? AND seq > 10", tenant)
    # VACUUM too: a GIN index's statistics (and the end of its pending list) come from it.
    execute(url, "VACUUM ANALYZE records")
    execute(url, "VACUUM ANALYZE records_fts")


@contextmanager
def _agent(url: str, tenant: str) -> Iterator[Any]:
    """A connection as the agent role bound to ``tenant``, sequential scans priced out so
    the plan shows which index the query can use, whatever the table's size."""
    with closing(psycopg.connect(conninfo(url), autocommit=True)) as conn:
        conn.execute("SELECT set_config('retold.tenant', %s, false)", (tenant,))
        conn.execute(f"SET ROLE {AGENT_ROLE}")
        conn.execute("SET enable_seqscan = off")
        yield conn


def _scans(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    if "Index Name" in plan:
        yield plan
    for child in plan.get("Plans", []):
        yield from _scans(child)


def _index_scans(conn: Any, sql: str, params: tuple[Any, ...]) -> dict[str, str]:
    """Each index the plan of ``sql`` reads, with its index condition."""
    (plan,) = conn.execute("EXPLAIN (FORMAT JSON) " + sql, params).fetchone()
    top = (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]
    return {scan["Index Name"]: scan.get("Index Cond", "") for scan in _scans(top)}


def test_one_tenants_eligibility_and_lexical_reads_are_ranges_of_its_tenant(
        tmp_path: Path, url: str) -> None:
    _filled(tmp_path, url)
    _crowd(url, "beta", 2000)
    with _agent(url, "default") as conn:
        eligible = _index_scans(
            conn, "SELECT id, seq, expires_at FROM records WHERE scope_kind = %s AND scope_id = %s"
                  " AND status IN ('provisional', 'confirmed') AND (expires_at IS NULL OR expires_at >= %s)",
            ("user", "aditya", "2026-01-01T00:00:00.000000Z"))
        lexical = _index_scans(
            conn, "SELECT rowid FROM records_fts WHERE document @@ phraseto_tsquery('retold_stem', %s)",
            ("concise",))
    (name, condition), = eligible.items()
    assert name in ("records_scope", "records_subject", "records_subject_recent")
    assert "tenant = " in condition and "scope_kind = " in condition
    assert "tenant = " in lexical["records_fts_document"]
    assert "document @@ " in lexical["records_fts_document"]
