"""Optional extras in tests: skip cleanly where a package is not installed, but fail in CI,
where `make test` installs every extra and a missing one is a broken install."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def need(module: str) -> ModuleType:
    """Import ``module``; outside CI, skip the calling test (or module) when it is missing."""
    if IN_CI:
        return importlib.import_module(module)
    return pytest.importorskip(module)
