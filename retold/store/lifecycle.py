"""Record lifecycle changes requested through the tools: confirm, expire, forget (LLD 11)."""

from __future__ import annotations

from retold.store.base import StoreBase

__all__ = ["LifecycleMixin"]


class LifecycleMixin(StoreBase):
    """Status changes on one record, each with its index_version bump."""
