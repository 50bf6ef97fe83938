"""Flower against Redis with basic auth shows the extraction and maintenance queues."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[2]


def _get(url: str, auth: str | None) -> tuple[int, bytes]:
    request = urllib.request.Request(url)
    if auth:
        request.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, b""


@pytest.mark.redis
def test_flower_requires_basic_auth_and_lists_both_queues(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f"store:\n  path: {tmp_path / 'memory.sqlite'}\nembedding:\n  model: fake\n")
    port = free_port()
    env = {**os.environ, "RETOLD_CONFIG": str(config), "RETOLD_FLOWER_AUTH": "admin:secret",
           "RETOLD_BROKER_URL": "redis://127.0.0.1:6379/12"}
    flower = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "workers", "flower", f"--port={port}",
         "--address=127.0.0.1"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        url = f"http://127.0.0.1:{port}/api/queues/length"
        deadline = time.monotonic() + 45
        status, body = 0, b""
        while time.monotonic() < deadline:
            try:
                status, body = _get(url, "admin:secret")
                if status == 200:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        assert status == 200, "Flower did not answer in time"
        queues = {q["name"] for q in json.loads(body)["active_queues"]}
        assert queues == {"extraction", "maintenance"}
        assert _get(url, None)[0] == 401
        assert _get(url, "admin:wrong")[0] == 401
    finally:
        flower.terminate()
        try:
            flower.wait(15)
        except subprocess.TimeoutExpired:
            flower.kill()
