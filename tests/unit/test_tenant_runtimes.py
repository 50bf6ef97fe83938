"""A process serving many tenants keeps their runtimes within a memory budget for vectors:
the least recently served idle tenant is closed, a tenant in use never is, and a closed
tenant answers again when it is next served."""

from __future__ import annotations

import threading
from pathlib import Path

from retold import build_runtime
from retold.clock import ManualClock
from retold.config import read_config
from retold.index.embedder import FakeEmbedder
from retold.models import Principal
from retold.runtime import Runtime
from retold.store.location import add_tenant
from retold.tenant_runtimes import TenantRuntimes
from retold.testing import AGENT, T0, TEST_GATE, make_world

TENANTS = ("acme", "beta", "gamma")


def _stores(tmp_path: Path) -> str:
    """A store whose default tenant and three others each hold one memory of their own."""
    target = str(tmp_path / "memory.sqlite")
    for tenant in ("default", *TENANTS):
        world = make_world(tmp_path, store=target, tenant=tenant)
        assert world.write(content=f"The {tenant} escalation phone is extension {len(tenant)}42.",
                           attribute="escalation_phone").ok
        world.rt.close()
    return target


def _pool(target: str, max_ram_mb: float | None) -> tuple[TenantRuntimes, list[str]]:
    opened: list[str] = []
    embedder = FakeEmbedder()
    config = read_config(overrides={"store": {"path": target},
                                    "embedding": {"model": "fake", "version": embedder.version,
                                                  "dims": embedder.dims},
                                    "retrieval": {"gate": TEST_GATE}})

    def open_runtime(tenant: str | None, home: Runtime | None) -> Runtime:
        name = tenant or "default"
        add_tenant(target, name)
        opened.append(name)
        return build_runtime(config, embedder=embedder, tenant=name, environ={}, clock=ManualClock(T0))

    return TenantRuntimes(open_runtime, max_ram_mb), opened


def _finds(rt: Runtime, tenant: str) -> bool:
    found = rt.tools.call("memory_search", Principal(AGENT, "aditya", "s1", None),
                          {"queries": ["escalation phone extension"]})
    return any(f"The {tenant} escalation phone" in r["content"] for r in found["results"])


def test_the_least_recently_served_tenant_is_closed_past_the_budget(tmp_path: Path) -> None:
    target = _stores(tmp_path)
    pool, opened = _pool(target, None)
    home = pool.home()
    for tenant in TENANTS:
        pool.get(tenant).refresh_index()
    one_tenant = pool.get("acme").index.nbytes
    pool.close()
    # Room for the home tenant and two others: serving a third closes the one served longest ago.
    pool, opened = _pool(target, (home.index.nbytes + 2.5 * one_tenant) / (1024 * 1024))
    acme = pool.get("acme")
    acme.refresh_index()
    for tenant in ("beta", "gamma"):
        with pool.lease(tenant) as rt:
            rt.refresh_index()
    assert pool.held() == ["default", "beta", "gamma"]
    assert pool.evicted == 1
    assert pool.held_bytes() <= (home.index.nbytes + 2.5 * one_tenant)
    # Served again, acme is rebuilt from its own file and finds its own memory, not another's.
    with pool.lease("acme") as rt:
        assert rt is not acme
        assert _finds(rt, "acme") and not _finds(rt, "beta")
    assert opened.count("acme") == 2
    assert pool.held() == ["default", "gamma", "acme"]
    pool.close()


def test_a_tenant_in_use_is_never_closed_to_make_room(tmp_path: Path) -> None:
    target = _stores(tmp_path)
    pool, _opened = _pool(target, 0.001)  # smaller than any one tenant's index
    entered, leave = threading.Event(), threading.Event()
    result: dict[str, bool] = {}

    def search_acme() -> None:
        with pool.lease("acme") as rt:
            rt.refresh_index()
            entered.set()
            leave.wait(10)
            result["acme"] = _finds(rt, "acme")

    worker = threading.Thread(target=search_acme)
    worker.start()
    assert entered.wait(10)
    with pool.lease("beta") as rt:  # another tenant served meanwhile; both over budget
        rt.refresh_index()
        assert _finds(rt, "beta")
    assert "acme" in pool.held()  # still leased: not closed, although over budget
    leave.set()
    worker.join(10)
    assert result == {"acme": True}
    # Once nobody holds them, everyone but the home tenant is closed.
    assert pool.held() == ["default"]
    pool.close()


def test_without_a_budget_every_served_tenant_stays(tmp_path: Path) -> None:
    target = _stores(tmp_path)
    pool, opened = _pool(target, None)
    for tenant in (*TENANTS, *TENANTS):
        with pool.lease(tenant) as rt:
            rt.refresh_index()
    assert pool.held() == ["default", *TENANTS]
    assert sorted(opened) == sorted(["default", *TENANTS])
    pool.close()
    assert pool.held() == []
