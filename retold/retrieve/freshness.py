"""Freshness: a factor after fusion (confidence is the other), a record's score decays
with its age at its type's half-life.

What happened recently is likelier to be what a question about events means, but an old
episode is still the answer when it is the only one, so the decay stops at a floor and
only reorders records whose fused scores are close. By default only episodic records
decay (``retrieval.freshness.episodic_half_life_days``); semantic and procedural records
keep their fused score, since supersession already retires a fact that stopped being
true. A memory pack can give each type a half-life of its own, or none.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Protocol

from retold.config import FreshnessConfig
from retold.models import Candidate

__all__ = ["Dated", "apply_freshness", "freshness_multiplier"]


class Dated(Protocol):
    """What freshness reads of a record: a full Record or the store's RecordMeta."""

    @property
    def type(self) -> str: ...
    @property
    def event_at(self) -> datetime: ...


def freshness_multiplier(record: Dated, now: datetime, cfg: FreshnessConfig,
                         half_life_days: float | None = None) -> float:
    """``max(floor, 0.5 ** (age_days / half_life))`` for one record; the half-life is
    ``half_life_days``, else the config's episodic one.

    Age counts whole days of ``now - event_at``; a future ``event_at`` counts as age 0,
    so a record can never be boosted above its fused score.
    """
    age_days = max((now - record.event_at).days, 0)
    decay: float = 0.5 ** (age_days / (half_life_days or cfg.episodic_half_life_days))
    return max(cfg.floor, decay)


def apply_freshness(
    candidates: list[Candidate],
    records: Mapping[str, Dated],
    now: datetime,
    cfg: FreshnessConfig,
    *,
    time_window: bool,
    half_lives: Mapping[str, float | None] | None = None,
) -> list[tuple[str, float]]:
    """Set ``freshness_multiplier`` and ``score`` on each candidate, then re-sort.

    A record whose type has a half-life in ``half_lives`` (by default only episodic, at
    the config's half-life) gets ``score = fused_score * multiplier``; a type with none
    keeps its fused score. So does every record when ``time_window`` is set (the request
    had ``since`` or ``until``), because the caller chose the time range. A candidate whose record is
    missing from ``records`` is left undecayed. ``candidates`` is sorted by the new score
    in place (stable, so equal scores keep fused order); the return value lists
    ``(record_id, multiplier)`` for every candidate that received a multiplier.
    """
    if half_lives is None:
        half_lives = {"episodic": cfg.episodic_half_life_days}
    adjusted: list[tuple[str, float]] = []
    for candidate in candidates:
        candidate.freshness_multiplier = None
        candidate.score = candidate.fused_score
        record = records.get(candidate.record_id)
        half_life = None if record is None else half_lives.get(record.type)
        if time_window or record is None or half_life is None:
            continue
        multiplier = freshness_multiplier(record, now, cfg, half_life)
        candidate.freshness_multiplier = multiplier
        candidate.score = candidate.fused_score * multiplier
        adjusted.append((candidate.record_id, multiplier))
    candidates.sort(key=lambda c: -c.score)
    return adjusted
