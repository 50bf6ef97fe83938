"""Store: the one SQLite file that is Retold's source of truth.

One class per process and file, combined from one mixin per boundary over
:class:`retold.store.base.StoreBase` (the connection, the transaction helper and the
helpers every part shares). See docs/architecture.md, "The store".
"""

from __future__ import annotations

from retold.store.entities import EntitiesMixin
from retold.store.erasure import ErasureMixin
from retold.store.grants import GrantsMixin
from retold.store.maintenance import MaintenanceMixin
from retold.store.records import RecordsMixin
from retold.store.retention import RetentionMixin
from retold.store.search import SearchMixin
from retold.store.sessions import SessionsMixin
from retold.store.vectors import VectorsMixin

__all__ = ["Store"]


class Store(
    RecordsMixin,
    VectorsMixin,
    EntitiesMixin,
    SessionsMixin,
    GrantsMixin,
    SearchMixin,
    MaintenanceMixin,
    RetentionMixin,
    ErasureMixin,
):
    """The store: records, vectors, entities, sessions, grants, search logs and sweeps."""
