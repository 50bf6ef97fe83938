"""Maintenance the runtime never does on its own: expiry, retention, erasure, re-embedding,
snapshots (LLD 16)."""

from __future__ import annotations

from retold.store.base import StoreBase

__all__ = ["MaintenanceMixin"]


class MaintenanceMixin(StoreBase):
    """Bulk operations over the store."""
