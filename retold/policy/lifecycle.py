"""Source authority and record lifecycle: ranks, initial status and expiry, reinforcement.

The initial ``confidence`` of each source kind is set here; search weighs it as one factor
after fusion (:mod:`retold.retrieve.confidence`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from retold.config import IngestionConfig, PolicyConfig, SourceRanks
from retold.models import Record, RecordStatus

__all__ = ["Lifecycle", "Reinforcement"]

_INITIAL_CONFIDENCE = {
    "user_statement": 0.95,
    "system": 0.90,
    "tool_result": 0.85,
    "session_summary": 0.80,
    "agent_inference": 0.60,
}
_CONFIDENCE_STEP = 0.1
_CONFIDENCE_CAP = 0.99


@dataclass(frozen=True)
class Reinforcement:
    """The state a counted reinforcement leaves a record in."""

    record: Record
    confirmed: bool  # this reinforcement promoted a provisional record
    provenance_upgraded: bool  # a higher-ranked source replaced the stored one


class Lifecycle:
    """The lifecycle rules, bound to the configured ranks and TTLs."""

    def __init__(self, policy: PolicyConfig, ingestion: IngestionConfig) -> None:
        self._ranks = policy.source_rank
        self._ingestion = ingestion

    @property
    def ranks(self) -> SourceRanks:
        return self._ranks

    def rank(self, source_kind: str) -> int:
        """Configured authority of a source kind (``policy.source_rank``)."""
        return int(getattr(self._ranks, source_kind))

    @staticmethod
    def initial_status(source_kind: str) -> RecordStatus:
        return "provisional" if source_kind == "agent_inference" else "confirmed"

    @staticmethod
    def initial_confidence(source_kind: str) -> float:
        return _INITIAL_CONFIDENCE[source_kind]

    def initial_expiry(self, source_kind: str, now: datetime) -> datetime | None:
        if source_kind == "agent_inference":
            return self.provisional_expiry(now)
        if source_kind == "session_summary":
            return now + timedelta(days=self._ingestion.summary_ttl_days)
        return None

    def provisional_expiry(self, now: datetime) -> datetime:
        """Every provisional row, a lower-authority conflict included, expires: nothing stays
        active forever without independent support."""
        return now + timedelta(days=self._ingestion.provisional_ttl_days)

    def has_authority(self, new: Record, old: Record) -> bool:
        """Rank first, then the later event, then the later write: a user statement outranks
        a tool result even when the tool result describes a later event."""
        if self.rank(new.source_kind) != self.rank(old.source_kind):
            return self.rank(new.source_kind) > self.rank(old.source_kind)
        if new.event_at != old.event_at:
            return new.event_at > old.event_at
        return new.created_at >= old.created_at

    def authority_key(self, record: Record) -> tuple[int, datetime, datetime]:
        """Sort key: the highest is the authority incumbent among several records."""
        return (self.rank(record.source_kind), record.event_at, record.created_at)

    def reinforce(
        self,
        record: Record,
        now: datetime,
        *,
        source_kind: str,
        source_ref: str | None,
        evidence: str | None,
    ) -> Reinforcement:
        """One counted, independent observation. Returns the updated copy.

        A higher-ranked observation also replaces the stored provenance; when that
        source starts confirmed (anything but an inference), the record is confirmed and
        loses its provisional expiry, since a user statement cannot stay provisional.
        """
        updated = replace(
            record,
            reinforcements=record.reinforcements + 1,
            last_reinforced_at=now,
            confidence=min(_CONFIDENCE_CAP, record.confidence + _CONFIDENCE_STEP),
        )
        upgraded = self.rank(source_kind) > self.rank(record.source_kind)
        if upgraded:
            updated = replace(
                updated,
                source_kind=source_kind,  # type: ignore[arg-type]  # checked by the caller
                source_ref=source_ref,
                evidence=evidence,
                confidence=max(updated.confidence, self.initial_confidence(source_kind)),
            )
        confirmed = False
        if updated.status == "provisional":
            updated = replace(updated, expires_at=self.provisional_expiry(now))
            enough = updated.reinforcements >= self._ingestion.reinforcements_to_confirm
            if enough or (upgraded and self.initial_status(source_kind) == "confirmed"):
                updated = replace(updated, status="confirmed", expires_at=None)
                confirmed = True
        return Reinforcement(updated, confirmed, upgraded)
