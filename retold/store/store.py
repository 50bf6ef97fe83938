"""Store: the one SQLite file that is Retold's source of truth.

One class per process and file, combined from one mixin per boundary over
:class:`retold.store.base.StoreBase` (the connection, the transaction helper and the
helpers every part shares). See docs/architecture.md, "The store".
"""

from __future__ import annotations

from retold.store.activation import ActivationMixin
from retold.store.audit import AuditMixin
from retold.store.browse import BrowseMixin
from retold.store.bundles import BundlesMixin
from retold.store.capacity import CapacityMixin
from retold.store.claims import ClaimsMixin
from retold.store.counts import CountsMixin
from retold.store.entities import EntitiesMixin
from retold.store.erasure import ErasureMixin
from retold.store.event_log import EventLogMixin
from retold.store.grants import GrantsMixin
from retold.store.hygiene import HygieneMixin
from retold.store.ids import IdsMixin
from retold.store.members import MembersMixin
from retold.store.pending import PendingMixin
from retold.store.pins import PinsMixin
from retold.store.portable import PortableMixin
from retold.store.profiles import ProfilesMixin
from retold.store.quality import QualityMixin
from retold.store.reclassify import ReclassifyMixin
from retold.store.records import RecordsMixin
from retold.store.retention import RetentionMixin
from retold.store.scope_rows import ScopeRowsMixin
from retold.store.search import SearchMixin
from retold.store.session_states import SessionStatesMixin
from retold.store.sessions import SessionsMixin
from retold.store.sweeps import SweepsMixin
from retold.store.turn_decisions import TurnDecisionsMixin
from retold.store.vectors import VectorsMixin

__all__ = ["Store"]


class Store(
    ActivationMixin,  # before RecordsMixin, which it extends
    BrowseMixin,  # the same
    RecordsMixin,
    VectorsMixin,
    EntitiesMixin,
    SessionsMixin,
    ClaimsMixin,
    GrantsMixin,
    MembersMixin,
    PinsMixin,
    HygieneMixin,  # before CapacityMixin, which it extends
    CapacityMixin,
    PortableMixin,
    PendingMixin,
    SearchMixin,
    ScopeRowsMixin,
    SweepsMixin,
    RetentionMixin,
    ErasureMixin,
    SessionStatesMixin,
    EventLogMixin,
    CountsMixin,
    ProfilesMixin,
    TurnDecisionsMixin,
    BundlesMixin,
    IdsMixin,
    ReclassifyMixin,
    QualityMixin,
    AuditMixin,
):
    """The store: records, vectors, entities, sessions and their extraction claims, grants,
    members, search logs and sweeps, activation and profile blocks, the operator's reads
    of session states, events and counts, turn decisions and bundle results, the ids a
    person names by part of them, the re-classification a changed memory pack asks for, the
    reads that measure search quality, and the extraction audit's queue."""
