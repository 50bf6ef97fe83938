"""The README's "Use it from Python" example runs as written, with the real model."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.model
def test_readme_python_example_runs_and_finds_the_memory(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    match = re.search(r"## Use it from Python\n\n```python\n(.*?)```", readme, re.S)
    assert match is not None, "README lost its Python example"
    (tmp_path / "example.py").write_text(match.group(1))
    shutil.copy(ROOT / "config.yaml", tmp_path / "config.yaml")
    result = subprocess.run(
        [sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("created ")
    assert "['Aditya prefers concise answers.'] None" in result.stdout
    assert "semantic · confirmed · user_statement" in result.stdout
