"""Schema migrations and every SQLite read and write (LLD 3)."""

from retold.store.eligible import EligibleSet
from retold.store.records import IndexChange, VectorSnapshot
from retold.store.store import Store

__all__ = ["EligibleSet", "IndexChange", "Store", "VectorSnapshot"]
