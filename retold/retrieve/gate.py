"""The gate: whether a search answers, and how far down its fused list it reads.

Two steps, nothing else, so that whoever changes one can predict the result:

1. **Answer or abstain**, once per search. The signals (:mod:`retold.retrieve.signals`)
   weigh into one score, ``1 / (1 + exp(-(bias + sum(weight * signal))))``, fitted on
   labelled searches as the chance that the store holds an answer (benchmarks/fit_gate.py).
   The search answers when the score reaches the threshold of its trigger: low for a
   search the model asked for, which judges what it reads and should see the store's best
   guess; high for a host-issued one, which nobody asked for and must not pollute.
2. **The tail cut.** An answering search keeps the fused list down to the records whose
   score reaches ``tail_fraction`` of the top one: far below the best, a record is filler.

No record inside the kept list is dropped or moved on its own. Host-issued searches never
take session summaries: a digest of a whole conversation matches many turns loosely, and
the model did not ask. Duplicate collapse and the token budget may shorten the list after
this (docs/decisions.md, "How search decides").
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from retold.config import GateConfig
from retold.models import Candidate
from retold.retrieve.signals import SIGNAL_NAMES, Signals

__all__ = ["Decision", "GateResult", "answer_score", "decide", "gate"]

# Source kinds host-issued searches never return (module docstring).
HOST_EXCLUDED = ("session_summary",)


def answer_score(signals: Signals, cfg: GateConfig) -> float:
    """The fitted chance, 0 to 1, that the store holds an answer to the question."""
    total = cfg.bias + sum(getattr(cfg.weights, name) * getattr(signals, name) for name in SIGNAL_NAMES)
    return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, total))))


@dataclass(frozen=True)
class Decision:
    """Whether one search answers, and why."""

    answered: bool
    score: float
    threshold: float
    trigger: str
    signals: Signals
    deferred: bool = False  # a cross-encoder judges relevance instead

    def reason(self) -> str:
        """One line a user can read: the verdict, the score against the threshold, the signals."""
        if self.deferred:
            return "relevance is left to the cross-encoder"
        verdict = "answered" if self.answered else "nothing stored answers this"
        compare = ">=" if self.answered else "<"
        return (f"{verdict}: score {self.score:.2f} {compare} {self.threshold:.2f} ({self.trigger} "
                f"search); {self.signals.describe()}")

    def as_dict(self) -> dict[str, object]:
        return {"answered": self.answered, "score": round(self.score, 6), "threshold": self.threshold,
                "trigger": self.trigger, "signals": self.signals.as_dict(), "deferred": self.deferred}


def decide(signals: Signals, cfg: GateConfig, trigger: str, *, deferred: bool = False) -> Decision:
    """Step 1 for one search; ``deferred`` (a cross-encoder-only search) always answers and
    leaves relevance to the reranker's floor."""
    threshold = cfg.answer_at.host if trigger == "host" else cfg.answer_at.tool
    score = answer_score(signals, cfg)
    return Decision(deferred or score >= threshold, score, threshold, trigger, signals, deferred)


@dataclass
class GateResult:
    kept: list[Candidate]
    cut: list[tuple[str, str]] = field(default_factory=list)  # (record_id, why)
    empty_reason: str | None = None


def gate(
    candidates: Sequence[Candidate],
    decision: Decision,
    source_kinds: Mapping[str, str],
    tail_fraction: float,
) -> GateResult:
    """Both steps over ``candidates`` in score order; sets each kept record's ``gate_reason``
    (the search's own verdict is ``decision.reason()``).

    ``source_kinds`` maps each candidate to its record's source kind.
    """
    if not candidates:
        return GateResult([], [], "no candidate from any channel among readable records")
    if not decision.answered:
        return GateResult([], [], decision.reason())
    host = decision.trigger == "host"
    cut: list[tuple[str, str]] = []
    eligible: list[Candidate] = []
    for c in candidates:
        if host and source_kinds[c.record_id] in HOST_EXCLUDED:
            cut.append((c.record_id, f"a {source_kinds[c.record_id]} (host-issued search)"))
        else:
            eligible.append(c)
    top = eligible[0].score if eligible else 0.0
    floor = 0.0 if decision.deferred else tail_fraction * top
    kept: list[Candidate] = []
    share = f"({tail_fraction:.2f} x top {top:.3f})"
    for c in eligible:
        if c.score >= floor:
            c.gate_reason = (decision.reason() if decision.deferred
                             else f"kept: score {c.score:.3f} >= {floor:.3f} {share}")
            kept.append(c)
        else:
            cut.append((c.record_id, f"tail: score {c.score:.3f} < {floor:.3f} {share}"))
    empty = None if kept else "every candidate was a session summary, which host-issued searches skip"
    return GateResult(kept, cut, empty)
