"""Store: the one SQLite file that is Retold's source of truth (LLD 3).

One class per process and file, combined from one mixin per concept; see
:mod:`retold.store.base` for the connection and the transaction helper.
"""

from __future__ import annotations

from retold.store.entities import EntitiesMixin
from retold.store.erasure import ErasureMixin
from retold.store.events import EventsMixin
from retold.store.extraction import ExtractionMixin
from retold.store.grants import GrantsMixin
from retold.store.lifecycle import LifecycleMixin
from retold.store.maintenance import MaintenanceMixin
from retold.store.records import RecordsMixin
from retold.store.search import SearchMixin
from retold.store.search_log import SearchLogMixin
from retold.store.sessions import SessionsMixin

__all__ = ["Store"]


class Store(
    RecordsMixin,
    EntitiesMixin,
    SessionsMixin,
    GrantsMixin,
    EventsMixin,
    SearchMixin,
    SearchLogMixin,
    LifecycleMixin,
    MaintenanceMixin,
    ErasureMixin,
    ExtractionMixin,
):
    """The store: records, embeddings, entities, sessions, grants, events and search logs."""
