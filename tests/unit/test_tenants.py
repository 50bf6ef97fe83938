"""Tenants: one store, many customers' namespaces, none able to see another's.

A canary shaped like a contact is planted in one tenant and looked for from another through
the paths a user of the library, the command line or a worker takes; dropping a tenant
leaves none of its bytes in the store's folder while other tenants answer as before.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from retold import build_runtime
from retold.config import is_database_url, read_config
from retold.errors import ConfigError, StoreError, StoreMissingError
from retold.index.embedder import FakeEmbedder
from retold.index.encoding import TenantQueries
from retold.store.location import add_tenant, drop_tenant, list_tenants, tenant_exists, tenant_store_path
from retold.testing import World, make_world
from tests.sql import tables_holding

CANARY = "Zebulon Quartzfield"
EMAIL = "zebulon.quartzfield@canary.example"  # in no query: a result that holds it leaked
CANARY_CONTACT = f"{CANARY}, {EMAIL}, +1 555 0199"


def _plant(world: World) -> str:
    written = world.write(content=f"The billing contact is {CANARY_CONTACT}.", attribute="billing_contact",
                          entities=[("person", CANARY, "about")])
    assert written.ok
    assert written.record_id is not None
    return written.record_id


def _search(world: World, *queries: str) -> dict[str, object]:
    found: dict[str, object] = world.rt.tools.call("memory_search", world.p, {"queries": list(queries)})
    return found


def _holding(world: World, needle: str) -> list[str]:
    """Where ``needle`` is stored: every file under a SQLite store's folder whose bytes hold
    it, or every table of a PostgreSQL store with a row that does."""
    if is_database_url(world.target):
        return sorted(tables_holding(world.target, needle))
    raw = needle.encode()
    folder = Path(world.target).parent
    return [str(file) for file in folder.rglob("*") if file.is_file() and raw in file.read_bytes()]


@pytest.fixture
def two_tenants(tmp_path: Path, store_target: str) -> tuple[World, World]:
    """Tenants acme and beta on one store, with the same agent, user and session ids."""
    acme = make_world(tmp_path, store=store_target, tenant="acme")
    beta = make_world(tmp_path, store=store_target, tenant="beta")
    yield acme, beta
    acme.rt.close()
    beta.rt.close()


def test_the_same_ids_in_two_tenants_name_two_namespaces(two_tenants: tuple[World, World]) -> None:
    acme, beta = two_tenants
    record_id = _plant(beta)
    assert acme.p == beta.p  # the same agent, user and session in both
    # Every read path of acme's runtime misses beta's record.
    found = _search(acme, f"who is the billing contact {CANARY}", "billing contact")
    assert found["results"] == [] and EMAIL not in json.dumps(found)
    got = acme.rt.tools.call("memory_get", acme.p, {"ids": [record_id]})
    assert EMAIL not in json.dumps(got)
    assert acme.rt.store.get_record(record_id) is None
    assert CANARY not in json.dumps(acme.rt.profiles.for_session(acme.p), default=str)
    for tool, payload in (("memory_forget", {"id": record_id, "reason": "probe"}),
                          ("memory_revise", {"id": record_id, "action": "confirm", "reason": "probe"})):
        refused = acme.rt.tools.call(tool, acme.p, payload)
        assert refused["error"]["code"] == "not_found", refused
    with acme.rt.session(acme.p.agent_id, acme.p.user_id) as session:
        assert EMAIL not in json.dumps(session.search("who is the billing contact"), default=str)
    # acme's index holds only acme's vectors: beta's write costs it nothing.
    acme.rt.refresh_index()
    assert record_id not in acme.rt.index.ids
    # beta still finds its own record, untouched by acme's refused calls.
    found = _search(beta, "who is the billing contact")
    assert [r["id"] for r in found["results"]] == [record_id]  # type: ignore[index]
    assert beta.rt.tenant == "beta" and acme.rt.tenant == "acme"
    assert (acme.rt.store.tenant, beta.rt.store.tenant) == ("acme", "beta")


def test_a_tenant_never_added_is_refused_and_nothing_is_created(tmp_path: Path) -> None:
    config = read_config(overrides={"store": {"path": str(tmp_path / "m.sqlite")},
                                    "embedding": {"model": "fake"}})
    with pytest.raises(StoreMissingError, match="no tenant 'acmee'.*retold tenant add acmee"):
        build_runtime(config, tenant="acmee", embedder=FakeEmbedder())
    assert not tenant_store_path(tmp_path / "m.sqlite", "acmee").exists()
    with pytest.raises(ConfigError, match="tenant: 'Acme' is not a tenant name"):
        build_runtime(config, tenant="Acme", embedder=FakeEmbedder())
    with pytest.raises(ConfigError, match="tenancy.tenant: '../x' is not a tenant name"):
        read_config(overrides={"tenancy": {"tenant": "../x"}})


def test_a_store_written_before_tenants_is_the_default_tenant(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    world = make_world(tmp_path, store=str(path))  # no tenant named, as every store so far
    record_id = _plant(world)
    world.rt.close()
    assert list_tenants(path) == ["default"]
    again = make_world(tmp_path, store=str(path), tenant="default")
    try:
        assert again.rt.store.path == str(path)
        assert [r["id"] for r in _search(again, "billing contact")["results"]] == [record_id]  # type: ignore[index]
    finally:
        again.rt.close()


def test_dropping_a_tenant_leaves_none_of_its_bytes_and_others_intact(
        tmp_path: Path, two_tenants: tuple[World, World]) -> None:
    acme, beta = two_tenants
    for n in range(12):
        assert acme.write(content=f"Aditya reviews the ledger number {n} every Monday.",
                          attribute=f"ledger_{n}").ok
    _plant(beta)
    beta.say("user", f"Please note {CANARY_CONTACT} handles billing now.")
    _search(beta, f"who is {CANARY}")
    beta.rt.flush_search_log()
    before = [r["id"] for r in _search(acme, "which ledger does Aditya review")["results"]]  # type: ignore[index]
    assert len(before) >= 5
    assert _holding(acme, EMAIL)  # the canary is stored before the drop
    beta.rt.close()
    with pytest.raises(StoreError, match="default tenant is the store itself"):
        drop_tenant(acme.target, "default")
    assert drop_tenant(acme.target, "beta")  # what it removed, for the operator
    assert _holding(acme, EMAIL) == [] and _holding(acme, CANARY) == []
    assert list_tenants(acme.target) == ["default", "acme"]
    assert not tenant_exists(acme.target, "beta")
    after = [r["id"] for r in _search(acme, "which ledger does Aditya review")["results"]]  # type: ignore[index]
    assert after == before
    with pytest.raises(StoreMissingError, match="no tenant 'beta'"):
        drop_tenant(acme.target, "beta")


def test_tenants_keep_query_caches_of_their_own_over_one_model() -> None:
    shared = FakeEmbedder()
    acme, beta = TenantQueries(shared, 8), TenantQueries(shared, 8)
    vector = acme.embed_queries(["who is the billing contact"])
    assert (vector == shared.embed_documents(["who is the billing contact"])).all()
    assert acme.cache_size == 1 and beta.cache_size == 0 and shared.cache_size == 0
    assert (acme.name, acme.version, acme.dims) == (shared.name, shared.version, shared.dims)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "retold.cli", *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "HF_HUB_OFFLINE": "1"})


def test_the_tenant_command_and_the_tenant_flag(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    store = tmp_path / "m.sqlite"
    config.write_text(f"store:\n  path: {store}\nembedding:\n  model: fake\n")
    common = ("--config", str(config))
    assert _cli("tenant", "list", *common).stdout.split() == ["default"]
    added = _cli("tenant", "add", "acme", *common)
    assert added.returncode == 0 and "added tenant acme" in added.stdout
    assert "already exists" in _cli("tenant", "add", "acme", *common).stdout
    bad = _cli("tenant", "add", "Not/A/Name", *common)
    assert bad.returncode == 1 and len(bad.stderr.strip().splitlines()) == 1 and "Traceback" not in bad.stderr
    # A change and a read reach only the tenant the flag names.
    assert _cli("members", "add", "project:apollo", "u1", "--tenant", "acme", *common).returncode == 0
    assert _cli("members", "list", "project:apollo", "--tenant", "acme", *common).stdout.startswith("u1")
    assert _cli("members", "add", "project:apollo", "u2", *common).returncode == 0  # the default tenant
    assert _cli("members", "list", "project:apollo", *common).stdout.split()[0] == "u2"
    assert "u2" not in _cli("members", "list", "project:apollo", "--tenant", "acme", *common).stdout
    missing = _cli("members", "list", "project:apollo", "--tenant", "nobody", *common)
    assert missing.returncode == 1 and "no tenant 'nobody'" in missing.stderr
    assert not tenant_store_path(store, "nobody").exists()
    refused = _cli("tenant", "drop", "acme", *common)
    assert refused.returncode == 2 and "--yes" in refused.stderr
    assert tenant_exists(store, "acme")
    dropped = _cli("tenant", "drop", "acme", "--yes", *common)
    assert dropped.returncode == 0 and "dropped tenant acme" in dropped.stdout
    assert _cli("tenant", "list", *common).stdout.split() == ["default"]


def test_add_tenant_is_idempotent_and_creates_a_migrated_empty_store(tmp_path: Path) -> None:
    store = tmp_path / "m.sqlite"
    assert add_tenant(store, "acme") is True
    assert add_tenant(store, "acme") is False
    config = read_config(overrides={"store": {"path": str(store)}, "embedding": {"model": "fake"}})
    with build_runtime(config, tenant="acme", embedder=FakeEmbedder()) as rt:
        assert rt.store.row_counts()["records"] == 0


def test_an_operator_of_one_tenant_sees_nothing_of_another_in_the_inspector(
        two_tenants: tuple[World, World]) -> None:
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from retold.ui.access import token_digest
    from retold.ui.app import create_app

    acme, beta = two_tenants
    record_id = _plant(beta)
    beta.say("user", f"Please note {CANARY_CONTACT} handles billing now.")
    token = "operator-token-acme-0001"
    operator = {"sha256": token_digest(token), "operator": "ops", "tenant": "acme"}
    config = acme.rt.config.replace({"ui": {"tokens": [operator]}})
    with build_runtime(config, clock=acme.clock, embedder=acme.embedder, judge=acme.judge, environ={},
                       tenant="acme") as rt:
        client = TestClient(create_app(rt), headers={"authorization": f"Bearer {token}"},
                            follow_redirects=False)
        pages = [client.get(url) for url in ("/scopes", "/records", "/entities", "/sessions", "/sessions/s1",
                                             "/reviews")]
        ask = {"q": "who is the billing contact", "agent": acme.p.agent_id, "user": acme.p.user_id}
        pages.append(client.get("/search", params=ask))
        assert [page.status_code for page in pages] == [200] * len(pages)
        assert all(CANARY not in page.text for page in pages)
        assert client.get(f"/records/{record_id}").status_code == 404


def test_an_export_names_its_tenant_and_another_tenant_takes_it_only_when_told(
        two_tenants: tuple[World, World]) -> None:
    import io

    from retold.models import Scope
    from retold.portable.lines import ImportRefused

    acme, beta = two_tenants
    _plant(beta)
    out = io.StringIO()
    beta.rt.operations.export(Scope("user", "aditya"), out)
    assert json.loads(out.getvalue().splitlines()[0])["tenant"] == "beta"
    with pytest.raises(ImportRefused, match="from tenant beta, not acme; name it with --from-tenant beta"):
        acme.rt.operations.import_lines(out.getvalue().splitlines(), acme.p)
    assert _search(acme, "billing contact")["results"] == []
    landed = acme.rt.operations.import_lines(out.getvalue().splitlines(), acme.p, from_tenant="beta")
    assert landed.created == 1


def test_a_hundred_tenants_on_one_store_leak_nothing_to_each_other(tmp_path: Path, store_target: str) -> None:
    """Each tenant holds a canary of its own under the same agent, user and attribute; every
    tenant then asks for its neighbours' canaries by name and by id: zero come back. One
    runtime is open at a time, as a process serving many tenants in turn would hold them."""
    tenants = [f"t{n:03d}" for n in range(100)]
    planted: dict[str, str] = {}
    for tenant in tenants:
        world = make_world(tmp_path, store=store_target, tenant=tenant)
        try:
            canary = f"The billing contact is Canary{tenant} at {tenant}@canary.example."
            written = world.write(content=canary, attribute="billing_contact")
            assert written.ok and written.record_id is not None
            planted[tenant] = written.record_id
        finally:
            world.rt.close()
    probes = leaks = 0
    for n, tenant in enumerate(tenants):
        world = make_world(tmp_path, store=store_target, tenant=tenant)
        try:
            for other in (tenants[(n + step) % len(tenants)] for step in (1, 2, 50)):
                # The response repeats the question, so only what it returns is searched.
                asked = _search(world, f"billing contact Canary{other}", f"{other}@canary.example")
                found = json.dumps(asked["results"])
                got = json.dumps(world.rt.tools.call("memory_get", world.p, {"ids": [planted[other]]}))
                probes += 2
                leaks += (f"{other}@canary" in found) + (f"{other}@canary" in got)
            own = _search(world, "who is the billing contact")
            assert [r["id"] for r in own["results"]] == [planted[tenant]]  # type: ignore[index]
        finally:
            world.rt.close()
    assert (probes, leaks) == (600, 0)
    assert len(list_tenants(store_target)) == 101


def test_a_token_opens_only_the_inspector_of_its_own_tenant(two_tenants: tuple[World, World]) -> None:
    """One config file starts every tenant's inspector; a token names its tenant, and the
    same agent and user in another tenant are not reachable with it."""
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from retold.ui.access import token_digest
    from retold.ui.app import create_app

    acme, _beta = two_tenants
    tokens = [{"sha256": token_digest("acme-token-0001"), "agent_id": acme.p.agent_id,
               "user_id": acme.p.user_id, "tenant": "acme"},
              {"sha256": token_digest("beta-token-0001"), "agent_id": acme.p.agent_id,
               "user_id": acme.p.user_id, "tenant": "beta"}]
    config = acme.rt.config.replace({"ui": {"tokens": tokens}})
    with build_runtime(config, clock=acme.clock, embedder=acme.embedder, judge=acme.judge, environ={},
                       tenant="acme") as rt:
        app = create_app(rt)
        assert TestClient(app, headers={"authorization": "Bearer acme-token-0001"}).get(
            "/records").status_code == 200
        assert TestClient(app, headers={"authorization": "Bearer beta-token-0001"}).get(
            "/records").status_code == 401
    with pytest.raises(ConfigError, match=r"ui.tokens\[0\].tenant: 'Acme' is not a tenant name"):
        read_config(overrides={"ui": {"tokens": [{**tokens[0], "tenant": "Acme"}]}})
