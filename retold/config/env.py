"""Where a process finds its configuration: one rule for agents, the CLI and workers.

An agent's runtime, the ``retold`` command and every Celery process read the same file and
the same variables in the same order, so a broker or store set once reaches all of them
(docs/decisions.md, "One configuration for agents and workers"). The layers, later ones
winning:

1. the defaults of :class:`~retold.config.Config`;
2. the config file: the path the caller names (``retold --config``, ``load_config(path)``),
   else ``RETOLD_CONFIG``, else ``config.yaml`` in the working folder if there is one;
3. ``RETOLD_STORE`` (``store.path``, or ``store.url`` when it is a PostgreSQL URL),
   ``RETOLD_BROKER_URL`` (``queue.broker_url``) and ``RETOLD_TENANT`` (``tenancy.tenant``);
4. the caller's own overrides (``retold --store``).

``store.url`` wins over ``store.path`` inside one layer, but a later layer that names a
store replaces the whole store target: a SQLite path from ``RETOLD_STORE`` or ``--store``
clears a URL an earlier layer set, so a shared config file naming the PostgreSQL store never
silently beats the file this process was told to use.

So an example run from an empty folder gets the defaults, and one run beside a
``config.yaml``, or under the variables a container sets, gets what the workers get.

The environment is a parameter of :func:`load_config_from_environment`: the edges pass
``os.environ``, tests pass a dict. :func:`load_config` is the public front door that
passes the process's own.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from retold.config import Config, is_database_url, read_config

__all__ = [
    "BROKER_ENV", "CONFIG_ENV", "LOCAL_CONFIG", "SCRIPTED_MODEL_ENV", "STORE_ENV", "TENANT_ENV",
    "load_config", "load_config_from_environment", "store_key", "store_target",
]

CONFIG_ENV = "RETOLD_CONFIG"
STORE_ENV = "RETOLD_STORE"
BROKER_ENV = "RETOLD_BROKER_URL"
TENANT_ENV = "RETOLD_TENANT"
# Read by the runtime, not the config: it swaps the adapters' chat model for a scripted one.
SCRIPTED_MODEL_ENV = "RETOLD_SCRIPTED_MODEL"
LOCAL_CONFIG = "config.yaml"  # looked for in the working folder when nothing names a file

# variable -> (block, key) it overrides
_OVERRIDES = {STORE_ENV: ("store", "path"), BROKER_ENV: ("queue", "broker_url"),
              TENANT_ENV: ("tenancy", "tenant")}


def store_key(target: str) -> str:
    """The ``store:`` key a ``--store``/``RETOLD_STORE`` value sets: ``url`` for a
    PostgreSQL URL, else ``path``."""
    return "url" if is_database_url(target) else "path"


def store_target(target: str) -> dict[str, str | None]:
    """The ``store:`` keys a ``--store``/``RETOLD_STORE`` value sets: the URL, or the path
    with any earlier URL cleared (a URL would otherwise win over it)."""
    return {"url": target} if store_key(target) == "url" else {"path": target, "url": None}


def load_config_from_environment(
    environ: Mapping[str, str],
    path: str | os.PathLike[str] | None = None,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
    cwd: str | os.PathLike[str] | None = None,
) -> Config:
    """The configuration this process runs with: defaults, the file (``path``, else
    ``$RETOLD_CONFIG``, else ``config.yaml`` in ``cwd`` (the working folder) if present),
    the ``RETOLD_STORE`` / ``RETOLD_BROKER_URL`` overrides, then ``overrides``. An empty
    variable counts as unset. A file that is named but missing is an error; only the
    looked-for ``config.yaml`` may be absent."""
    merged: dict[str, dict[str, Any]] = {}
    for variable, (block, key) in _OVERRIDES.items():
        if value := environ.get(variable, "").strip():
            keys = store_target(value) if variable == STORE_ENV else {key: value}
            merged.setdefault(block, {}).update(keys)
    for block, values in (overrides or {}).items():
        layer = dict(values)
        if block == "store" and "path" in layer and "url" not in layer:
            layer["url"] = None  # a path named here beats a URL from the file or RETOLD_STORE
        merged.setdefault(block, {}).update(layer)
    file = path if path is not None else (environ.get(CONFIG_ENV, "").strip() or None)
    if file is None:
        local = Path(cwd if cwd is not None else Path.cwd()) / LOCAL_CONFIG
        file = local if local.is_file() else None
    return read_config(file, overrides=merged)


def load_config(
    path: str | os.PathLike[str] | None = None,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
) -> Config:
    """The configuration, found the way every Retold process finds it: ``path``, else
    ``$RETOLD_CONFIG``, else ``./config.yaml`` if present, else the defaults; then
    ``RETOLD_STORE`` / ``RETOLD_BROKER_URL``; then ``overrides`` (a nested mapping such as
    ``{"store": {"path": "mem.sqlite"}}``), which win. Bad values raise one
    :class:`~retold.errors.ConfigError` naming each key.

    :func:`retold.config.read_config` is the same without the variables and the lookup.
    """
    return load_config_from_environment(os.environ, path, overrides)
