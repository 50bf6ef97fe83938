"""No progress bars from the model libraries in the CLI's output or a worker's log, with
the real packaged model loaded through sentence-transformers (which draws "Loading
weights" while transformers loads it, and "Batches" per encode when logging is at INFO,
as in a Celery worker)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from retold import build_runtime, load_config
from retold.models import Scope
from retold.quiet import QUIET_ENVIRONMENT
from retold.testing import make_record

pytestmark = [pytest.mark.model, pytest.mark.slow]
BARS = ("Loading weights", "Batches", "it/s]")

WORKER = """
import logging
logging.basicConfig(level=logging.INFO)  # a Celery worker's level: sentence-transformers draws bars at INFO
from workers.process_runtime import open_runtime
rt = open_runtime()
rt.embedder.embed_documents(["one", "two"])
rt.close()
"""


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    config = tmp_path / "config.yaml"
    config.write_text("embedding:\n  backend: sentence-transformers\nqueue:\n  scheduler: in_process\n")
    store = tmp_path / "memory.sqlite"
    with build_runtime(load_config(config, overrides={"store": {"path": str(store)}})) as rt:
        rt.store.write_record(make_record(scope=Scope("user", "u"), content="Walks along the river."))
        rt.host.grant("a", Scope("user", "u"), read=True, write=False)  # the search reads what it finds
    env = {k: v for k, v in os.environ.items() if k not in QUIET_ENVIRONMENT}
    return config, store, {**env, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}


def test_a_cli_search_that_loads_the_model_prints_no_bars(setup: tuple[Path, Path, dict[str, str]]) -> None:
    config, store, env = setup
    result = subprocess.run(
        [sys.executable, "-m", "retold.cli", "search", "--agent", "a", "--user", "u", "--store", str(store),
         "--config", str(config), "river"], capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr
    assert not [bar for bar in BARS if bar in result.stderr + result.stdout], result.stderr


def test_a_worker_process_loading_the_model_logs_no_bars(setup: tuple[Path, Path, dict[str, str]]) -> None:
    config, store, env = setup
    result = subprocess.run(
        [sys.executable, "-c", WORKER], capture_output=True, text=True, timeout=300,
        env={**env, "RETOLD_CONFIG": str(config), "RETOLD_STORE": str(store)})
    assert result.returncode == 0, result.stderr
    assert not [bar for bar in BARS if bar in result.stderr + result.stdout], result.stderr
