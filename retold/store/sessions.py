"""Sessions and their numbered turns (LLD 3.5, 12)."""

from __future__ import annotations

from retold.store.base import StoreBase

__all__ = ["SessionsMixin"]


class SessionsMixin(StoreBase):
    """Rows of ``sessions`` and ``session_turns``."""
