-- Agent runs: the session's agent, the prompt queue's turn bookkeeping, the agent's kept state,
-- artifacts, secrets.
ALTER TABLE sessions ADD COLUMN agent TEXT NOT NULL DEFAULT '{"kind":"builtin"}';

ALTER TABLE prompts ADD COLUMN agent TEXT;
ALTER TABLE prompts ADD COLUMN attempts BIGINT NOT NULL DEFAULT 0;
-- The server process running its turn, and when it last said it still is.
ALTER TABLE prompts ADD COLUMN runner TEXT;
ALTER TABLE prompts ADD COLUMN heartbeat_at BIGINT;
ALTER TABLE prompts ADD COLUMN started_at BIGINT;
ALTER TABLE prompts ADD COLUMN finished_at BIGINT;
ALTER TABLE prompts ADD COLUMN prompt_tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE prompts ADD COLUMN completion_tokens BIGINT NOT NULL DEFAULT 0;
-- The session lock: at most one running turn per session, whichever process claims it.
CREATE UNIQUE INDEX prompts_one_running ON prompts(session_id) WHERE state = 'running';
CREATE INDEX prompts_by_state ON prompts(session_id, state, position);

-- What the agent needs to continue its conversation in any workspace.
CREATE TABLE agent_states (
    session_id  TEXT PRIMARY KEY REFERENCES sessions(id),
    state       TEXT NOT NULL,
    updated_at  BIGINT NOT NULL
);

-- Large outputs kept whole (events keep a cut). `body` is base64 for binary content.
CREATE TABLE artifacts (
    id            TEXT PRIMARY KEY,
    session_id    TEXT NOT NULL REFERENCES sessions(id),
    name          TEXT NOT NULL,
    content_type  TEXT NOT NULL,
    size          BIGINT NOT NULL,
    body          TEXT NOT NULL,
    created_at    BIGINT NOT NULL
);
CREATE INDEX artifacts_session ON artifacts(session_id, created_at);

-- Encrypted with the server's key (`<data dir>/secrets.key`, ChaCha20-Poly1305); base64.
CREATE TABLE secrets (
    name        TEXT PRIMARY KEY,
    nonce       TEXT NOT NULL,
    ciphertext  TEXT NOT NULL,
    updated_at  BIGINT NOT NULL
);

CREATE INDEX audit_target ON audit(target);
