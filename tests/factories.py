"""Record factories shared by tests and benchmarks (no pytest imports)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from retold.models import Record, Scope
from retold.util import new_id

T0 = datetime(2026, 9, 3, 12, 0, tzinfo=UTC)


def make_record(**fields: Any) -> Record:
    """A valid confirmed semantic record in user:aditya, overridable field by field."""
    base = Record(
        id=new_id(),
        type="semantic",
        version=1,
        content="Aditya prefers concise technical explanations.",
        subject="ent_aditya/explanation_style",
        subject_entity_id=None,
        attribute="explanation_style",
        scope=Scope("user", "aditya"),
        source_kind="user_statement",
        source_ref="session:s1<turn:1>",
        creator_agent_id="research-agent",
        evidence="Keep answers concise.",
        created_at=T0,
        event_at=T0,
        expires_at=None,
        valid_from=None,
        valid_until=None,
        review_at=None,
        review_flagged_at=None,
        confidence=0.95,
        status="confirmed",
        supersedes_id=None,
        reinforcements=0,
        last_reinforced_at=None,
    )
    return replace(base, **fields)
