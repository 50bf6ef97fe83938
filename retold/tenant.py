"""Tenant names: the namespace above every scope.

A tenant is one customer of a platform that runs Retold for many: its users, entities,
grants, sessions, records, logs and caches belong to it alone. A store with no tenant
configured serves the ``default`` tenant, exactly as a store did before tenants existed.
Where a tenant's data lives, and how a connection is bound to it, is the store's concern
(:mod:`retold.store.location`); this module only says what a tenant name may be, since
the same name becomes a file name on SQLite and a connection setting on PostgreSQL.
"""

from __future__ import annotations

import re

from retold.errors import ConfigError

__all__ = ["DEFAULT_TENANT", "check_tenant"]

DEFAULT_TENANT = "default"
"""The tenant of a store that names none: every store written before tenants existed."""

# Lower-case letters, digits, '-' and '_', starting with a letter or digit: safe as a file
# name on every file system (no case folding, no dot files, no separators) and as a
# PostgreSQL setting value without quoting.
_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")


def check_tenant(name: object, key: str = "tenant") -> str:
    """``name`` when it is a valid tenant name, else a one-line ConfigError naming ``key``."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigError(f"{key}: {name!r} is not a tenant name (1-63 lower-case letters, digits, "
                          "'-' or '_', starting with a letter or digit)")
    return name
