-- Tandem schema, PostgreSQL flavour (multi-node). Keep in step with ../sqlite/0001_init.sql.
-- Times are milliseconds since the Unix epoch; ids are UUID strings; booleans are 0/1
-- (the same column types on both backends keep the query code identical).

CREATE TABLE users (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE,
    is_admin    BIGINT NOT NULL DEFAULT 0,
    created_at  BIGINT NOT NULL
);

CREATE TABLE api_tokens (
    id            TEXT PRIMARY KEY,
    user_id       TEXT NOT NULL REFERENCES users(id),
    name          TEXT NOT NULL,
    token_hash    TEXT NOT NULL UNIQUE,
    created_at    BIGINT NOT NULL,
    expires_at    BIGINT,
    last_used_at  BIGINT,
    revoked_at    BIGINT
);

CREATE TABLE login_codes (
    code_hash   TEXT PRIMARY KEY,
    user_id     TEXT NOT NULL REFERENCES users(id),
    created_at  BIGINT NOT NULL,
    expires_at  BIGINT NOT NULL,
    used_at     BIGINT
);

CREATE TABLE repos (
    id              TEXT PRIMARY KEY,
    name            TEXT NOT NULL UNIQUE,
    url             TEXT NOT NULL,
    default_branch  TEXT NOT NULL,
    created_by      TEXT NOT NULL REFERENCES users(id),
    created_at      BIGINT NOT NULL
);

CREATE TABLE snapshots (
    id             TEXT PRIMARY KEY,
    repo_id        TEXT NOT NULL REFERENCES repos(id),
    state          TEXT NOT NULL,
    commit_sha     TEXT,
    image_digest   TEXT,
    recipe_hash    TEXT,
    agent_version  TEXT,
    size_bytes     BIGINT,
    build_ms       BIGINT,
    error          TEXT,
    created_at     BIGINT NOT NULL,
    finished_at    BIGINT
);
CREATE INDEX snapshots_repo ON snapshots(repo_id, created_at);

CREATE TABLE sessions (
    id              TEXT PRIMARY KEY,
    repo_id         TEXT NOT NULL REFERENCES repos(id),
    snapshot_id     TEXT REFERENCES snapshots(id),
    state           TEXT NOT NULL,
    title           TEXT NOT NULL,
    branch          TEXT NOT NULL,
    author_kind     TEXT NOT NULL,
    author_user_id  TEXT REFERENCES users(id),
    author_name     TEXT NOT NULL,
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL,
    last_seq        BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX sessions_created ON sessions(created_at);
CREATE INDEX sessions_repo ON sessions(repo_id, created_at);

CREATE TABLE prompts (
    id              TEXT PRIMARY KEY,
    session_id      TEXT NOT NULL REFERENCES sessions(id),
    position        BIGINT NOT NULL,
    author_kind     TEXT NOT NULL,
    author_user_id  TEXT REFERENCES users(id),
    author_name     TEXT NOT NULL,
    text            TEXT NOT NULL,
    mode            TEXT NOT NULL,
    state           TEXT NOT NULL,
    created_at      BIGINT NOT NULL,
    UNIQUE (session_id, position)
);

-- Append-only: one row per event, gap-free seq per session (allocated from sessions.last_seq).
CREATE TABLE events (
    session_id  TEXT NOT NULL REFERENCES sessions(id),
    seq         BIGINT NOT NULL,
    at          BIGINT NOT NULL,
    type        TEXT NOT NULL,
    payload     TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
);
CREATE FUNCTION events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'events are append-only';
END;
$$;
CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE ON events
FOR EACH ROW EXECUTE FUNCTION events_append_only();

CREATE TABLE audit (
    id             BIGSERIAL PRIMARY KEY,
    at             BIGINT NOT NULL,
    actor_user_id  TEXT,
    actor_name     TEXT NOT NULL,
    action         TEXT NOT NULL,
    target         TEXT NOT NULL,
    detail         TEXT NOT NULL
);
