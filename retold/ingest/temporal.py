"""Time-driven review (LLD 8.4): flag records whose ``review_at`` has arrived.

A bounded maintenance pass, not a consolidation: each due row is claimed by one
conditional UPDATE that sets ``review_flagged_at`` and appends ``record.review_due`` in the
same transaction, so racing workers flag and log every row once. Content, evidence and
lifecycle status never change: the passage of time is not evidence that a plan happened.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from retold.operations import TEMPORAL_REVIEWER, Operations

if TYPE_CHECKING:
    from retold.runtime import Runtime

__all__ = ["review_due"]


def review_due(runtime: Runtime) -> int:
    """Flag one batch (``ingestion.temporal_review_batch_size``) of due records as the
    ``temporal_reviewer`` actor; return how many this caller claimed."""
    return Operations(runtime).review_due(TEMPORAL_REVIEWER)
