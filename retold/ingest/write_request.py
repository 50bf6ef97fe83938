"""What a write asks for and what it answers: the request, its result or structured
error, and what its checks settled before the transaction (the admission, the provenance
the evidence check settled, the claim made ready to decide). Shared by the ingestor, the
tool handlers, the host and extraction; ``retold.ingest.ingestor`` re-exports them."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from retold.models import EntityMention, Scope
from retold.policy.sensitivity import Sensitivity

__all__ = ["Admission", "Claim", "Provenance", "Refusal", "WriteError", "WriteRequest", "WriteResult"]


@dataclass(frozen=True)
class WriteRequest:
    """One memory to write. ``target`` is a symbolic label offered to the model
    (``personal``, ``current_project``) or, from trusted host and extraction code, a
    concrete Scope; None means ``personal``."""

    type: str
    content: str
    attribute: str | None = None
    target: str | Scope | None = None
    source_kind: str = "agent_inference"
    evidence: str | None = None
    evidence_turn: int | None = None
    event_at: datetime | None = None
    valid_from: datetime | None = None
    valid_until: datetime | None = None
    review_at: datetime | None = None
    entities: tuple[EntityMention, ...] = ()
    tags: tuple[str, ...] = ()
    # The session extractor's sensitivity label (an extractor_label class of the pack).
    # The ingestor reads it on extraction writes only; a memory_write cannot set it.
    sensitivity_label: str | None = None


@dataclass(frozen=True)
class WriteError:
    code: str  # a structured error code (invalid_input, scope_not_writable, ...)
    message: str
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class WriteResult:
    """What a write did: the outcome string (``created``, ``reinforced``,
    ``superseded:<id>``, ``conflict:<id>``, ...), or the error it returned."""

    outcome: str
    record_id: str | None
    status: str | None
    note: str | None
    timings_ms: dict[str, float]
    error: WriteError | None = None
    event_id: str | None = None
    # Records other than this one whose activation must be judged again once the write
    # has committed: the incumbent a held contradiction sent to review beside it.
    rejudge: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.error is None


class Refusal(Exception):
    """A write refused with a structured error; nothing was written."""

    def __init__(self, code: str, message: str, **details: Any) -> None:
        super().__init__(message)
        self.error = WriteError(code, message, details)


@dataclass
class Provenance:
    source_kind: str
    source_ref: str | None
    evidence: str | None
    notes: list[str]
    entailment: float | str | None  # a score, "not_checked", or None when not scored


@dataclass(frozen=True)
class Admission:
    """What the request's checks settled: the scope written to and the normalised
    attribute (None for an episodic record)."""

    scope: Scope
    attribute: str | None


@dataclass(frozen=True)
class Claim:
    """A write made ready to decide, before its transaction: the settled provenance, the
    sensitivity class of its text, and its vector, or None with why it is late
    (``pending``; the backfill embeds it)."""

    provenance: Provenance
    sensitivity: Sensitivity | None
    vector: np.ndarray | None
    pending: str | None
