"""The framework-neutral dataclasses of Retold.

Storage, ingestion, retrieval, tools and adapters exchange these values instead of
framework objects. ``Record`` is persisted state; ``CandidateRecord`` is untrusted
extractor output that the ingestor validates before it becomes a record.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, get_args

__all__ = [
    "ACTIVATIONS",
    "Activation",
    "Candidate",
    "CandidateRecord",
    "Entity",
    "EntityKind",
    "EntityMention",
    "EvidenceCheck",
    "Explanation",
    "ExtractionContext",
    "ExtractionOutput",
    "GeneratorHit",
    "LexicalMatch",
    "LexicalTerm",
    "Principal",
    "ProfileBlock",
    "QueryShape",
    "Record",
    "RecordStatus",
    "RecordType",
    "Resolution",
    "ReviewContext",
    "ReviewDecision",
    "RewriteResult",
    "Scope",
    "ScopeKind",
    "SearchRequest",
    "SearchResponse",
    "SearchResult",
    "SessionSummary",
    "SourceKind",
    "Turn",
]

ScopeKind = Literal["agent", "user", "project", "org"]
RecordType = Literal["semantic", "episodic", "procedural"]
RecordStatus = Literal["provisional", "confirmed", "superseded", "expired", "deleted"]
SourceKind = Literal["user_statement", "system", "tool_result", "session_summary", "agent_inference"]
EntityKind = Literal["person", "project", "org", "repo", "product", "other"]
EntityStatus = Literal["provisional", "confirmed", "merged", "deleted"]
Role = Literal["user", "assistant", "tool"]
RewriteStatus = Literal["disabled", "applied", "unchanged", "failed"]
# Whether a record is in the per-session profile (ambient), found by search only
# (conditional, the default) or waiting for a person's decision (review).
Activation = Literal["ambient", "conditional", "review"]
ACTIVATIONS: tuple[str, ...] = ("ambient", "conditional", "review")

SCOPE_KINDS: tuple[str, ...] = get_args(ScopeKind)
RECORD_TYPES: tuple[str, ...] = get_args(RecordType)
RECORD_STATUSES: tuple[str, ...] = get_args(RecordStatus)
SOURCE_KINDS: tuple[str, ...] = get_args(SourceKind)
ENTITY_KINDS: tuple[str, ...] = get_args(EntityKind)
# Statuses that normal retrieval may return; superseded, expired and deleted records are
# history.
ACTIVE_STATUSES: tuple[str, ...] = ("provisional", "confirmed")


@dataclass(frozen=True)
class Scope:
    """One ownership boundary, written ``kind:id`` (e.g. ``user:aditya``)."""

    kind: ScopeKind
    id: str

    def __post_init__(self) -> None:
        if self.kind not in SCOPE_KINDS:
            raise ValueError(f"scope kind must be one of {', '.join(SCOPE_KINDS)}, got {self.kind!r}")
        if not self.id or self.id != self.id.strip():
            raise ValueError(f"scope id must be non-empty without surrounding spaces, got {self.id!r}")

    def __str__(self) -> str:
        return f"{self.kind}:{self.id}"

    @classmethod
    def parse(cls, text: str) -> Scope:
        """Parse ``kind:id``; raise ValueError with a readable message otherwise."""
        kind, sep, ident = text.partition(":")
        if not sep:
            raise ValueError(f"scope must look like kind:id, got {text!r}")
        return cls(kind, ident)  # type: ignore[arg-type]  # checked in __post_init__

    @property
    def is_private(self) -> bool:
        """True for the implicit ``agent:<agent_id>/<user_id>`` scope."""
        return self.kind == "agent" and "/" in self.id


@dataclass(frozen=True)
class Principal:
    """The caller of a memory tool. ``/`` is refused so private scopes stay unique."""

    agent_id: str
    user_id: str
    session_id: str | None = None
    project_id: str | None = None

    def __post_init__(self) -> None:
        for name in ("agent_id", "user_id"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{name} must be a non-empty string")
            if "/" in value:
                raise ValueError(f"{name} must not contain '/', got {value!r}")

    @property
    def private_scope(self) -> Scope:
        return Scope("agent", f"{self.agent_id}/{self.user_id}")


@dataclass
class Record:
    """One durable memory."""

    id: str
    type: RecordType
    version: int
    content: str
    subject: str
    subject_entity_id: str | None
    attribute: str | None
    scope: Scope
    source_kind: SourceKind
    source_ref: str | None
    creator_agent_id: str
    evidence: str | None
    created_at: datetime
    event_at: datetime
    expires_at: datetime | None
    valid_from: datetime | None
    valid_until: datetime | None
    review_at: datetime | None
    review_flagged_at: datetime | None
    confidence: float
    status: RecordStatus
    supersedes_id: str | None
    reinforcements: int
    last_reinforced_at: datetime | None
    tags: list[str] = field(default_factory=list)
    entity_ids: list[str] = field(default_factory=list)
    index_version: int = 0  # records_version of its last index-visible change
    seq: int = 0  # stable integer key assigned by the store on insert
    # The sensitivity class its tenant's memory pack put it in, and its content with what
    # the pack redacts masked (None: nothing was masked). The masked form is what the
    # embedder, the word index and hosted models get; the content is only read back.
    sensitivity: str = "none"
    redacted_content: str | None = None
    # The class the session extractor labelled it with (None: no label, or not written by
    # extraction), kept apart from the class: an earlier class may have outranked it, and
    # a later pack without that class lets it decide (see retold.policy.sensitivity).
    sensitivity_label: str | None = None

    @property
    def indexed_content(self) -> str:
        """The text that may leave the record: to an embedder, an index or a prompt."""
        return self.content if self.redacted_content is None else self.redacted_content


@dataclass
class Entity:
    """A named subject with its normalised aliases."""

    id: str
    kind: EntityKind
    canonical: str
    scope: Scope
    status: EntityStatus
    merged_into: str | None
    aliases: list[str]
    created_at: datetime


@dataclass(frozen=True)
class EntityMention:
    kind: EntityKind
    text: str  # as written in the source
    role: Literal["about", "mentions"]
    entity_id: str | None = None  # explicit id from the writer; skips alias resolution


@dataclass
class Resolution:
    mention: EntityMention
    entity: Entity | None
    outcome: Literal["explicit", "resolved", "created", "ambiguous"]
    candidates: list[str] = field(default_factory=list)  # entity ids, set when ambiguous


@dataclass(frozen=True)
class Turn:
    session_id: str
    turn: int
    role: Role
    content: str
    at: datetime


@dataclass(frozen=True)
class ExtractionContext:
    principal: Principal
    known_entities: list[tuple[str, str, str]]  # (entity_id, kind, canonical) readable
    existing_subjects: list[str]  # active subjects in the agent's writable scopes
    prompt_version: str


@dataclass(frozen=True)
class RewriteResult:
    queries: list[str]
    status: Literal["applied", "unchanged", "failed"]


@dataclass(frozen=True)
class EvidenceCheck:
    found: bool
    turn: int | None
    role: Role | None
    source_kind: Literal["user_statement", "tool_result", "agent_inference"]
    note: str | None  # set when the claimed kind was downgraded


@dataclass(frozen=True)
class SearchRequest:
    queries: list[str]  # 1 to 3, as the agent wrote them
    context: str | None = None  # host-supplied, never set by the agent
    types: list[str] | None = None
    entities: list[str] | None = None  # alias strings, resolved by the retriever
    since: datetime | None = None  # applies to event_at (when it was said or happened)
    until: datetime | None = None
    k: int | None = None  # None: retrieval.default_k
    include_history: bool = False  # superseded and expired become eligible
    # What was valid at this moment: records whose validity window covers it, superseded
    # ones included (docs/decisions.md, "Validity windows and as-of search").
    as_of: datetime | None = None
    trigger: Literal["tool", "host"] = "tool"
    # The results go to a model that judges them before anyone sees them (the gap searches
    # of host-issued memory): the list is read as a tool search reads it, recall first,
    # whoever issued it.
    judged: bool = False


@dataclass
class GeneratorHit:
    rank: int  # 1-based rank within that generator's list
    score: float  # cosine, bm25, or 0.0 for entity


@dataclass(frozen=True)
class LexicalTerm:
    value: str
    is_identifier: bool
    is_entity_alias: bool
    is_proper: bool = False  # a capitalised word that is not a sentence start or a date word

    @property
    def is_name(self) -> bool:
        """Whether the term names something (who or what) rather than what is asked."""
        return self.is_identifier or self.is_entity_alias or self.is_proper


@dataclass(frozen=True)
class LexicalMatch:
    """The query terms a record contains, out of the query's ``total_terms``, of which
    ``name_terms`` name something; the rest are what the query asks about."""

    terms: tuple[LexicalTerm, ...]
    total_terms: int
    name_terms: int = 0

    @property
    def asked_terms(self) -> int:
        return self.total_terms - self.name_terms

    @property
    def asked_matched(self) -> int:
        return sum(not term.is_name for term in self.terms)

    @property
    def names_matched(self) -> int:
        return sum(term.is_name for term in self.terms)


@dataclass(frozen=True)
class QueryShape:
    """What the gate needs to know about the queries as a whole.

    ``asks`` is False when every query only names things ("Maya", "ATL-204"): then a record
    that matches the names is the answer. ``unknown_names`` are names that no readable
    record or entity carries, when every query has one: the question is about something
    the store does not know. ``name_groups`` holds the question's names as the words stand:
    names next to each other are one group ("Northwind Foods 2"), names apart are separate
    ones ("Oskar" and "Tucson" in "Why did Oskar travel to Tucson?").
    """

    asks: bool = True
    unknown_names: tuple[str, ...] = ()
    name_groups: tuple[tuple[str, ...], ...] = ()


@dataclass
class Candidate:
    """One record a channel found, with every channel's evidence for it.

    ``fused_score`` is the weighted sum of the channels' scaled scores
    (:func:`retold.retrieve.fusion.fuse`), each channel's term kept in its ``*_part`` (the
    link hop's lift in ``link_part``); ``score`` is that times the record's freshness and its
    confidence, the value the list is ordered by, the tail cut reads and the tool returns."""

    record_id: str
    dense: GeneratorHit | None = None
    lexical: GeneratorHit | None = None
    lexical_terms: LexicalMatch | None = None
    entity: GeneratorHit | None = None
    entity_id: str | None = None
    fused_score: float = 0.0
    fused_rank: int = 0
    freshness_multiplier: float | None = None  # episodic records only
    score: float = 0.0
    # The dense cosine with the question's names taken out of both sides (retrieve.beyond_names).
    beyond_names: float | None = None
    gate_reason: str | None = None
    rerank_score: float | None = None
    rank_after_rerank: int | None = None
    via: str | None = None  # the link hop: the candidate that mentions what this record is about
    dense_part: float = 0.0
    lexical_part: float = 0.0
    entity_part: float = 0.0
    link_part: float = 0.0


@dataclass
class Explanation:
    raw_queries: list[str]
    rewritten_queries: list[str] | None
    rewrite_status: RewriteStatus
    matched_by: list[Literal["dense", "lexical", "entity"]]
    dense: GeneratorHit | None
    lexical: GeneratorHit | None
    lexical_terms: LexicalMatch | None
    entity: GeneratorHit | None
    fused_rank: int
    freshness_multiplier: float | None
    rerank: tuple[int, int, float] | None
    gate: str
    dedup: str
    budget: str
    source_kind: str
    status: str
    created_at: datetime
    event_at: datetime
    entity_ids: list[str]
    conflicts_with: list[str]
    summary: str


@dataclass
class SearchResult:
    record: Record
    score: float
    explanation: Explanation


@dataclass
class SearchResponse:
    search_id: str
    raw_queries: list[str]
    rewritten_queries: list[str] | None
    rewrite_status: RewriteStatus
    results: list[SearchResult]
    empty_reason: str | None
    timings_ms: dict[str, float]
    # Whether the search answered: its score, threshold, trigger and signals (gate.Decision).
    decision: dict[str, object] = field(default_factory=dict)


@dataclass
class CandidateRecord:
    """Untrusted extractor output; the ingestor validates it."""

    type: RecordType
    content: str
    attribute: str | None  # hint only
    source_kind: Literal["user_statement", "tool_result", "agent_inference"]
    evidence: str  # verbatim
    evidence_turn: int
    entity_mentions: list[EntityMention]
    event_at: datetime | None = None
    valid_from: datetime | None = None
    valid_until: datetime | None = None
    review_at: datetime | None = None
    confidence: float = 0.6
    # The tenant's extractor-label sensitivity class the extractor read the fact as (None:
    # no label, or the prompt asked for none); the write path classifies with it.
    sensitivity: str | None = None


@dataclass(frozen=True)
class ReviewContext:
    transcript_window: list[Turn]
    destination_scope: Scope
    primary_entity_id: str
    live_records: list[Record]  # same entity and destination scope only
    prompt_version: str


@dataclass(frozen=True)
class ReviewDecision:
    action: Literal["accept", "reject", "revise"]
    candidate: CandidateRecord | None  # required only for revise
    reason: str


@dataclass
class SessionSummary:
    content: str  # 3 to 8 sentences: goal, what happened, decisions, open threads
    decisions: list[str]
    entity_mentions: list[EntityMention]


@dataclass
class ExtractionOutput:
    candidates: list[CandidateRecord]
    summary: SessionSummary


@dataclass(frozen=True)
class ProfileBlock:
    """The profile one session's prompt carries: assembled once, stored with the session
    and never edited afterwards, so an answer can be traced to the exact text it saw.

    ``inventory`` counts the principal's readable active records per category, without
    any of their text, so the model knows which kinds of memory a search could find.
    """

    session_id: str
    text: str  # what goes into the system prompt; "" when there is nothing to show
    record_ids: tuple[str, ...]  # the ambient records shown, in order
    omitted: int  # ambient records left out by the token cap
    tokens: int
    inventory: tuple[tuple[str, int], ...]  # (category, count), in a stable order
    assembled_at: datetime
