"""One search_log row per memory_search (LLD 3.6, 10.1)."""

from __future__ import annotations

from retold.store.base import StoreBase

__all__ = ["SearchLogMixin"]


class SearchLogMixin(StoreBase):
    """Rows of ``search_log``."""
