"""``retold demo`` end to end with the real shipped model, as `make demo` runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.model
def test_demo_answers_by_meaning_with_the_real_model(tmp_path: Path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "retold.cli", "demo", "--store", str(tmp_path / "demo.sqlite")],
        capture_output=True, text=True, timeout=180, env=env,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "wrote 4 memories; vector index reload: 4 rows" in out
    assert "'how should answers to Aditya be written' -> 'Aditya prefers concise" in out
    assert "'commit message format' -> 'The project uses Conventional Commits" in out
