-- The PostgreSQL schema as the first PostgreSQL release created a new store: schema version 9,
-- before tenants. Kept here, unchanged, so tests can write a store as that release did and
-- migrate it (tests/unit/store/conftest.py); a new store is made from retold.store.postgres.tables.

-- SQLite functions the shared statements call, with SQLite's meaning for the uses the store
-- makes of them: a JSON value as text, a 1-based position, a JSON array's elements.
CREATE FUNCTION json_extract(doc text, path text) RETURNS text
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  RETURN (doc::jsonb) #>> string_to_array(substr(path, 3), '.');
CREATE FUNCTION instr(haystack text, needle text) RETURNS integer
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  RETURN strpos(haystack, needle);
CREATE FUNCTION json_each(doc text) RETURNS TABLE(value text)
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  RETURN jsonb_array_elements_text(doc::jsonb);
-- Words as FTS5's unicode61 tokenizer cuts them: runs of letters and digits. PostgreSQL's
-- own parser would keep 'id/attribute' or 'a/b.py' whole as one path token.
CREATE FUNCTION retold_words(body text) RETURNS text
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  RETURN regexp_replace(body, '[^[:alnum:]]+', ' ', 'g');

CREATE TABLE entities (
  id            TEXT COLLATE "C" PRIMARY KEY,
  kind          TEXT COLLATE "C" NOT NULL CHECK (kind IN ('person','project','org','repo','product','other')),
  canonical     TEXT COLLATE "C" NOT NULL,
  scope_kind    TEXT COLLATE "C" NOT NULL,
  scope_id      TEXT COLLATE "C" NOT NULL,
  status        TEXT COLLATE "C" NOT NULL CHECK (status IN ('provisional','confirmed','merged','deleted')),
  merged_into   TEXT COLLATE "C" REFERENCES entities(id),
  created_at    TEXT COLLATE "C" NOT NULL
);
CREATE INDEX entities_scope ON entities(scope_kind, scope_id);

CREATE TABLE records (
  id              TEXT COLLATE "C" PRIMARY KEY,
  seq             BIGINT NOT NULL UNIQUE,
  type            TEXT COLLATE "C" NOT NULL CHECK (type IN ('semantic','episodic','procedural')),
  version         INTEGER NOT NULL DEFAULT 1,
  content         TEXT COLLATE "C" NOT NULL,
  subject         TEXT COLLATE "C" NOT NULL,
  subject_entity_id TEXT COLLATE "C" REFERENCES entities(id),
  attribute       TEXT COLLATE "C",
  scope_kind      TEXT COLLATE "C" NOT NULL CHECK (scope_kind IN ('agent','user','project','org')),
  scope_id        TEXT COLLATE "C" NOT NULL,
  source_kind     TEXT COLLATE "C" NOT NULL CHECK (source_kind IN ('user_statement','system','tool_result','session_summary','agent_inference')),
  source_ref      TEXT COLLATE "C",
  creator_agent_id TEXT COLLATE "C" NOT NULL,
  evidence        TEXT COLLATE "C",
  created_at      TEXT COLLATE "C" NOT NULL,
  event_at        TEXT COLLATE "C" NOT NULL,
  expires_at      TEXT COLLATE "C",
  valid_from      TEXT COLLATE "C",
  valid_until     TEXT COLLATE "C",
  review_at       TEXT COLLATE "C",
  review_flagged_at TEXT COLLATE "C",
  confidence      DOUBLE PRECISION NOT NULL CHECK (confidence BETWEEN 0 AND 1),
  status          TEXT COLLATE "C" NOT NULL CHECK (status IN ('provisional','confirmed','superseded','expired','deleted')),
  supersedes_id   TEXT COLLATE "C" REFERENCES records(id),
  reinforcements  INTEGER NOT NULL DEFAULT 0,
  last_reinforced_at TEXT COLLATE "C",
  index_version   BIGINT NOT NULL DEFAULT 0,
  tags            TEXT COLLATE "C" NOT NULL DEFAULT '[]'
);
CREATE INDEX records_scope ON records(scope_kind, scope_id, status, expires_at, type, event_at, id, seq);
CREATE INDEX records_subject ON records(scope_kind, scope_id, subject_entity_id, attribute, status);
CREATE INDEX records_event ON records(type, event_at);
CREATE INDEX records_temporal_review ON records(review_at, review_flagged_at, status);
CREATE INDEX records_index_version ON records(index_version);
CREATE UNIQUE INDEX records_live_summary ON records(source_ref)
  WHERE source_kind = 'session_summary' AND status IN ('provisional','confirmed');
