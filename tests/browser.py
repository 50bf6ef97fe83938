"""What the inspector's browser tests share: ``retold ui`` run in a process of its own, and
Debian's Chromium driven headless with a fresh profile."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.ports import free_port, wait_listening

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--no-first-run", "--disable-dev-shm-usage"]
WAIT = 30.0


@contextmanager
def inspector(*args: str) -> Iterator[str]:
    """``retold ui ARGS`` listening on a free port until the block ends; its URL."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "retold.cli", "ui", *args, "--listen", f"127.0.0.1:{port}"], cwd=ROOT,
        env={**os.environ, "HF_HUB_OFFLINE": "1"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_listening(port, proc, "the inspector", WAIT)
        yield f"http://127.0.0.1:{port}"
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=WAIT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=WAIT)


@contextmanager
def chromium(profile: Path) -> Iterator[Any]:
    """A headless Chromium context on a fresh user-data folder."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as driver:
        context = driver.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, headless=True, args=FLAGS)
        try:
            yield context
        finally:
            context.close()
