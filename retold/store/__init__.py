"""Schema migrations and every SQLite read and write (LLD 3)."""

from retold.store.eligible import EligibleSet
from retold.store.store import IndexChange, Store, VectorSnapshot

__all__ = ["EligibleSet", "IndexChange", "Store", "VectorSnapshot"]