-- A session's summaries are found by their source reference (migration 9 on SQLite).
CREATE INDEX records_source_ref ON records(source_ref);

CREATE TABLE migration_issues (
  migration_version INTEGER NOT NULL,
  record_id   TEXT COLLATE "C" NOT NULL REFERENCES records(id),
  issue       TEXT COLLATE "C" NOT NULL,
  PRIMARY KEY (migration_version, record_id)
);

CREATE TABLE record_conflicts (
  record_id   TEXT COLLATE "C" NOT NULL REFERENCES records(id),
  other_id    TEXT COLLATE "C" NOT NULL REFERENCES records(id),
  noted_at    TEXT COLLATE "C" NOT NULL,
  PRIMARY KEY (record_id, other_id)
);

CREATE TABLE embeddings (
  record_id   TEXT COLLATE "C" PRIMARY KEY REFERENCES records(id),
  model       TEXT COLLATE "C" NOT NULL,
  version     TEXT COLLATE "C" NOT NULL,
  dims        INTEGER NOT NULL,
  vector      BYTEA NOT NULL,
  index_version BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX embeddings_index_version ON embeddings(index_version);
CREATE INDEX embeddings_model ON embeddings(model, version);

-- SQLite keeps the value column untyped (migration 3); here it is text, and the
-- records_version counter is cast where it is read and bumped.
CREATE TABLE store_meta (
  key         TEXT COLLATE "C" PRIMARY KEY,
  value       TEXT COLLATE "C" NOT NULL
);
INSERT INTO store_meta(key, value) VALUES ('records_version', '0');

-- The lexical index. rowid is the record's seq, named after the FTS5 rowid so the store's
-- shared statements (delete a record's row, read its fields) run unchanged. The document
-- is weighted: content D, subject C, aliases B, tags A; content and tags are stemmed,
-- subject and aliases are kept as written so names and identifiers match exactly.
CREATE TABLE records_fts (
  rowid       BIGINT PRIMARY KEY,
  record_id   TEXT COLLATE "C" NOT NULL,
  content     TEXT COLLATE "C" NOT NULL,
  subject     TEXT COLLATE "C" NOT NULL,
  aliases     TEXT COLLATE "C" NOT NULL,
  tags        TEXT COLLATE "C" NOT NULL DEFAULT '',
  document    tsvector GENERATED ALWAYS AS (
    setweight(to_tsvector('retold_stem', retold_words(content)), 'D')
    || setweight(to_tsvector('retold_exact', retold_words(subject)), 'C')
    || setweight(to_tsvector('retold_exact', retold_words(aliases)), 'B')
    || setweight(to_tsvector('retold_stem', retold_words(tags)), 'A')) STORED
);
CREATE INDEX records_fts_document ON records_fts USING gin (document);

CREATE TABLE entity_aliases (
  entity_id   TEXT COLLATE "C" NOT NULL REFERENCES entities(id),
  alias_norm  TEXT COLLATE "C" NOT NULL,
  PRIMARY KEY (entity_id, alias_norm)
);
CREATE INDEX entity_aliases_lookup ON entity_aliases(alias_norm);

CREATE TABLE record_entities (
  record_id   TEXT COLLATE "C" NOT NULL REFERENCES records(id),
  entity_id   TEXT COLLATE "C" NOT NULL REFERENCES entities(id),
  role        TEXT COLLATE "C" NOT NULL DEFAULT 'about' CHECK (role IN ('about','mentions')),
  PRIMARY KEY (record_id, entity_id)
);
CREATE INDEX record_entities_by_entity ON record_entities(entity_id);

CREATE TABLE grants (
  agent_id    TEXT COLLATE "C" NOT NULL,
  scope_kind  TEXT COLLATE "C" NOT NULL,
  scope_id    TEXT COLLATE "C" NOT NULL,
  can_read    INTEGER NOT NULL DEFAULT 1,
  can_write   INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (agent_id, scope_kind, scope_id)
);

CREATE TABLE scope_members (
  scope_kind  TEXT COLLATE "C" NOT NULL CHECK (scope_kind IN ('project','org')),
  scope_id    TEXT COLLATE "C" NOT NULL,
  user_id     TEXT COLLATE "C" NOT NULL,
  added_at    TEXT COLLATE "C" NOT NULL,
  added_by    TEXT COLLATE "C" NOT NULL,
  PRIMARY KEY (scope_kind, scope_id, user_id)
);
CREATE INDEX scope_members_user ON scope_members(user_id);

CREATE TABLE sessions (
  id          TEXT COLLATE "C" PRIMARY KEY,
  agent_id    TEXT COLLATE "C" NOT NULL,
  user_id     TEXT COLLATE "C" NOT NULL,
  project_id  TEXT COLLATE "C",
  started_at  TEXT COLLATE "C" NOT NULL,
  ended_at    TEXT COLLATE "C",
  extraction_started_at TEXT COLLATE "C",
  extracted_at TEXT COLLATE "C",
  claim_token TEXT COLLATE "C",
  claim_heartbeat_at TEXT COLLATE "C",
  extraction_attempts INTEGER NOT NULL DEFAULT 0,
  extraction_last_error TEXT COLLATE "C",
  extraction_next_attempt_at TEXT COLLATE "C",
  extraction_failed_at TEXT COLLATE "C",
  extraction_blocked_by TEXT COLLATE "C",
  extraction_enqueued_at TEXT COLLATE "C"
);
CREATE INDEX sessions_pending ON sessions(extracted_at, ended_at);

CREATE TABLE session_turns (
  session_id  TEXT COLLATE "C" NOT NULL REFERENCES sessions(id),
  turn        INTEGER NOT NULL,
  role        TEXT COLLATE "C" NOT NULL CHECK (role IN ('user','assistant','tool')),
  content     TEXT COLLATE "C" NOT NULL,
  at          TEXT COLLATE "C" NOT NULL,
  PRIMARY KEY (session_id, turn)
);

CREATE TABLE extraction_stages (
  session_id  TEXT COLLATE "C" NOT NULL REFERENCES sessions(id),
  stage       TEXT COLLATE "C" NOT NULL CHECK (stage IN ('extract','review')),
  output      TEXT COLLATE "C" NOT NULL,
  model       TEXT COLLATE "C" NOT NULL,
  prompt_version TEXT COLLATE "C" NOT NULL,
  at          TEXT COLLATE "C" NOT NULL,
  PRIMARY KEY (session_id, stage)
);

CREATE TABLE events (
  id          TEXT COLLATE "C" PRIMARY KEY,
  at          TEXT COLLATE "C" NOT NULL,
  kind        TEXT COLLATE "C" NOT NULL,
  actor       TEXT COLLATE "C" NOT NULL,
  record_id   TEXT COLLATE "C",
  entity_id   TEXT COLLATE "C",
  payload     TEXT COLLATE "C" NOT NULL
);
CREATE INDEX events_record ON events(record_id);
CREATE INDEX events_kind ON events(kind, at);

CREATE TABLE search_log (
  id            TEXT COLLATE "C" PRIMARY KEY,
  at            TEXT COLLATE "C" NOT NULL,
  agent_id      TEXT COLLATE "C" NOT NULL,
  user_id       TEXT COLLATE "C" NOT NULL,
  session_id    TEXT COLLATE "C",
  trigger       TEXT COLLATE "C" NOT NULL DEFAULT 'tool' CHECK (trigger IN ('tool','auto')),
  request       TEXT COLLATE "C" NOT NULL,
  context       TEXT COLLATE "C",
  rewrite_status TEXT COLLATE "C" NOT NULL,
  rewritten_queries TEXT COLLATE "C",
  readable_scopes TEXT COLLATE "C" NOT NULL,
  dense         TEXT COLLATE "C" NOT NULL,
  lexical       TEXT COLLATE "C" NOT NULL,
  entity        TEXT COLLATE "C" NOT NULL,
  fused         TEXT COLLATE "C" NOT NULL,
  freshness     TEXT COLLATE "C" NOT NULL,
  gated_out     TEXT COLLATE "C" NOT NULL,
  deduped_out   TEXT COLLATE "C" NOT NULL,
  reranked      TEXT COLLATE "C",
  reranked_out  TEXT COLLATE "C" NOT NULL DEFAULT '[]',
  rerank_status TEXT COLLATE "C" NOT NULL DEFAULT 'disabled',
  rerank_error  TEXT COLLATE "C",
  budget_out    TEXT COLLATE "C" NOT NULL,
  returned      TEXT COLLATE "C" NOT NULL,
  explanations  TEXT COLLATE "C" NOT NULL,
  config_flags  TEXT COLLATE "C" NOT NULL,
  warm          INTEGER NOT NULL,
  timings_ms    TEXT COLLATE "C" NOT NULL
);
CREATE INDEX search_log_at ON search_log(at);
CREATE INDEX search_log_user ON search_log(user_id);

CREATE TABLE reembed_vectors (
  record_id   TEXT COLLATE "C" PRIMARY KEY REFERENCES records(id),
  model       TEXT COLLATE "C" NOT NULL,
  version     TEXT COLLATE "C" NOT NULL,
  dims        INTEGER NOT NULL,
  vector      BYTEA NOT NULL
);

CREATE TABLE record_activation (
  record_id   TEXT COLLATE "C" PRIMARY KEY REFERENCES records(id),
  scope_kind  TEXT COLLATE "C" NOT NULL,
  scope_id    TEXT COLLATE "C" NOT NULL,
  live        INTEGER NOT NULL DEFAULT 1,
  activation  TEXT COLLATE "C" NOT NULL CHECK (activation IN ('ambient','conditional','review')),
  rule        TEXT COLLATE "C" NOT NULL,
  reason      TEXT COLLATE "C" NOT NULL,
  category    TEXT COLLATE "C",
  decided_by  TEXT COLLATE "C" NOT NULL,
  decided_at  TEXT COLLATE "C" NOT NULL,
  review_opened_at TEXT COLLATE "C"
);
CREATE INDEX record_activation_state ON record_activation(activation, review_opened_at);
CREATE INDEX record_activation_scope ON record_activation(scope_kind, scope_id, live, category, activation);

CREATE TABLE profile_blocks (
  session_id  TEXT COLLATE "C" PRIMARY KEY REFERENCES sessions(id),
  agent_id    TEXT COLLATE "C" NOT NULL,
  user_id     TEXT COLLATE "C" NOT NULL,
  text        TEXT COLLATE "C" NOT NULL,
  record_ids  TEXT COLLATE "C" NOT NULL,
  omitted     INTEGER NOT NULL,
  tokens      INTEGER NOT NULL,
  inventory   TEXT COLLATE "C" NOT NULL,
  assembled_at TEXT COLLATE "C" NOT NULL
);
CREATE INDEX profile_blocks_user ON profile_blocks(user_id);
