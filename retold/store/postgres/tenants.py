"""The tenants of a PostgreSQL store.

Until row-level security binds each connection to one tenant, a PostgreSQL store holds
only the ``default`` tenant: adding another is refused rather than letting two customers
share rows that nothing but a predicate would keep apart.
"""

from __future__ import annotations

from retold.errors import StoreError
from retold.store.postgres.url import redact
from retold.tenant import DEFAULT_TENANT

__all__ = ["add_tenant", "drop_tenant", "list_tenants", "tenant_exists"]

_NOT_YET = ("a PostgreSQL store holds only the default tenant until row-level security binds "
            "connections to a tenant; use a SQLite store per host for more tenants")


def list_tenants(url: str) -> list[str]:
    return [DEFAULT_TENANT]


def tenant_exists(url: str, tenant: str) -> bool:
    return tenant == DEFAULT_TENANT


def add_tenant(url: str, tenant: str) -> None:
    raise StoreError(f"{redact(url)}: {_NOT_YET}")


def drop_tenant(url: str, tenant: str) -> list[str]:
    raise StoreError(f"{redact(url)}: {_NOT_YET}")
