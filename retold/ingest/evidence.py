"""Evidence validation: does a quote from the transcript support the claimed source?

Both write paths (``memory_write`` and session extraction) call :func:`validate_evidence`,
so an explicit write and an extractor candidate meet the same standard.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal, cast, get_args

from retold.config import SourceRanks
from retold.models import EvidenceCheck, Role, Turn

__all__ = [
    "EVIDENCE_NOT_FOUND",
    "EVIDENCE_NOT_PROVIDED",
    "EvidenceKind",
    "normalize_ws",
    "session_of",
    "source_ref",
    "turn_of",
    "validate_evidence",
]

EvidenceKind = Literal["user_statement", "tool_result", "agent_inference"]
"""The source kinds a transcript quote can support; ``system`` and ``session_summary``
are written by the host and the extractor and never pass through evidence checks."""

EVIDENCE_NOT_PROVIDED = "evidence not provided"
EVIDENCE_NOT_FOUND = "evidence not found in session"

_EVIDENCE_KINDS: tuple[str, ...] = get_args(EvidenceKind)

# The highest source kind each kind of supporting turn can back: only the user's own words
# support a user statement, and an assistant turn supports no more than an inference.
_SUPPORTED: dict[Role, EvidenceKind] = {
    "user": "user_statement",
    "tool": "tool_result",
    "assistant": "agent_inference",
}


def normalize_ws(text: str) -> str:
    """Collapse every run of whitespace (spaces, tabs, newlines) to one space and strip."""
    return " ".join(text.split())


def source_ref(session_id: str, turn: int) -> str:
    """The ``source_ref`` of a matched turn: ``session:<id><turn:n>``."""
    return f"session:{session_id}<turn:{turn}>"


def session_of(ref: str | None) -> str | None:
    """The session a ``session:<id>`` or ``session:<id><turn:n>`` reference names; None for
    any other reference (a tool call id, a document id) or none."""
    if not ref or not ref.startswith("session:"):
        return None
    body = ref.removeprefix("session:")
    head, turn, _ = body.rpartition("<turn:")
    return (head if turn else body) or None


def turn_of(ref: str | None) -> tuple[str, int] | None:
    """The (session, turn number) a ``session:<id><turn:n>`` reference names; None for a
    reference to a whole session or to anything else."""
    session_id, text = session_of(ref), ref or ""
    number = text.rpartition("<turn:")[2].removesuffix(">")
    if session_id is None or not text.endswith(">") or "<turn:" not in text or not number.isdigit():
        return None
    return session_id, int(number)


def _rank(ranks: Mapping[str, int] | SourceRanks, kind: str) -> int:
    if isinstance(ranks, SourceRanks):
        return int(getattr(ranks, kind))
    return int(ranks[kind])


def validate_evidence(
    turns: Sequence[Turn],
    quote: str | None,
    claimed: str,
    *,
    turn_hint: int | None = None,
    min_characters: int,
    min_words: int,
    source_rank: Mapping[str, int] | SourceRanks,
) -> EvidenceCheck:
    """Check ``quote`` against one session's transcript and settle the source kind.

    The whole whitespace-normalised quote must appear inside a single normalised turn: a
    paraphrase, or a quote that spans two turns, is not evidence. ``turn_hint`` (a turn
    number) restricts the search to that turn. A quote from a turn that supports less
    authority than ``claimed`` (by ``policy.source_rank``) is downgraded with a note; a
    caller that claims less than the turn supports keeps its lower claim.

    ``claimed`` must be ``user_statement``, ``tool_result`` or ``agent_inference``;
    anything else raises ValueError, since callers reject host- and extractor-owned kinds
    before asking for evidence.
    """
    if claimed not in _EVIDENCE_KINDS:
        raise ValueError(
            f"claimed source kind must be one of {', '.join(_EVIDENCE_KINDS)}, got {claimed!r}"
        )
    kind = cast(EvidenceKind, claimed)  # checked just above
    q = normalize_ws(quote or "")
    if not q:
        return EvidenceCheck(False, None, None, "agent_inference", EVIDENCE_NOT_PROVIDED)
    # The quote must be substantial enough to support a direct claim
    # (ingestion.evidence.min_characters and min_words).
    if len(q) < min_characters:
        return EvidenceCheck(
            False, None, None, "agent_inference",
            f"evidence too short: a quote needs at least {min_characters} characters",
        )
    if len(q.split(" ")) < min_words:
        return EvidenceCheck(
            False, None, None, "agent_inference",
            f"evidence too short: a quote needs at least {min_words} words",
        )
    candidates = [t for t in turns if turn_hint is None or t.turn == turn_hint]
    hit = next((t for t in candidates if q in normalize_ws(t.content)), None)
    if hit is None:
        return EvidenceCheck(False, None, None, "agent_inference", EVIDENCE_NOT_FOUND)
    supported = _SUPPORTED[hit.role]
    if _rank(source_rank, kind) > _rank(source_rank, supported):
        return EvidenceCheck(
            True, hit.turn, hit.role, supported,
            f"downgraded from {kind}: quote is from a {hit.role} turn",
        )
    return EvidenceCheck(True, hit.turn, hit.role, kind, None)
