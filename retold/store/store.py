"""Store: the one SQLite file that is Retold's source of truth.

One class per process and file, combined from one mixin per boundary over
:class:`retold.store.base.StoreBase` (the connection, the transaction helper and the
helpers every part shares). See docs/architecture.md, "The store".
"""

from __future__ import annotations

from retold.store.activation import ActivationMixin
from retold.store.entities import EntitiesMixin
from retold.store.erasure import ErasureMixin
from retold.store.grants import GrantsMixin
from retold.store.maintenance import MaintenanceMixin
from retold.store.profiles import ProfilesMixin
from retold.store.records import RecordsMixin
from retold.store.search import SearchMixin
from retold.store.sessions import SessionsMixin
from retold.store.vectors import VectorsMixin

__all__ = ["Store"]


class Store(
    ActivationMixin,  # before RecordsMixin, which it extends
    RecordsMixin,
    VectorsMixin,
    EntitiesMixin,
    SessionsMixin,
    GrantsMixin,
    SearchMixin,
    MaintenanceMixin,
    ErasureMixin,
    ProfilesMixin,
):
    """The store: records, vectors, entities, sessions, grants, search logs, sweeps,
    activation and profile blocks."""
