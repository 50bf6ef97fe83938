"""``reranker:`` and ``retrieval:``: how a search finds, fuses, gates and logs candidates.

Kept apart from :mod:`retold.config` for size only; :mod:`retold.config` re-exports every
block, so callers import them from there.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "FreshnessConfig",
    "NamedPeriodsConfig",
    "FusionConfig",
    "GateConfig",
    "PerTrigger",
    "RerankerConfig",
    "RetrievalConfig",
    "RewriteConfig",
    "SearchLogConfig",
    "SignalWeights",
    "TriggerConfig",
    "upgrade_trigger_names",
]

RerankMode = Literal["rrf_cross_encoder", "cross_encoder_only"]
RerankOnFailure = Literal["fallback", "fail"]
TriggerMode = Literal["tool_only", "host_only", "hybrid"]
LogWrites = Literal["background", "inline"]


@dataclass(frozen=True, slots=True)
class RerankerConfig:
    """``reranker:`` - the optional cross-encoder pass after duplicate collapse."""

    enabled: bool = False
    model: str = "BAAI/bge-reranker-v2-m3"
    candidates: int = 30
    floor: float | None = None  # None = uncalibrated, so rejected when enabled
    budget_mean_ms: float = 100.0
    batch_size: int = 32
    mode: RerankMode = "rrf_cross_encoder"
    timeout_ms: int = 2000
    on_failure: RerankOnFailure = "fallback"


@dataclass(frozen=True, slots=True)
class RewriteConfig:
    """``retrieval.rewrite:`` - hosted query rewriting before search."""

    enabled: bool = False
    model: str = "claude-haiku-4-5-20251001"
    max_context_chars: int = 2000
    timeout_ms: int = 800
    max_output_tokens: int = 512


@dataclass(frozen=True, slots=True)
class TriggerConfig:
    """``retrieval.trigger:`` - who issues searches: the model's tool calls, the host, or both."""

    mode: TriggerMode = "tool_only"
    host_k: int = 4
    host_min_query_chars: int = 12


@dataclass(frozen=True, slots=True)
class FusionConfig:
    """``retrieval.fusion:`` - how the channels become one order (docs/decisions.md, "How
    search decides"). Each channel's scores are scaled to 0..1 within the search's own
    list (best 1, its score at ``zero_rank`` 0), so a cosine and a BM25 score can be added;
    the weights say how much each channel's opinion counts."""

    dense: float = 1.0
    lexical: float = 0.7
    entity: float = 0.3  # added whole for a record linked to an entity the question names
    link: float = 1.0  # added for a record one of the best candidates mentions, up to that candidate's score
    zero_rank: int = 100  # the rank whose score scales to 0: far below the candidates
    # The dense score's share taken beyond the question's names (retrieve/beyond_names.py).
    beyond_names: float = 0.5


@dataclass(frozen=True, slots=True)
class SignalWeights:
    """``retrieval.gate.weights:`` - each signal's weight in the answer score (fitted;
    retold/retrieve/signals.py says what each signal measures)."""

    beyond_names: float = 0.0
    asked_coverage: float = 0.0
    unknown_name: float = 0.0
    lead: float = 0.0


@dataclass(frozen=True, slots=True)
class PerTrigger:
    """One value for searches the model asked for (``tool``) and one for host-issued ones."""

    tool: float = 0.0
    host: float = 0.0


@dataclass(frozen=True, slots=True)
class GateConfig:
    """``retrieval.gate:`` - whether a search answers, and how far down its list it reads.

    One score per search, ``1 / (1 + exp(-(bias + sum(weight * signal))))``: the fitted
    chance that the store holds an answer. The search answers when the score reaches
    ``answer_at`` for its trigger; then records whose score (fused, then times freshness
    and confidence) is below ``tail_fraction`` of the top one are cut. Fitted by
    benchmarks/fit_gate.py for the model ``calibrated_for`` names (docs/decisions.md, "How
    search decides")."""

    weights: SignalWeights = field(default_factory=lambda: SignalWeights(
        beyond_names=6.726, asked_coverage=0.82, unknown_name=-3.267, lead=2.882))
    bias: float = -2.638
    answer_at: PerTrigger = field(default_factory=lambda: PerTrigger(tool=0.23, host=0.85))
    tail_fraction: PerTrigger = field(default_factory=lambda: PerTrigger(tool=0.3, host=0.85))
    # The embedding model these values were fitted for; the runtime refuses to run the
    # packaged model's other precision under them.
    calibrated_for: str = "sentence-transformers/all-MiniLM-L6-v2"


