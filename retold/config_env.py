"""Where a process finds its configuration: one rule for agents, the CLI and workers.

An agent's runtime, the ``retold`` command and every Celery process read the same file and
the same variables in the same order, so a broker or store set once reaches all of them
(docs/decisions.md, "One configuration for agents and workers"). The layers, later ones
winning:

1. the defaults of :class:`~retold.config.Config`;
2. the config file: the path the caller names (``retold --config``), else ``RETOLD_CONFIG``;
3. ``RETOLD_STORE`` (``store.path``, or ``store.url`` when it is a PostgreSQL URL) and
   ``RETOLD_BROKER_URL`` (``queue.broker_url``);
4. the caller's own overrides (``retold --store``).

The environment is a parameter: the edges pass ``os.environ``, tests pass a dict, and
nothing here reads it on its own.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from retold.config import Config, is_database_url, load_config

__all__ = [
    "BROKER_ENV", "CONFIG_ENV", "STORE_ENV", "load_config_from_environment", "store_key", "store_override",
]

CONFIG_ENV = "RETOLD_CONFIG"
STORE_ENV = "RETOLD_STORE"
BROKER_ENV = "RETOLD_BROKER_URL"

# variable -> (block, key) it overrides
_OVERRIDES = {STORE_ENV: ("store", "path"), BROKER_ENV: ("queue", "broker_url")}


def store_key(target: str) -> str:
    """The ``store:`` key a ``--store``/``RETOLD_STORE`` value sets: ``url`` for a
    PostgreSQL URL, else ``path``."""
    return "url" if is_database_url(target) else "path"


def store_override(target: str) -> dict[str, Any]:
    """The ``store:`` values a ``--store``/``RETOLD_STORE`` value sets. A path also clears
    a URL set by an earlier layer: the URL would otherwise win over it, and the later
    layer would not (docs/decisions.md, "PostgreSQL as a shared store")."""
    if is_database_url(target):
        return {"url": target}
    return {"path": target, "url": None}


def load_config_from_environment(
    environ: Mapping[str, str],
    path: str | os.PathLike[str] | None = None,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
) -> Config:
    """The configuration this process runs with: defaults, the file (``path``, else
    ``$RETOLD_CONFIG``), the ``RETOLD_STORE`` / ``RETOLD_BROKER_URL`` overrides, then
    ``overrides``. An empty variable counts as unset."""
    merged: dict[str, dict[str, Any]] = {}
    for variable, (block, key) in _OVERRIDES.items():
        if value := environ.get(variable, "").strip():
            merged.setdefault(block, {}).update(store_override(value) if variable == STORE_ENV
                                                else {key: value})
    for block, values in (overrides or {}).items():
        merged.setdefault(block, {}).update(values)
    file = path if path is not None else (environ.get(CONFIG_ENV, "").strip() or None)
    return load_config(file, overrides=merged)
