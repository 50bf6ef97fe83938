"""Schema migrations and every read and write of the store (SQLite, or PostgreSQL through
``open_store``): no SQL lives outside this package."""

from retold.store.base import Embedding, NewEvent
from retold.store.eligible import EligibleSet
from retold.store.family import EmbeddingFamily
from retold.store.location import open_store
from retold.store.records import RecordWrite, Transition
from retold.store.store import Store
from retold.store.vectors import IndexChange, VectorSnapshot

__all__ = [
    "EligibleSet", "Embedding", "EmbeddingFamily", "IndexChange", "NewEvent", "RecordWrite", "Store",
    "Transition", "VectorSnapshot", "open_store",
]
