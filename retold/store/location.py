"""Where a store lives: a SQLite file path or a PostgreSQL URL, where each tenant's data
lives in it, and how each opens and is checked.

``store.url`` (or ``--store``/``RETOLD_STORE`` given a URL) selects PostgreSQL; anything
else is a SQLite path. :func:`open_store` is the one factory the runtime, the CLI and the
workers call, and :func:`check_store_at` the one integrity check ``retold check``, the
worker's start-up and beat's periodic check run.

On SQLite a tenant is a file: the ``default`` tenant is the store file itself (so a store
written before tenants existed is that tenant, unchanged), and tenant ``T`` is
``<stem>.tenants/T.sqlite`` beside it. A connection to one file cannot read another, so a
code path that forgets the tenant reads only the tenant it was opened for, and dropping a
tenant deletes its file (docs/decisions.md, "A tenant is a file on SQLite").
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from retold.config import is_database_url
from retold.errors import ConfigError, StoreError, StoreMissingError
from retold.store.integrity import IntegrityReport, check_file
from retold.store.postgres.integrity import check_database
from retold.store.postgres.url import redact
from retold.store.store import Store
from retold.tenant import DEFAULT_TENANT, check_tenant

__all__ = ["add_tenant", "check_store_at", "drop_tenant", "is_database_url", "list_tenants", "missing_store",
           "open_store", "tenant_exists", "tenant_files", "tenant_store_path"]

_TENANT_SUFFIX = ".sqlite"
# What SQLite and Retold keep beside a store file: its journals and the damage mark.
_SIDECARS = ("-wal", "-shm", "-journal", "-damaged")


def _tenant_folder(path: str | Path) -> Path:
    base = Path(path)
    return base.with_name(f"{base.stem}.tenants")


def tenant_store_path(path: str | Path, tenant: str) -> Path:
    """The SQLite file that holds ``tenant`` in the store at ``path``."""
    check_tenant(tenant)
    if tenant == DEFAULT_TENANT:
        return Path(path)
    if str(path) == ":memory:":
        raise ConfigError(f"tenancy.tenant: an in-memory store holds only the {DEFAULT_TENANT} tenant, "
                          f"not {tenant!r}")
    return _tenant_folder(path) / f"{tenant}{_TENANT_SUFFIX}"


def tenant_files(path: str | Path, tenant: str) -> list[Path]:
    """Every file on disk that holds ``tenant``'s data in the SQLite store at ``path``:
    its database and whatever SQLite or Retold keeps beside it."""
    main = tenant_store_path(path, tenant)
    candidates = [main, *(main.with_name(main.name + suffix) for suffix in _SIDECARS)]
    return [file for file in candidates if file.exists()]


def _postgres_tenants() -> Any:
    from retold.store.postgres import tenants

    return tenants


def list_tenants(target: str | Path) -> list[str]:
    """The tenants of the store at ``target``, ``default`` first."""
    if is_database_url(target):
        return list(_postgres_tenants().list_tenants(str(target)))
    folder = _tenant_folder(target)
    named = sorted(file.name[:-len(_TENANT_SUFFIX)] for file in folder.glob(f"*{_TENANT_SUFFIX}")
                   if file.is_file()) if folder.is_dir() else []
    return [DEFAULT_TENANT, *(name for name in named if name != DEFAULT_TENANT)]


def tenant_exists(target: str | Path, tenant: str) -> bool:
    """Whether ``tenant`` has been added to the store at ``target`` (``default`` always has)."""
    check_tenant(tenant)
    if tenant == DEFAULT_TENANT:
        return True
    if is_database_url(target):
        return bool(_postgres_tenants().tenant_exists(str(target), tenant))
    return tenant_store_path(target, tenant).is_file()


def add_tenant(target: str | Path, tenant: str, **options: Any) -> bool:
    """Create ``tenant``'s namespace in the store at ``target`` (migrated, empty); False
    when it already exists, which changes nothing."""
    check_tenant(tenant)
    if tenant_exists(target, tenant):
        return False
    if is_database_url(target):
        _postgres_tenants().add_tenant(str(target), tenant)
        return True
    path = tenant_store_path(target, tenant)
    path.parent.mkdir(parents=True, exist_ok=True)
    Store(path, tenant=tenant, **options).close()
    return True


def drop_tenant(target: str | Path, tenant: str) -> list[str]:
    """Remove ``tenant`` and everything it holds from the store at ``target``; what was
    removed, for the operator's record. The ``default`` tenant is the store itself and is
    not dropped here. Processes still serving the tenant must be stopped first: a SQLite
    file another process holds open keeps its bytes until that process closes it."""
    check_tenant(tenant)
    if tenant == DEFAULT_TENANT:
        raise StoreError(f"the {DEFAULT_TENANT} tenant is the store itself and cannot be dropped; erase "
                         "its scopes with `retold erase` or delete the store")
    if not tenant_exists(target, tenant):
        raise StoreMissingError(f"no tenant {tenant!r} in store {_shown(target)}")
    if is_database_url(target):
        return list(_postgres_tenants().drop_tenant(str(target), tenant))
    removed = []
    for file in tenant_files(target, tenant):
        file.unlink()
        removed.append(str(file))
    return removed


def missing_store(target: str | Path) -> str | None:
    """Why there is no Retold store at ``target`` yet, with the command that creates one,
    or None when there is one (or something else there that opening it will refuse, such
    as another application's database). Reads only, and creates nothing: a command that
    only reads asks this first, so a mistyped path or database never becomes an empty
    store (docs/decisions.md, "Only migrate creates a store")."""
    shown = _shown(target)
    create = f"`retold migrate --store {shown}` creates one"
    if is_database_url(target):
        if _postgres_tenants().schema_version(str(target)) == 0:
            return f"no store at {shown}: the database holds no Retold schema; {create}"
        return None
    path = Path(target)
    if str(target) == ":memory:":
        return None
    if not path.exists():
        return f"no store at {shown}; {create}"
    if path.is_file() and _holds_no_table(path):
        return f"no store at {shown}: the file holds no tables; {create}"
    return None


def _holds_no_table(path: Path) -> bool:
    """An empty file, or a SQLite database without a table: what opening would turn into a
    store. Anything else, readable or not, is left for opening to judge."""
    try:
        conn = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
    except sqlite3.Error:
        return False
    try:
        return int(conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]) == 0
    except sqlite3.Error:
        return False
    finally:
        conn.close()


def _shown(target: str | Path) -> str:
    return redact(str(target)) if is_database_url(target) else str(target)


def open_store(target: str | Path, *, tenant: str = DEFAULT_TENANT, **options: Any) -> Store:
    """The store at ``target`` bound to ``tenant``: a
    :class:`~retold.store.postgres.store.PgStore` for a PostgreSQL URL (psycopg is imported
    only then), else the SQLite :class:`Store` of that tenant's file. ``options`` are the
    Store's keyword arguments."""
    check_tenant(tenant)
    if is_database_url(target):
        try:
            import psycopg  # noqa: F401  (the optional `postgres` extra)
        except ImportError as exc:
            raise StoreError(f"store {redact(str(target))} is a PostgreSQL database, which needs "
                             "psycopg: install the `postgres` extra (pip install 'retold[postgres]')"
                             ) from exc
        from retold.store.postgres.store import PgStore

        return PgStore(str(target), tenant=tenant, **options)
    path = tenant_store_path(target, tenant)
    # Opening a file creates it: a tenant that was never added must not start as an empty
    # file that writes then land in (the default tenant's file is the store, created so).
    if tenant != DEFAULT_TENANT and not path.is_file():
        raise StoreMissingError(f"no tenant {tenant!r} in store {_shown(target)}; add it with "
                                f"`retold tenant add {tenant}`")
    return Store(path, tenant=tenant, **options)


def check_store_at(target: str, *, quick: bool = False, busy_timeout: float = 30.0) -> IntegrityReport:
    """The integrity check of the store at ``target``: the agreement check with amcheck
    on a PostgreSQL URL, SQLite's page checks, the FTS check and the agreement check on a
    file (which also sets or clears its damage mark)."""
    if is_database_url(target):
        return check_database(target, quick=quick, busy_timeout=busy_timeout)
    return check_file(target, quick=quick, busy_timeout=busy_timeout)
