"""A deterministic sample of searchable records, each with someone who may read it.

Comparing two copies of a store means running the same searches on both. This module
picks the records to search for: live records (provisional or confirmed, not past their
expiry), evenly spaced over the store in ``seq`` order so the sample covers old and new
rows alike, and only records in a scope that some agent and user could search. For each
it names that reader: the agent and user of a private scope, else the first agent (by id)
with a read grant on the scope and a user who belongs to it. Whether the reader really
may read the record is the grant policy's decision, made by the caller.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from retold.models import ACTIVE_STATUSES, Scope
from retold.store.base import chunks, marks, ts
from retold.store.store import Store

__all__ = ["PLACEHOLDER_USER", "Reader", "SampledRecord", "sample_records"]

# The user of a project reader when no member is known: naming the project in the
# principal makes it a member, and this user owns nothing else.
PLACEHOLDER_USER = "retold-sample"


@dataclass(frozen=True)
class Reader:
    """Who searches for a sampled record."""

    agent_id: str
    user_id: str
    project_id: str | None = None


@dataclass(frozen=True)
class SampledRecord:
    """One record to search for, with the words a query can be built from."""

    record_id: str
    scope: Scope
    content: str
    attribute: str | None
    subject_name: str | None  # the canonical name of the entity the record is about
    reader: Reader


def sample_records(store: Store, limit: int, now: datetime) -> list[SampledRecord]:
    """Up to ``limit`` live records with a reader, evenly spaced in ``seq`` order; the same
    store gives the same sample."""
    if limit <= 0:
        return []
    with store.snapshot() as conn:
        rows = conn.execute(
            f"SELECT id, scope_kind, scope_id FROM records WHERE status IN ({marks(ACTIVE_STATUSES)})"
            " AND (expires_at IS NULL OR expires_at > ?) ORDER BY seq",
            [*ACTIVE_STATUSES, ts(now)]).fetchall()
        readers: dict[tuple[str, str], Reader | None] = {}
        for _, kind, ident in rows:
            if (kind, ident) not in readers:
                readers[(kind, ident)] = _reader(conn, kind, ident)
        readable = [(rid, kind, ident) for rid, kind, ident in rows if readers[(kind, ident)] is not None]
        step = len(readable) / limit
        chosen = (readable if len(readable) <= limit
                  else [readable[int(i * step)] for i in range(limit)])
        details = _details(conn, [rid for rid, _, _ in chosen])
    out = []
    for rid, kind, ident in chosen:
        content, attribute, name = details[rid]
        reader = readers[(kind, ident)]
        assert reader is not None
        out.append(SampledRecord(rid, Scope(kind, ident), content, attribute, name, reader))
    return out


def _reader(conn: Any, kind: str, ident: str) -> Reader | None:
    """Who could search this scope, or None when nobody could."""
    if kind == "agent":
        agent, _, user = ident.rpartition("/")
        return Reader(agent, user) if agent and user else None
    granted = conn.execute(
        "SELECT agent_id FROM grants WHERE scope_kind = ? AND scope_id = ? AND can_read != 0"
        " ORDER BY agent_id LIMIT 1", (kind, ident)).fetchone()
    if granted is None:
        return None
    if kind == "user":
        return Reader(granted[0], ident)
    member = conn.execute(
        "SELECT user_id FROM scope_members WHERE scope_kind = ? AND scope_id = ? ORDER BY user_id LIMIT 1",
        (kind, ident)).fetchone()
    if kind == "project":
        return Reader(granted[0], member[0] if member else PLACEHOLDER_USER, ident)
    return Reader(granted[0], member[0]) if member else None


def _details(conn: Any, record_ids: Sequence[str]) -> dict[str, tuple[str, str | None, str | None]]:
    found: dict[str, tuple[str, str | None, str | None]] = {}
    for chunk in chunks(record_ids):
        for rid, content, attribute, name in conn.execute(
                "SELECT r.id, r.content, r.attribute, e.canonical FROM records r"
                f" LEFT JOIN entities e ON e.id = r.subject_entity_id WHERE r.id IN ({marks(chunk)})",
                chunk).fetchall():
            found[rid] = (content, attribute, name)
    return found
