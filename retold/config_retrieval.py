"""``reranker:`` and ``retrieval:``: how a search finds, fuses, gates and logs candidates.

Kept apart from :mod:`retold.config` for size only; :mod:`retold.config` re-exports every
block, so callers import them from there.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

from retold.models import SourceKind

__all__ = [
    "AutoGateConfig",
    "DenseFloors",
    "FreshnessConfig",
    "GateConfig",
    "RerankerConfig",
    "RetrievalConfig",
    "RewriteConfig",
    "SearchLogConfig",
    "TriggerConfig",
]

RerankMode = Literal["rrf_cross_encoder", "cross_encoder_only"]
RerankOnFailure = Literal["fallback", "fail"]
TriggerMode = Literal["tool_only", "auto", "hybrid"]
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
    auto_k: int = 4
    auto_min_query_chars: int = 12


@dataclass(frozen=True, slots=True)
class DenseFloors:
    """Lowest cosine a dense-only candidate may have, per record type; calibrated
    for all-MiniLM-L6-v2 v1 by benchmarks/calibrate_gate.py; the bge-m3 values are in
    docs/decisions.md "Gate floors for all-MiniLM-L6-v2"."""

    semantic: float = 0.65
    episodic: float = 0.50
    procedural: float = 0.60
    session_summary: float = 0.60


@dataclass(frozen=True, slots=True)
class AutoGateConfig:
    """``retrieval.gate.auto:`` - floors for host-issued searches, swept by
    benchmarks/calibrate_gate.py after the tool floors with none looser than those."""

    dense_floor: DenseFloors = dataclasses.field(
        default_factory=lambda: DenseFloors(
            semantic=0.65, episodic=0.60, procedural=0.65, session_summary=0.65
        )
    )
    lexical_min_term_fraction: float = 0.6
    lexical_min_matched_terms: int = 2
    relative_floor: float = 0.95
    exclude_source_kinds: tuple[SourceKind, ...] = ("session_summary",)
    name_only_margin: float = 0.20
    two_name_margin: float = 0.0
    unknown_name_floor: float = 0.90
    standout_margin: float = 0.12
    standout_floor: float = 0.50
    companion_margin: float = 0.0  # off: companions cost precision
    companion_weight: float = 1.0
    nameless_lexical_floor: float = 0.40
    nameless_lexical_terms: int = 3
    follow_links: bool = True
    beyond_names_floor: float = 0.45
    beyond_names_margin: float = 0.08


@dataclass(frozen=True, slots=True)
class GateConfig:
    """``retrieval.gate:`` - the relevance gate that lets a search come back empty rather than
    return weak matches (docs/architecture.md "The search path")."""

    dense_floor: DenseFloors = field(default_factory=DenseFloors)
    lexical_min_term_fraction: float = 0.5
    lexical_min_matched_terms: int = 2
    relative_floor: float = 0.0
    name_only_margin: float = 0.15
    two_name_margin: float = 0.0  # instead, when the record carries two of the question's names
    unknown_name_floor: float = 0.85
    standout_margin: float = 0.12  # 0 = off
    standout_floor: float = 0.50
    companion_margin: float = 0.10  # 0 = off
    companion_weight: float = 0.7  # a companion ranks by its dense vote times this
    nameless_lexical_floor: float = 0.40
    nameless_lexical_terms: int = 3  # 0 = off; with this many asked words, no cosine needed
    follow_links: bool = True  # a record a passing one links to may pass after it
    # A record sharing only names passes when its cosine with the names taken out of both
    # sides reaches the floor (1 = off) and leads the other records carrying them by the margin.
    beyond_names_floor: float = 0.45
    beyond_names_margin: float = 0.08
    auto: AutoGateConfig = field(default_factory=AutoGateConfig)
    # The embedding model these floors (auto's included) were calibrated for; the runtime
    # refuses to run the packaged model's other precision under them.
    calibrated_for: str = "sentence-transformers/all-MiniLM-L6-v2"


@dataclass(frozen=True, slots=True)
class FreshnessConfig:
    """``retrieval.freshness:`` - episodic score decay."""

    episodic_half_life_days: float = 30.0
    floor: float = 0.5


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
    link_sources: int = 3  # top candidates whose mentioned entities' records are fetched (0 = off)
    rrf_k: int = 60
    default_k: int = 8
    token_budget: int = 1500
    dedup_cosine: float = 0.92
    encode_alongside: bool = True  # encode the query on a helper thread while the store is read
    gate: GateConfig = field(default_factory=GateConfig)
    freshness: FreshnessConfig = field(default_factory=FreshnessConfig)
    search_log: SearchLogConfig = field(default_factory=SearchLogConfig)
