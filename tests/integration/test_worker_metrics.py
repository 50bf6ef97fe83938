"""A real ``celery -A workers worker`` with ``metrics.port`` set serves the store's numbers
(a SQLite file or PostgreSQL) at ``/metrics``, on the embedded broker (no Redis needed); a
session ended after the worker started shows up in the next scrape."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from retold import build_runtime, load_config
from retold.ingest.session import InProcessScheduler
from retold.models import Principal
from retold.store.location import add_tenant
from tests.celery_support import store_yaml, wait_for
from tests.optional import need
from tests.ports import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120), pytest.mark.both_backends]


def _scrape(port: int) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            return str(response.read().decode())
    except (urllib.error.URLError, ConnectionError):
        return None


def test_a_worker_with_a_metrics_port_serves_the_stores_numbers(tmp_path: Path, store_target: str) -> None:
    need("prometheus_client")
    port = free_port()
    config = tmp_path / "config.yaml"
    config.write_text(store_yaml(store_target, tmp_path)
                      + f"embedding:\n  model: fake\nmetrics:\n  port: {port}\n")
    loaded = load_config(config)
    with build_runtime(loaded, scheduler=InProcessScheduler()) as rt:
        rt.hooks.on_turn(Principal("agent-a", "cleo", "s-open", None), "user", "Hello there, worker.")
    add_tenant(loaded.store.target, "acme")  # a second tenant, counted under its own label
    with build_runtime(loaded, scheduler=InProcessScheduler(), tenant="acme") as rt:
        rt.hooks.on_turn(Principal("agent-a", "cleo", "s-acme", None), "user", "Hello from acme.")
    log = tmp_path / "worker.log"
    env = {**os.environ, "RETOLD_CONFIG": str(config), "HF_HUB_OFFLINE": "1"}
    env.pop("RETOLD_STORE", None)
    env.pop("RETOLD_BROKER_URL", None)
    with log.open("w") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "workers", "worker", "--pool", "solo",
             "-Q", "extraction,maintenance", "--loglevel", "INFO",
             "--without-mingle", "--without-gossip"], stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        wait_for(lambda: _scrape(port) is not None, "the metrics endpoint", [log], timeout=60)
        first = _scrape(port) or ""
        assert "retold_up 1.0" in first and 'retold_sessions{state="open",tenant="default"} 1.0' in first
        assert 'retold_sessions{state="open",tenant="acme"} 1.0' in first
        with build_runtime(loaded, scheduler=InProcessScheduler()) as rt:
            rt.hooks.on_session_end(Principal("agent-a", "cleo", "s-open", None))
        second = _scrape(port) or ""
        assert 'retold_sessions{state="pending",tenant="default"} 1.0' in second
        assert 'retold_sessions{state="open",tenant="acme"} 1.0' in second
        assert f"metrics at http://127.0.0.1:{port}/metrics" in log.read_text()
    finally:
        worker.terminate()
        worker.wait(timeout=30)
