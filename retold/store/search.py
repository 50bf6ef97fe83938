"""Candidate-generator queries: FTS5 and entity lookups restricted to an eligible set (LLD 10.2)."""

from __future__ import annotations

from retold.store.base import StoreBase

__all__ = ["SearchMixin"]


class SearchMixin(StoreBase):
    """Lexical and entity candidate queries."""
