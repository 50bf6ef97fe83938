"""Entities, aliases and record links (LLD 3.4, 9)."""

from __future__ import annotations

from retold.store.base import StoreBase

__all__ = ["EntitiesMixin"]


class EntitiesMixin(StoreBase):
    """Rows of ``entities``, ``entity_aliases`` and ``record_entities``."""