@dataclass(frozen=True, slots=True)
class FreshnessConfig:
    """``retrieval.freshness:`` - episodic score decay."""

    episodic_half_life_days: float = 30.0
    floor: float = 0.9


@dataclass(frozen=True, slots=True)
class NamedPeriodsConfig:
    """``retrieval.named_periods:`` - the dates a question names (retold.retrieve.periods)."""

    boost: float = 1.2  # score factor for a record that meets a named period (1 = off)
    host_as_of: bool = True  # a host-issued "who was X in February?" searches as of then


@dataclass(frozen=True, slots=True)
class SearchLogConfig:
    """``retrieval.search_log:`` - how each search's log row reaches the store
    (docs/decisions.md, "Search-log rows are written off the search path")."""

    writes: LogWrites = "background"
    queue_size: int = 1024  # rows waiting for the writer; a row beyond this is dropped
    batch_size: int = 64  # most rows one write transaction takes
    flush_timeout_seconds: float = 5.0  # longest wait of a flush (close, `retold search`, an erase)


@dataclass(frozen=True, slots=True)
class RetrievalConfig:
    """``retrieval:`` - the search pipeline (docs/architecture.md "The search path")."""

    rewrite: RewriteConfig = field(default_factory=RewriteConfig)
    trigger: TriggerConfig = field(default_factory=TriggerConfig)
    per_generator_k: int = 30
    max_alias_tokens: int = 4
    entity_max_links: int = 5  # a query-text entity linking more records is not a match
    link_sources: int = 3  # best fused candidates whose mentioned entities' records join (0 = off)
    default_k: int = 8
    token_budget: int = 3000
    dedup_cosine: float = 0.92
    encode_alongside: bool = True  # encode the query on a helper thread while the store is read
    fusion: FusionConfig = field(default_factory=FusionConfig)
    gate: GateConfig = field(default_factory=GateConfig)
    freshness: FreshnessConfig = field(default_factory=FreshnessConfig)
    named_periods: NamedPeriodsConfig = field(default_factory=NamedPeriodsConfig)
    search_log: SearchLogConfig = field(default_factory=SearchLogConfig)


# Names an older config used for host-issued searches ("auto"), still read: (path to the
# block, old key, new key). A value is renamed the same way at retrieval.trigger.mode.
_RENAMED_KEYS = (
    (("retrieval", "trigger"), "auto_k", "host_k"),
    (("retrieval", "trigger"), "auto_min_query_chars", "host_min_query_chars"),
    (("retrieval", "gate", "answer_at"), "auto", "host"),
    (("retrieval", "gate", "tail_fraction"), "auto", "host"),
)


def upgrade_trigger_names(layer: Mapping[str, Any]) -> tuple[Mapping[str, Any], list[str]]:
    """``layer`` (one config source: a file or overrides) with the host-issued trigger's old
    name ``auto`` replaced by its current one, and one deprecation line per replacement.
    The old spelling keeps working, so a config written for an older Retold still loads;
    where both spellings are given, the current one wins."""
    notes: list[str] = []
    upgraded = copy.deepcopy(dict(layer))
    for path, old, new in _RENAMED_KEYS:
        block = _block(upgraded, path)
        if block is not None and old in block:
            value = block.pop(old)
            block.setdefault(new, value)
            notes.append(f"{'.'.join((*path, old))} is deprecated: use {'.'.join((*path, new))}")
    trigger = _block(upgraded, ("retrieval", "trigger"))
    if trigger is not None and trigger.get("mode") == "auto":
        trigger["mode"] = "host_only"
        notes.append("retrieval.trigger.mode: auto is deprecated: use host_only")
    return upgraded, notes


def _block(layer: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any] | None:
    """The nested mapping at ``path`` in ``layer``, or None where any step is not one."""
    node: Any = layer
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else None
