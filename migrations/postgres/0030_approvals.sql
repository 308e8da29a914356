-- Approvals: an agent's tool call paused for a driver's answer. `subject` and the authors
-- are the protocol's types as JSON; `grant_key` is what "approve for the rest of the
-- session" remembers (approval_grants). A pending approval past `expires_at` is a denial.
CREATE TABLE approvals (
    id           TEXT PRIMARY KEY,
    session_id   TEXT NOT NULL REFERENCES sessions(id),
    prompt_id    TEXT,
    subject      TEXT NOT NULL,
    grant_key    TEXT NOT NULL,
    arguments    TEXT NOT NULL,
    asked_for    TEXT,
    state        TEXT NOT NULL,
    asked_at     BIGINT NOT NULL,
    expires_at   BIGINT NOT NULL,
    answered_by  TEXT,
    answered_at  BIGINT,
    reason       TEXT,
    for_session  BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX approvals_by_session ON approvals (session_id, asked_at);
CREATE INDEX approvals_pending ON approvals (state, expires_at);

CREATE TABLE approval_grants (
    session_id  TEXT NOT NULL REFERENCES sessions(id),
    grant_key   TEXT NOT NULL,
    granted_by  TEXT NOT NULL,
    granted_at  BIGINT NOT NULL,
    PRIMARY KEY (session_id, grant_key)
);

-- Remote MCP servers (streamable HTTP) the gateway reaches for workspaces. `secret` names
-- the secret store's entry sent as the bearer credential; `repos`, `rules` and `repo_rules`
-- are JSON.
CREATE TABLE mcp_servers (
    name        TEXT PRIMARY KEY,
    url         TEXT NOT NULL,
    secret      TEXT,
    repos       TEXT NOT NULL,
    rules       TEXT NOT NULL,
    repo_rules  TEXT NOT NULL,
    updated_at  BIGINT NOT NULL,
    updated_by  TEXT NOT NULL
);
