"""What the turn decisions add up to, per bundle, and whether one should be taken back.

``retold metrics`` prints :func:`turn_stats`; ``--rollback-check`` applies the
``utility.rollback`` thresholds to them and exits 4 when any is breached, so a deploy
script or a cron job can take a configuration back without reading the numbers itself.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from retold.config.utility import RollbackConfig
from retold.observability import nearest_rank
from retold.store.turn_decisions import DecisionSummary

__all__ = ["TurnStats", "rollback_breaches", "turn_stats"]


@dataclass(frozen=True)
class TurnStats:
    """One bundle's decided turns. Rates are shares of ``turns``; ``admitted_rate`` is
    the share of turns where the judge admitted at least one record (shadow turns count)."""

    turns: int
    dispositions: dict[str, int]
    admitted_rate: float
    regeneration_rate: float
    failure_rate: float
    p50_ms: float
    p95_ms: float
    hosted_tokens: int


def turn_stats(summaries: Sequence[DecisionSummary]) -> dict[str, TurnStats]:
    """Per bundle, in bundle order."""
    by_bundle: dict[str, list[DecisionSummary]] = {}
    for row in summaries:
        by_bundle.setdefault(row.bundle, []).append(row)
    out = {}
    for bundle, rows in sorted(by_bundle.items()):
        n = len(rows)
        kinds = Counter(r.disposition for r in rows)
        times = sorted(r.total_ms for r in rows)
        out[bundle] = TurnStats(
            turns=n, dispositions=dict(sorted(kinds.items())),
            admitted_rate=round(sum(1 for r in rows if r.admitted) / n, 4),
            regeneration_rate=round(kinds["regenerated"] / n, 4),
            failure_rate=round(kinds["failed"] / n, 4),
            p50_ms=nearest_rank(times, 0.5), p95_ms=nearest_rank(times, 0.95),
            hosted_tokens=sum(r.hosted_tokens for r in rows))
    return out


def rollback_breaches(stats: dict[str, TurnStats], limits: RollbackConfig) -> list[str]:
    """One line per breached threshold, naming the bundle, the value and the limit; a
    bundle with fewer than ``min_turns`` decided turns is not judged."""
    breaches = []
    for bundle, s in stats.items():
        if s.turns < limits.min_turns:
            continue
        for name, value, limit in (("failure rate", s.failure_rate, limits.max_failure_rate),
                                   ("regeneration rate", s.regeneration_rate, limits.max_regeneration_rate),
                                   ("p95 ms", s.p95_ms, float(limits.max_p95_ms))):
            if value > limit:
                breaches.append(f"bundle {bundle}: {name} {value:g} over utility.rollback's {limit:g}"
                                f" ({s.turns} turns)")
    return breaches

