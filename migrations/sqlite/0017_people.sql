-- Keep in step with ../postgres/0017_people.sql.
-- People and permissions: a person's email (their identity across sign-in methods), groups
-- (from the identity provider) and deactivation; one-time invites; OpenID Connect identities
-- and the sign-ins in flight; who may use each repo; private sessions.
ALTER TABLE users ADD COLUMN email TEXT;
ALTER TABLE users ADD COLUMN groups TEXT NOT NULL DEFAULT '[]';
ALTER TABLE users ADD COLUMN deactivated_at BIGINT;
CREATE UNIQUE INDEX users_email ON users(email);

CREATE TABLE invites (
    id          TEXT PRIMARY KEY,
    code_hash   TEXT NOT NULL UNIQUE,
    name        TEXT NOT NULL,
    email       TEXT,
    is_admin    BIGINT NOT NULL DEFAULT 0,
    created_by  TEXT NOT NULL REFERENCES users(id),
    created_at  BIGINT NOT NULL,
    expires_at  BIGINT NOT NULL,
    used_at     BIGINT,
    used_by     TEXT REFERENCES users(id),
    revoked_at  BIGINT
);

CREATE TABLE identities (
    provider    TEXT NOT NULL,
    subject     TEXT NOT NULL,
    user_id     TEXT NOT NULL REFERENCES users(id),
    created_at  BIGINT NOT NULL,
    PRIMARY KEY (provider, subject)
);

CREATE TABLE oidc_flows (
    state_hash     TEXT PRIMARY KEY,
    provider       TEXT NOT NULL,
    nonce          TEXT NOT NULL,
    pkce_verifier  TEXT NOT NULL,
    created_at     BIGINT NOT NULL,
    expires_at     BIGINT NOT NULL,
    used_at        BIGINT
);

-- 'everyone' (every active person may start sessions), 'github' (the person's GitHub
-- permission on the repo), 'members' (only the grants below).
ALTER TABLE repos ADD COLUMN access TEXT NOT NULL DEFAULT 'everyone';
UPDATE repos SET access = 'github' WHERE id IN (SELECT repo_id FROM github_repos);

CREATE TABLE repo_grants (
    repo_id     TEXT NOT NULL REFERENCES repos(id),
    kind        TEXT NOT NULL,
    who         TEXT NOT NULL,
    role        TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    PRIMARY KEY (repo_id, kind, who)
);

ALTER TABLE sessions ADD COLUMN private BIGINT NOT NULL DEFAULT 0;
