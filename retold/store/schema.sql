-- Retold schema, version 1. Applied by migration 1 (retold/store/migrations.py) in one transaction.
-- Timestamps are fixed-width ISO 8601 UTC text (retold.clock.to_iso), so text order is
-- time order. Ids are UUIDv7 text, so id order is creation order.

CREATE TABLE records (
  id              TEXT PRIMARY KEY,
  seq             INTEGER NOT NULL UNIQUE,    -- stable integer key: FTS rowid and vector-index key (VACUUM may renumber rowid, never this)
  type            TEXT NOT NULL CHECK (type IN ('semantic','episodic','procedural')),
  version         INTEGER NOT NULL DEFAULT 1,
  content         TEXT NOT NULL,
  subject         TEXT NOT NULL,              -- derived '<subject_entity_id>/<attribute>'
  subject_entity_id TEXT REFERENCES entities(id),
  attribute       TEXT,                       -- normalised lowercase snake_case
  scope_kind      TEXT NOT NULL CHECK (scope_kind IN ('agent','user','project','org')),
  scope_id        TEXT NOT NULL,
  source_kind     TEXT NOT NULL CHECK (source_kind IN ('user_statement','system','tool_result','session_summary','agent_inference')),
  source_ref      TEXT,                       -- 'session:<id><turn:n>', a tool call id or a document id
  creator_agent_id TEXT NOT NULL,
  evidence        TEXT,                       -- verbatim quote from source_ref
  created_at      TEXT NOT NULL,
  event_at        TEXT NOT NULL,              -- defaults to created_at
  expires_at      TEXT,                       -- NULL means never
  valid_from      TEXT,
  valid_until     TEXT,
  review_at       TEXT,
  review_flagged_at TEXT,
  confidence      REAL NOT NULL CHECK (confidence BETWEEN 0 AND 1),
  status          TEXT NOT NULL CHECK (status IN ('provisional','confirmed','superseded','expired','deleted')),
  supersedes_id   TEXT REFERENCES records(id),
  reinforcements  INTEGER NOT NULL DEFAULT 0,
  last_reinforced_at TEXT,
  index_version   INTEGER NOT NULL DEFAULT 0, -- records_version of the last change the vector index must see (docs/architecture.md "Index coherence across processes")
  tags            TEXT NOT NULL DEFAULT '[]'  -- JSON array
);
-- records_scope covers the whole hard filter of a search (scope, status, expiry, type, time),
-- so eligible_ids never visits the table rows.
CREATE INDEX records_scope ON records(scope_kind, scope_id, status, expires_at, type, event_at, id, seq);
CREATE INDEX records_subject ON records(scope_kind, scope_id, subject_entity_id, attribute, status);
CREATE INDEX records_event ON records(type, event_at);
CREATE INDEX records_temporal_review ON records(review_at, review_flagged_at, status);
CREATE INDEX records_index_version ON records(index_version);
-- source_ref is a session summary's idempotency key: a re-run extraction cannot leave two
-- live summaries of one session.
CREATE UNIQUE INDEX records_live_summary ON records(source_ref)
  WHERE source_kind = 'session_summary' AND status IN ('provisional','confirmed');

CREATE TABLE migration_issues (
  migration_version INTEGER NOT NULL,
  record_id   TEXT NOT NULL REFERENCES records(id),
  issue       TEXT NOT NULL,
  PRIMARY KEY (migration_version, record_id)
);

CREATE TABLE record_conflicts (
  record_id   TEXT NOT NULL REFERENCES records(id),
  other_id    TEXT NOT NULL REFERENCES records(id),
  noted_at    TEXT NOT NULL,
  PRIMARY KEY (record_id, other_id)
);

