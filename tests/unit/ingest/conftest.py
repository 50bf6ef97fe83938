from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.ingest.world import World, make_world


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    made = make_world(tmp_path)
    yield made
    made.rt.close()
