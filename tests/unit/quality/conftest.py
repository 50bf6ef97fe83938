"""The deployment the quality tests capture from and evaluate on, on each backend."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.golden_world import GoldenWorld, build


@pytest.fixture
def golden_world(tmp_path: Path, store_target: str) -> Iterator[GoldenWorld]:
    made = build(tmp_path, store_target)
    yield made
    made.world.rt.close()
