"""Store: the one SQLite file that is Retold's source of truth (LLD 3).

One class per process and file, combined from one mixin per concept; see
:mod:`retold.store.base` for the connection and the transaction helper.
"""

from __future__ import annotations

from retold.store.events import EventsMixin
from retold.store.records import RecordsMixin

__all__ = ["Store"]


class Store(RecordsMixin, EventsMixin):
    """The store: records, embeddings, events, entities, grants and sessions."""
