"""Freshness decay of retrieval scores."""

from __future__ import annotations

from datetime import timedelta

import pytest

from retold.config import FreshnessConfig
from retold.models import Candidate, Record
from retold.retrieve.freshness import apply_freshness
from retold.testing import T0, make_record

CFG = FreshnessConfig(episodic_half_life_days=30.0, floor=0.5)
NOW = T0 + timedelta(days=90)


def setup(*records: Record, score: float = 0.03) -> tuple[list[Candidate], dict[str, Record]]:
    candidates = [
        Candidate(r.id, fused_score=score - i * 0.001, fused_rank=i + 1) for i, r in enumerate(records)
    ]
    return candidates, {r.id: r for r in records}


def test_episodic_records_decay() -> None:
    episode = make_record(type="episodic", event_at=NOW - timedelta(days=30, hours=5))
    candidates, records = setup(episode)

    log = apply_freshness(candidates, records, NOW, CFG, time_window=False)

    (c,) = candidates
    assert c.freshness_multiplier == pytest.approx(0.5)
    assert c.score == pytest.approx(c.fused_score * 0.5)
    assert [record_id for record_id, _ in log] == [episode.id]
    assert log[0][1] == pytest.approx(0.5)


def test_decay_stops_at_the_floor_and_future_events_never_boost() -> None:
    ancient = make_record(type="episodic", event_at=NOW - timedelta(days=400))
    future = make_record(type="episodic", event_at=NOW + timedelta(days=3))
    candidates, records = setup(ancient, future)

    apply_freshness(candidates, records, NOW, CFG, time_window=False)

    by_id = {c.record_id: c for c in candidates}
    assert by_id[ancient.id].freshness_multiplier == 0.5
    assert by_id[future.id].freshness_multiplier == 1.0
    assert by_id[future.id].score == by_id[future.id].fused_score


def test_semantic_records_do_not_decay() -> None:
    fact = make_record(type="semantic", event_at=NOW - timedelta(days=365))
    how_to = make_record(type="procedural", event_at=NOW - timedelta(days=365))
    candidates, records = setup(fact, how_to)

    log = apply_freshness(candidates, records, NOW, CFG, time_window=False)

    assert log == []
    for c in candidates:
        assert c.freshness_multiplier is None
        assert c.score == c.fused_score


def test_since_or_until_window_disables_decay() -> None:
    episode = make_record(type="episodic", event_at=NOW - timedelta(days=60))
    candidates, records = setup(episode)

    log = apply_freshness(candidates, records, NOW, CFG, time_window=True)

    assert log == []
    assert candidates[0].freshness_multiplier is None
    assert candidates[0].score == candidates[0].fused_score


def test_decay_reorders_candidates_by_adjusted_score() -> None:
    old_episode = make_record(type="episodic", event_at=NOW - timedelta(days=60))
    fact = make_record(type="semantic", event_at=NOW - timedelta(days=60))
    candidates, records = setup(old_episode, fact)  # the episode fused first

    apply_freshness(candidates, records, NOW, CFG, time_window=False)

    assert [c.record_id for c in candidates] == [fact.id, old_episode.id]
    assert [c.fused_rank for c in candidates] == [2, 1]  # fused rank is kept for the log
