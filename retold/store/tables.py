"""The store's tables, declared once for both backends.

:data:`METADATA` is the schema at the latest migration (``retold.store.migrations.LATEST``)
as SQLAlchemy Core metadata: every table SQLite and PostgreSQL share, with its columns,
types, nullability, server defaults, keys, checks and indexes. Where a column's type is
spelled differently by the two databases the declaration says both (``with_variant``),
so the metadata renders each dialect's live schema. A new PostgreSQL store is made from
it; SQLite's migrations still make a new SQLite store. Tests compare a new and a migrated
store of each backend with this declaration, so a migration that adds a column the
declaration lacks (or the reverse) fails them.
See docs/decisions.md, "One declaration of the schema".

What is not here belongs to one dialect and is declared where that dialect lives:

* SQLite: :data:`SQLITE_ONLY_TABLES` (the FTS5 lexical index, made by
  ``retold.store.fts``, and the shadow tables FTS5 keeps for it) and :data:`SQLITE_TRIGGERS`
  (made by ``retold.store.migrations``).
* PostgreSQL: the tenant key on every table, the tenant registry and the tsvector lexical
  table, which ``retold.store.postgres.tables`` declares over this metadata, and the
  functions, triggers, text-search configurations, row-level security and agent role it
  lists and ``retold.store.postgres.schema`` makes.

SQLite lets a primary-key column that is not an INTEGER hold NULL (a legacy of that
database); the store never writes one, and the declaration says NOT NULL as PostgreSQL
enforces it.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import DOUBLE_PRECISION, TEXT
from sqlalchemy.types import REAL, TypeEngine, UserDefinedType

__all__ = [
    "METADATA", "SQLITE_ONLY_TABLES", "SQLITE_TRIGGERS", "audit_items", "bundle_results", "embeddings",
    "entities", "entity_aliases", "events", "extraction_stages", "grants", "migration_issues",
    "pending_embeddings", "profile_blocks", "record_activation", "record_conflicts", "record_entities",
    "record_pins", "records", "reembed_vectors", "schema_migrations", "scope_members", "search_log",
    "search_returned", "session_turns", "sessions", "store_meta", "turn_decisions",
]


class _Untyped(UserDefinedType[Any]):
    """A column declared without a type: SQLite then keeps each value as written (no
    affinity turns the text "1.0" into the number 1)."""

    cache_ok = True

    def get_col_spec(self, **kw: Any) -> str:
        return ""


def _text() -> TypeEngine[str]:
    """Text that compares byte by byte on both backends: SQLite's default, PostgreSQL's
    ``COLLATE "C"``, so timestamps, UUIDv7 ids and names order the same way on each."""
    return Text().with_variant(TEXT(collation="C"), "postgresql")


def _counter() -> TypeEngine[int]:
    """An integer that may pass 2**31 (a record's seq, the index version): every SQLite
    INTEGER is 64-bit, PostgreSQL needs BIGINT."""
    return BigInteger().with_variant(Integer(), "sqlite")


def _real() -> TypeEngine[float]:
    return REAL().with_variant(DOUBLE_PRECISION(), "postgresql")


def _in(column: str, *values: str | int) -> str:
    return f"{column} IN ({', '.join(repr(v) if isinstance(v, str) else str(v) for v in values)})"


METADATA = MetaData()

# Timestamps are fixed-width ISO 8601 UTC text (retold.clock.to_iso), so text order is time
# order; ids are UUIDv7 text, so id order is creation order.

entities = Table(
    "entities", METADATA,
    Column("id", _text(), primary_key=True),
    Column("kind", _text(), nullable=False),
    Column("canonical", _text(), nullable=False),
    Column("scope_kind", _text(), nullable=False),
    Column("scope_id", _text(), nullable=False),
    Column("status", _text(), nullable=False),
    Column("merged_into", _text(), ForeignKey("entities.id")),
    Column("created_at", _text(), nullable=False),
    CheckConstraint(_in("kind", "person", "project", "org", "repo", "product", "other"),
                    name="entities_kind_check"),
    CheckConstraint(_in("status", "provisional", "confirmed", "merged", "deleted"),
                    name="entities_status_check"),
    Index("entities_scope", "scope_kind", "scope_id"),
)

records = Table(
    "records", METADATA,
    Column("id", _text(), primary_key=True),
    # The stable integer key: the FTS rowid and the vector index's key (VACUUM may
    # renumber SQLite's rowid, never this).
    Column("seq", _counter(), nullable=False, unique=True),
    Column("type", _text(), nullable=False),
    Column("version", Integer(), nullable=False, server_default=text("1")),
    Column("content", _text(), nullable=False),
    Column("subject", _text(), nullable=False),  # derived '<subject_entity_id>/<attribute>'
    Column("subject_entity_id", _text(), ForeignKey("entities.id")),
    Column("attribute", _text()),  # normalised lowercase snake_case
    Column("scope_kind", _text(), nullable=False),
    Column("scope_id", _text(), nullable=False),
    Column("source_kind", _text(), nullable=False),
    Column("source_ref", _text()),  # 'session:<id><turn:n>', a tool call id or a document id
    Column("creator_agent_id", _text(), nullable=False),
    Column("evidence", _text()),  # verbatim quote from source_ref
    Column("created_at", _text(), nullable=False),
    Column("event_at", _text(), nullable=False),
    Column("expires_at", _text()),  # NULL: never
    Column("valid_from", _text()),
    Column("valid_until", _text()),
    Column("review_at", _text()),
    Column("review_flagged_at", _text()),
    Column("confidence", _real(), nullable=False),
    Column("status", _text(), nullable=False),
    Column("supersedes_id", _text(), ForeignKey("records.id")),
    Column("reinforcements", Integer(), nullable=False, server_default=text("0")),
    Column("last_reinforced_at", _text()),
    # The records_version of the last change the vector index must see.
    Column("index_version", _counter(), nullable=False, server_default=text("0")),
    Column("tags", _text(), nullable=False, server_default="[]"),  # JSON array
    Column("sensitivity", _text(), nullable=False, server_default="none"),
    Column("redacted_content", _text()),  # the masked content; NULL: nothing masked
    Column("sensitivity_label", _text()),  # the extractor's class label; NULL: none given
    CheckConstraint(_in("type", "semantic", "episodic", "procedural"), name="records_type_check"),
    CheckConstraint(_in("scope_kind", "agent", "user", "project", "org"), name="records_scope_kind_check"),
    CheckConstraint(_in("source_kind", "user_statement", "system", "tool_result", "session_summary",
                        "agent_inference"), name="records_source_kind_check"),
    CheckConstraint("confidence BETWEEN 0 AND 1", name="records_confidence_check"),
    CheckConstraint(_in("status", "provisional", "confirmed", "superseded", "expired", "deleted"),
                    name="records_status_check"),
    # The whole hard filter of a search (scope, status, expiry, type, time), so the
    # eligible set is read from the index alone.
    Index("records_scope", "scope_kind", "scope_id", "status", "expires_at", "type", "event_at", "id", "seq"),
    Index("records_subject", "scope_kind", "scope_id", "subject_entity_id", "attribute", "status"),
    Index("records_event", "type", "event_at"),
    Index("records_temporal_review", "review_at", "review_flagged_at", "status"),
    Index("records_index_version", "index_version"),
    # A session summary's idempotency key: a re-run extraction cannot leave two live
    # summaries of one session.
    Index("records_live_summary", "source_ref", unique=True,
          sqlite_where=text("source_kind = 'session_summary' AND status IN ('provisional','confirmed')"),
          postgresql_where=text("source_kind = 'session_summary' AND status IN ('provisional','confirmed')")),
    Index("records_source_ref", "source_ref"),
    Index("records_supersedes", "supersedes_id",
          sqlite_where=text("supersedes_id IS NOT NULL"), postgresql_where=text("supersedes_id IS NOT NULL")),
)
# A subject's live records, most recently reinforced first, in the index's order, so the
# write path's capped scan stops at its cap.
Index("records_subject_recent", records.c.scope_kind, records.c.scope_id, records.c.subject_entity_id,
      records.c.type, func.coalesce(records.c.last_reinforced_at, records.c.created_at).desc(),
      records.c.seq.desc())

migration_issues = Table(
    "migration_issues", METADATA,
    Column("migration_version", Integer(), nullable=False),
    Column("record_id", _text(), ForeignKey("records.id"), nullable=False),
    Column("issue", _text(), nullable=False),
    PrimaryKeyConstraint("migration_version", "record_id"),
)

record_conflicts = Table(
    "record_conflicts", METADATA,
    Column("record_id", _text(), ForeignKey("records.id"), nullable=False),
    Column("other_id", _text(), ForeignKey("records.id"), nullable=False),
    Column("noted_at", _text(), nullable=False),
    PrimaryKeyConstraint("record_id", "other_id"),
)

embeddings = Table(
    "embeddings", METADATA,
    Column("record_id", _text(), ForeignKey("records.id"), primary_key=True),
    Column("model", _text(), nullable=False),
    Column("version", _text(), nullable=False),
    Column("dims", Integer(), nullable=False),
    Column("vector", LargeBinary(), nullable=False),  # float32, L2-normalised
    Column("index_version", _counter(), nullable=False, server_default=text("0")),
    Index("embeddings_index_version", "index_version"),
    Index("embeddings_model", "model", "version"),
)

# Counters and tags by key: records_version, access_version, the embedding family. The
# value is untyped on SQLite (a version tag "1.0" stays text) and text on PostgreSQL,
# where the counters are cast where they are read and bumped.
store_meta = Table(
    "store_meta", METADATA,
    Column("key", _text(), primary_key=True),
    Column("value", Text().with_variant(_Untyped(), "sqlite").with_variant(TEXT(collation="C"), "postgresql"),
           nullable=False),
)

entity_aliases = Table(
    "entity_aliases", METADATA,
    Column("entity_id", _text(), ForeignKey("entities.id"), nullable=False),
    Column("alias_norm", _text(), nullable=False),  # lowercased, whitespace collapsed, no diacritics
    PrimaryKeyConstraint("entity_id", "alias_norm"),
    Index("entity_aliases_lookup", "alias_norm"),
)

record_entities = Table(
    "record_entities", METADATA,
    Column("record_id", _text(), ForeignKey("records.id"), nullable=False),
    Column("entity_id", _text(), ForeignKey("entities.id"), nullable=False),
    Column("role", _text(), nullable=False, server_default="about"),
    PrimaryKeyConstraint("record_id", "entity_id"),
    CheckConstraint(_in("role", "about", "mentions"), name="record_entities_role_check"),
    Index("record_entities_by_entity", "entity_id"),
)

grants = Table(
    "grants", METADATA,
    Column("agent_id", _text(), nullable=False),
    Column("scope_kind", _text(), nullable=False),
    Column("scope_id", _text(), nullable=False),
    Column("can_read", Integer(), nullable=False, server_default=text("1")),
    Column("can_write", Integer(), nullable=False, server_default=text("0")),
    PrimaryKeyConstraint("agent_id", "scope_kind", "scope_id"),
)

scope_members = Table(
    "scope_members", METADATA,
    Column("scope_kind", _text(), nullable=False),
    Column("scope_id", _text(), nullable=False),
    Column("user_id", _text(), nullable=False),
    Column("added_at", _text(), nullable=False),
    Column("added_by", _text(), nullable=False),
    PrimaryKeyConstraint("scope_kind", "scope_id", "user_id"),
    CheckConstraint(_in("scope_kind", "project", "org"), name="scope_members_scope_kind_check"),
    Index("scope_members_user", "user_id"),
)

sessions = Table(
    "sessions", METADATA,
    Column("id", _text(), primary_key=True),
    Column("agent_id", _text(), nullable=False),
    Column("user_id", _text(), nullable=False),
    Column("project_id", _text()),
    Column("started_at", _text(), nullable=False),
    Column("ended_at", _text()),
    Column("extraction_started_at", _text()),
    Column("extracted_at", _text()),
    Column("claim_token", _text()),  # who holds the extraction claim
    Column("claim_heartbeat_at", _text()),  # the holder's last sign of life (its lease)
    Column("extraction_attempts", Integer(), nullable=False, server_default=text("0")),
    Column("extraction_last_error", _text()),
    Column("extraction_next_attempt_at", _text()),  # a failed session is not due before this
    Column("extraction_failed_at", _text()),  # parked after the last allowed attempt
    Column("extraction_blocked_by", _text()),  # the model setup that found no hosted model
    Column("extraction_enqueued_at", _text()),  # published and not yet taken by a worker
    Index("sessions_pending", "extracted_at", "ended_at"),
)

session_turns = Table(
    "session_turns", METADATA,
    Column("session_id", _text(), ForeignKey("sessions.id"), nullable=False),
    Column("turn", Integer(), nullable=False),
    Column("role", _text(), nullable=False),
    Column("content", _text(), nullable=False),
    Column("at", _text(), nullable=False),
    PrimaryKeyConstraint("session_id", "turn"),
    CheckConstraint(_in("role", "user", "assistant", "tool"), name="session_turns_role_check"),
)

extraction_stages = Table(
    "extraction_stages", METADATA,
    Column("session_id", _text(), ForeignKey("sessions.id"), nullable=False),
    Column("stage", _text(), nullable=False),
    Column("output", _text(), nullable=False),
    Column("model", _text(), nullable=False),
    Column("prompt_version", _text(), nullable=False),
    Column("at", _text(), nullable=False),
    PrimaryKeyConstraint("session_id", "stage"),
    CheckConstraint(_in("stage", "extract", "review"), name="extraction_stages_stage_check"),
)

# The append-only audit log: never updated, deleted only by erasure and retention.
events = Table(
    "events", METADATA,
    Column("id", _text(), primary_key=True),
    Column("at", _text(), nullable=False),
    Column("kind", _text(), nullable=False),
    Column("actor", _text(), nullable=False),
    Column("record_id", _text()),
    Column("entity_id", _text()),
    Column("payload", _text(), nullable=False),  # JSON
    Index("events_record", "record_id"),
    Index("events_kind", "kind", "at"),
)

search_log = Table(
    "search_log", METADATA,
    Column("id", _text(), primary_key=True),
    Column("at", _text(), nullable=False),
    Column("agent_id", _text(), nullable=False),
    Column("user_id", _text(), nullable=False),
    Column("session_id", _text()),
    Column("trigger", _text(), nullable=False, server_default="tool"),
    Column("request", _text(), nullable=False),
    Column("context", _text()),
    Column("rewrite_status", _text(), nullable=False),
    Column("rewritten_queries", _text()),
    Column("readable_scopes", _text(), nullable=False),
    Column("dense", _text(), nullable=False),
    Column("lexical", _text(), nullable=False),
    Column("entity", _text(), nullable=False),
    Column("fused", _text(), nullable=False),
    Column("freshness", _text(), nullable=False),
    Column("gated_out", _text(), nullable=False),
    Column("deduped_out", _text(), nullable=False),
    Column("reranked", _text()),
    Column("reranked_out", _text(), nullable=False, server_default="[]"),
    Column("rerank_status", _text(), nullable=False, server_default="disabled"),
    Column("rerank_error", _text()),
    Column("budget_out", _text(), nullable=False),
    Column("returned", _text(), nullable=False),
    Column("explanations", _text(), nullable=False),
    Column("config_flags", _text(), nullable=False),
    Column("warm", Integer(), nullable=False),
    Column("timings_ms", _text(), nullable=False),
    Column("decision", _text()),  # NULL on rows logged before decisions were: not replayable
    CheckConstraint(_in("trigger", "tool", "host"), name="search_log_trigger_check"),
    Index("search_log_at", "at"),
    Index("search_log_user", "user_id"),
)

reembed_vectors = Table(
    "reembed_vectors", METADATA,
    Column("record_id", _text(), ForeignKey("records.id"), primary_key=True),
    Column("model", _text(), nullable=False),
    Column("version", _text(), nullable=False),
    Column("dims", Integer(), nullable=False),
    Column("vector", LargeBinary(), nullable=False),
)

record_activation = Table(
    "record_activation", METADATA,
    Column("record_id", _text(), ForeignKey("records.id"), primary_key=True),
    Column("scope_kind", _text(), nullable=False),
    Column("scope_id", _text(), nullable=False),
    Column("live", Integer(), nullable=False, server_default=text("1")),
    Column("activation", _text(), nullable=False),
    Column("rule", _text(), nullable=False),
    Column("reason", _text(), nullable=False),
    Column("category", _text()),
    Column("decided_by", _text(), nullable=False),
    Column("decided_at", _text(), nullable=False),
    Column("review_opened_at", _text()),
    CheckConstraint(_in("activation", "ambient", "conditional", "review"),
                    name="record_activation_activation_check"),
    Index("record_activation_state", "activation", "review_opened_at"),
    Index("record_activation_scope", "scope_kind", "scope_id", "live", "category", "activation"),
)

profile_blocks = Table(
    "profile_blocks", METADATA,
    Column("session_id", _text(), ForeignKey("sessions.id"), primary_key=True),
    Column("agent_id", _text(), nullable=False),
    Column("user_id", _text(), nullable=False),
    Column("text", _text(), nullable=False),
    Column("record_ids", _text(), nullable=False),
    Column("omitted", Integer(), nullable=False),
    Column("tokens", Integer(), nullable=False),
    Column("inventory", _text(), nullable=False),
    Column("assembled_at", _text(), nullable=False),
    Index("profile_blocks_user", "user_id"),
)

record_pins = Table(
    "record_pins", METADATA,
    Column("record_id", _text(), ForeignKey("records.id"), primary_key=True),
    Column("pinned_at", _text(), nullable=False),
    Column("actor", _text(), nullable=False),
)

pending_embeddings = Table(
    "pending_embeddings", METADATA,
    Column("record_id", _text(), ForeignKey("records.id"), primary_key=True),
    Column("since", _text(), nullable=False),
    Column("reason", _text(), nullable=False),
)

# Which logged searches returned each record, at what rank; a trigger on search_log fills
# it (a dialect object of each backend) and the cascade empties it with its rows.
search_returned = Table(
    "search_returned", METADATA,
    Column("record_id", _text(), nullable=False),
    Column("search_id", _text(), ForeignKey("search_log.id", ondelete="CASCADE"), nullable=False),
    Column("rank", Integer(), nullable=False),
    PrimaryKeyConstraint("record_id", "search_id"),
    Index("search_returned_search", "search_id"),
    sqlite_with_rowid=False,
)

turn_decisions = Table(
    "turn_decisions", METADATA,
    Column("id", _text(), primary_key=True),
    Column("at", _text(), nullable=False),
    Column("agent_id", _text(), nullable=False),
    Column("user_id", _text(), nullable=False),
    Column("session_id", _text(), nullable=False),
    Column("turn", Integer(), nullable=False),
    Column("bundle", _text(), nullable=False),
    Column("disposition", _text(), nullable=False),
    Column("failed_stage", _text()),
    Column("error", _text()),
    Column("body", _text(), nullable=False),  # the decision's lists, read with the row
    Column("total_ms", _real(), nullable=False),
    Column("hosted_calls", Integer(), nullable=False),
    Column("hosted_tokens", Integer(), nullable=False),
    Column("admitted", Integer(), nullable=False),
    Index("turn_decisions_at", "at"),
    Index("turn_decisions_user", "user_id"),
    Index("turn_decisions_session", "session_id"),
)

bundle_results = Table(
    "bundle_results", METADATA,
    Column("id", _text(), primary_key=True),
    Column("bundle", _text(), nullable=False),
    Column("at", _text(), nullable=False),
    Column("passed", Integer(), nullable=False),
    Column("evidence", _text(), nullable=False),
    Column("recorded_by", _text(), nullable=False),
    Column("components", _text(), nullable=False),
    Index("bundle_results_bundle", "bundle", "at"),
)

# The extraction audit's queue: one row per sampled record, a person's three answers once
# given, whole or not at all.
audit_items = Table(
    "audit_items", METADATA,
    Column("record_id", _text(), ForeignKey("records.id"), primary_key=True),
    Column("session_id", _text(), nullable=False),
    Column("written_at", _text(), nullable=False),
    Column("sampled_at", _text(), nullable=False),
    Column("rule", _text(), nullable=False),
    Column("verdict_true", Integer()),
    Column("verdict_atomic", Integer()),
    Column("verdict_keep", Integer()),
    Column("answered_by", _text()),
    Column("answered_at", _text()),
    CheckConstraint(_in("rule", "rate", "weekly"), name="audit_items_rule_check"),
    CheckConstraint(_in("verdict_true", 0, 1), name="audit_items_verdict_true_check"),
    CheckConstraint(_in("verdict_atomic", 0, 1), name="audit_items_verdict_atomic_check"),
    CheckConstraint(_in("verdict_keep", 0, 1), name="audit_items_verdict_keep_check"),
    CheckConstraint("(answered_at IS NULL) = (answered_by IS NULL)"
                    " AND (answered_at IS NULL) = (verdict_true IS NULL)"
                    " AND (answered_at IS NULL) = (verdict_atomic IS NULL)"
                    " AND (answered_at IS NULL) = (verdict_keep IS NULL)", name="audit_items_check"),
    Index("audit_items_sampled", "sampled_at"),
)

# The version log: one row per applied migration. Plain text on PostgreSQL too, and no
# tenant's: every tenant of a database shares its schema.
schema_migrations = Table(
    "schema_migrations", METADATA,
    Column("version", Integer(), primary_key=True, autoincrement=False),
    Column("name", Text(), nullable=False),
    Column("applied_at", Text(), nullable=False),
)

# SQLite's own tables: the FTS5 lexical index (retold.store.fts) and the shadow tables
# FTS5 keeps for it, which the store never names.
SQLITE_ONLY_TABLES = ("records_fts", "records_fts_config", "records_fts_content", "records_fts_data",
                      "records_fts_docsize", "records_fts_idx")
# SQLite's triggers (retold.store.migrations): the access log's filler and the counter of
# changes to who may read what.
SQLITE_TRIGGERS = ("search_returned_fill",
                   *(f"{table}_{event}_access" for table in ("grants", "scope_members")
                     for event in ("insert", "update", "delete")))
