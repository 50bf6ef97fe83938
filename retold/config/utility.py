"""``utility:`` - host-issued memory decided by need, not relevance: the gap planner, the
draft-relative admission judge, how long the whole decision may take, and the thresholds
``retold metrics --rollback-check`` applies. Kept beside ``retold.config`` (which includes
it in :class:`Config`) so that module stays one screenful per block.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["RollbackConfig", "UtilityConfig", "utility_errors"]


@dataclass(frozen=True, slots=True)
class RollbackConfig:
    """``utility.rollback:`` - when the served configuration should be taken back: any one
    breached over the turns counted makes ``retold metrics --rollback-check`` exit 4."""

    min_turns: int = 20  # fewer decided turns than this: too few to judge, nothing is breached
    max_failure_rate: float = 0.05  # share of turns whose decision failed and served the draft
    max_p95_ms: int = 6000  # p95 of the whole decision's time
    max_regeneration_rate: float = 0.5  # share of turns answered twice: memory should rarely change an answer


@dataclass(frozen=True, slots=True)
class UtilityConfig:
    """``utility:`` - the orchestrator for ``host_only`` and ``hybrid`` (docs/decisions.md,
    "Host-issued memory is decided by need")."""

    enabled: bool = False  # true: host-issued memory goes through gaps, a draft and admission
    planner_model: str = "claude-haiku-4-5-20251001"  # names a turn's information gaps
    admission_model: str = "claude-haiku-4-5-20251001"  # judges candidates against the draft
    max_gaps: int = 3  # gaps searched per turn; the planner's further gaps are dropped
    per_gap_k: int = 5  # records one gap's search returns at most
    timeout_ms: int = 8000  # the whole decision, planner to regeneration; past it the draft is served
    max_output_tokens: int = 1024  # cap on the planner's and the judge's answers
    rollback: RollbackConfig = field(default_factory=RollbackConfig)


def utility_errors(cfg: UtilityConfig) -> list[str]:
    """What the type check cannot judge: counts and limits that must be positive, rates
    that must be shares."""
    errors = [f"utility.{name}: must be at least 1" for name in ("max_gaps", "per_gap_k", "timeout_ms",
                                                                 "max_output_tokens")
              if getattr(cfg, name) < 1]
    for name in ("max_failure_rate", "max_regeneration_rate"):
        if not 0.0 <= getattr(cfg.rollback, name) <= 1.0:
            errors.append(f"utility.rollback.{name}: must be between 0 and 1")
    if cfg.rollback.max_p95_ms < 1 or cfg.rollback.min_turns < 1:
        errors.append("utility.rollback: max_p95_ms and min_turns must be at least 1")
    return errors
