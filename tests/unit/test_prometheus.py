"""The workers' Prometheus endpoint: the same numbers as ``retold metrics``, read from the
store on every scrape, over real HTTP; a store that cannot be read scrapes as
``retold_up 0``; a worker starts it only when ``metrics.port`` is set, and a taken port
costs a warning, not the worker."""

from __future__ import annotations

import logging
import urllib.request
from datetime import timedelta
from pathlib import Path

import pytest

from retold.broker.depth import QueueDepths
from retold.errors import StoreError
from retold.models import SearchRequest
from retold.observability import Metrics, collect_metrics, serve_metrics
from retold.quality.audit import answer_audit, sample_for_audit
from retold.store.audit import Verdicts
from retold.testing import World, make_world
from tests.extracted import extract_facts
from tests.ports import free_port

pytest.importorskip("prometheus_client")


def _scrape(port: int) -> list[str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert response.status == 200
        return [line for line in response.read().decode().splitlines() if not line.startswith("#")]


def _reading(world: World) -> dict[str, Metrics]:
    return {"default": collect_metrics(world.rt.store, world.clock.now(), timedelta(minutes=30),
                                       queue=QueueDepths("redis://broker:6379/0", True, {"extraction": 4}))}


def test_a_scrape_shows_the_stores_counts_and_follows_new_rows(world: World) -> None:
    world.say("user", "Please keep every answer short, I read them on my phone.")
    assert world.write(content="Aditya prefers short answers.", attribute="answer_style",
                       source_kind="user_statement", evidence="keep every answer short").error is None
    endpoint = serve_metrics(lambda: _reading(world), "127.0.0.1", 0)
    try:
        first = _scrape(endpoint.port)
        assert 'retold_writes_total{outcome="created",tenant="default"} 1.0' in first
        assert 'retold_sessions{state="open",tenant="default"} 1.0' in first
        assert 'retold_queue_depth{queue="extraction"} 4.0' in first
        assert "retold_broker_up 1.0" in first and "retold_up 1.0" in first
        assert 'retold_extraction_lag_seconds_count{tenant="default"} 0.0' in first
        assert 'retold_index_vectors{tenant="default"} 1.0' in first  # the one memory's vector
        assert not any(line.startswith("retold_searches_total") for line in first)
        world.rt.retriever.search(world.p, SearchRequest(["quantum chromodynamics lecture notes"]))
        world.rt.flush_search_log()
        second = _scrape(endpoint.port)
        assert 'retold_searches_total{tenant="default",trigger="tool"} 1.0' in second
        assert 'retold_searches_empty_total{tenant="default",trigger="tool"} 1.0' in second
    finally:
        endpoint.close()


def test_a_scrape_shows_each_tenants_extraction_audit(world: World, tmp_path: Path) -> None:
    other = make_world(tmp_path, store=world.target, tenant="acme")
    try:
        extract_facts(world, "lockers", 2)
        sample_for_audit(world.rt.store, 0.0)
        world.clock.advance(hours=1)
        first = world.rt.store.audit_items()[0]
        answer_audit(world.rt.store, first.record_id, Verdicts(True, False, True), "ops")
        readings = {**_reading(world), "acme": collect_metrics(other.rt.store, other.clock.now(),
                                                               timedelta(minutes=30))}
        endpoint = serve_metrics(lambda: readings, "127.0.0.1", 0)
        try:
            lines = _scrape(endpoint.port)
        finally:
            endpoint.close()
    finally:
        other.rt.close()
    assert 'retold_audit_answered{tenant="default"} 1.0' in lines
    assert 'retold_audit_rate{question="true",tenant="default"} 1.0' in lines
    assert 'retold_audit_rate{question="atomic",tenant="default"} 0.0' in lines
    assert 'retold_audit_open{tenant="default"} 1.0' in lines
    assert 'retold_audit_queue_age_seconds{tenant="default"} 3600.0' in lines
    # The other tenant has sampled nothing: no rate, an empty queue of age 0.
    assert 'retold_audit_open{tenant="acme"} 0.0' in lines
    assert 'retold_audit_queue_age_seconds{tenant="acme"} 0.0' in lines
    assert not any(line.startswith("retold_audit_rate") and 'tenant="acme"' in line for line in lines)


def test_an_unreadable_store_scrapes_as_down_not_as_an_error(world: World) -> None:
    def broken() -> dict[str, Metrics]:
        raise StoreError("store is damaged")

    endpoint = serve_metrics(broken, "127.0.0.1", 0)
    try:
        assert _scrape(endpoint.port) == ["retold_up 0.0"]
    finally:
        endpoint.close()


def test_a_worker_serves_the_endpoint_only_when_a_port_is_configured(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    from workers.prometheus_endpoint import start_endpoint

    assert start_endpoint(world.rt.config) is None  # metrics.port is unset by default
    port = free_port()
    config = world.rt.config.replace({"metrics": {"port": port}})
    endpoint = start_endpoint(config)
    assert endpoint is not None
    try:
        lines = _scrape(port)
        assert 'retold_sessions{state="open",tenant="default"} 1.0' in lines
        assert 'retold_queue_depth{queue="extraction"} 0.0' in lines  # the embedded broker, empty
        with caplog.at_level(logging.WARNING, logger="workers.prometheus_endpoint"):
            assert start_endpoint(config) is None  # a second worker on the same port
        assert f"metrics endpoint not started on 127.0.0.1:{port}" in caplog.text
    finally:
        endpoint.close()


def test_metrics_port_is_validated() -> None:
    from retold.config import read_config
    from retold.errors import ConfigError

    with pytest.raises(ConfigError, match="metrics.port"):
        read_config(overrides={"metrics": {"port": 70000}})
    assert read_config(overrides={"metrics": {"port": 9808}}).metrics.port == 9808