CREATE TABLE embeddings (
  record_id   TEXT PRIMARY KEY REFERENCES records(id),
  model       TEXT NOT NULL,
  version     TEXT NOT NULL,
  dims        INTEGER NOT NULL,
  vector      BLOB NOT NULL,                  -- float32, L2-normalised
  index_version INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX embeddings_index_version ON embeddings(index_version);
CREATE INDEX embeddings_model ON embeddings(model, version);

CREATE TABLE store_meta (
  key         TEXT PRIMARY KEY,
  value       INTEGER NOT NULL
);
INSERT INTO store_meta(key, value) VALUES ('records_version', 0);

-- The rowid of each FTS row is its record's seq, so the writer can replace or delete it,
-- and the lexical generator can join the eligible set, without scanning record_id. Words
-- are indexed as Porter stems; stores created before stemming get this table from
-- migration 4 (retold/store/fts.py holds the same definition).
CREATE VIRTUAL TABLE records_fts USING fts5(
  record_id UNINDEXED,
  content,
  subject,
  aliases,                                    -- space-joined aliases of linked entities
  tokenize = 'porter unicode61 remove_diacritics 2'
);

CREATE TABLE entities (
  id            TEXT PRIMARY KEY,
  kind          TEXT NOT NULL CHECK (kind IN ('person','project','org','repo','product','other')),
  canonical     TEXT NOT NULL,
  scope_kind    TEXT NOT NULL,
  scope_id      TEXT NOT NULL,
  status        TEXT NOT NULL CHECK (status IN ('provisional','confirmed','merged','deleted')),
  merged_into   TEXT REFERENCES entities(id),
  created_at    TEXT NOT NULL
);
CREATE INDEX entities_scope ON entities(scope_kind, scope_id);

CREATE TABLE entity_aliases (
  entity_id   TEXT NOT NULL REFERENCES entities(id),
  alias_norm  TEXT NOT NULL,                  -- lowercased, whitespace-collapsed, diacritics stripped
  PRIMARY KEY (entity_id, alias_norm)
);
CREATE INDEX entity_aliases_lookup ON entity_aliases(alias_norm);

CREATE TABLE record_entities (
  record_id   TEXT NOT NULL REFERENCES records(id),
  entity_id   TEXT NOT NULL REFERENCES entities(id),
  role        TEXT NOT NULL DEFAULT 'about' CHECK (role IN ('about','mentions')),
  PRIMARY KEY (record_id, entity_id)
);
CREATE INDEX record_entities_by_entity ON record_entities(entity_id);

CREATE TABLE grants (
  agent_id    TEXT NOT NULL,
  scope_kind  TEXT NOT NULL,
  scope_id    TEXT NOT NULL,
  can_read    INTEGER NOT NULL DEFAULT 1,
  can_write   INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (agent_id, scope_kind, scope_id)
);

CREATE TABLE sessions (
  id          TEXT PRIMARY KEY,
  agent_id    TEXT NOT NULL,
  user_id     TEXT NOT NULL,
  project_id  TEXT,
  started_at  TEXT NOT NULL,
  ended_at    TEXT,
  extraction_started_at TEXT,
  extracted_at TEXT
);
CREATE INDEX sessions_pending ON sessions(extracted_at, ended_at);

CREATE TABLE session_turns (
  session_id  TEXT NOT NULL REFERENCES sessions(id),
  turn        INTEGER NOT NULL,
  role        TEXT NOT NULL CHECK (role IN ('user','assistant','tool')),
  content     TEXT NOT NULL,
  at          TEXT NOT NULL,
  PRIMARY KEY (session_id, turn)
);

CREATE TABLE events (                         -- append-only audit log, never updated or deleted
  id          TEXT PRIMARY KEY,
  at          TEXT NOT NULL,
  kind        TEXT NOT NULL,
  actor       TEXT NOT NULL,
  record_id   TEXT,
  entity_id   TEXT,
  payload     TEXT NOT NULL                   -- JSON
);
CREATE INDEX events_record ON events(record_id);
CREATE INDEX events_kind ON events(kind, at);

CREATE TABLE search_log (
  id            TEXT PRIMARY KEY,
  at            TEXT NOT NULL,
  agent_id      TEXT NOT NULL,
  user_id       TEXT NOT NULL,
  session_id    TEXT,
  trigger       TEXT NOT NULL DEFAULT 'tool' CHECK (trigger IN ('tool','auto')),
  request       TEXT NOT NULL,
  context       TEXT,
  rewrite_status TEXT NOT NULL,
  rewritten_queries TEXT,
  readable_scopes TEXT NOT NULL,
  dense         TEXT NOT NULL,
  lexical       TEXT NOT NULL,
  entity        TEXT NOT NULL,
  fused         TEXT NOT NULL,
  freshness     TEXT NOT NULL,
  gated_out     TEXT NOT NULL,
  deduped_out   TEXT NOT NULL,
  reranked      TEXT,
  reranked_out  TEXT NOT NULL DEFAULT '[]',
  rerank_status TEXT NOT NULL DEFAULT 'disabled',
  rerank_error  TEXT,
  budget_out    TEXT NOT NULL,
  returned      TEXT NOT NULL,
  explanations  TEXT NOT NULL,
  config_flags  TEXT NOT NULL,
  warm          INTEGER NOT NULL,
  timings_ms    TEXT NOT NULL
);
CREATE INDEX search_log_at ON search_log(at);
CREATE INDEX search_log_user ON search_log(user_id);
