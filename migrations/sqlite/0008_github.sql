-- GitHub: accounts linked by sign-in (their user token sealed with the secret store's key), repos
-- imported from an App installation, the pull request of each session, the installation token
-- minted for each session (sealed; kept so it can be revoked after a restart), and webhook
-- deliveries already handled (GitHub redelivers).
CREATE TABLE github_accounts (
    user_id       TEXT PRIMARY KEY REFERENCES users(id),
    github_id     BIGINT NOT NULL UNIQUE,
    login         TEXT NOT NULL,
    name          TEXT,
    email         TEXT,
    token_sealed  TEXT,
    updated_at    BIGINT NOT NULL
);

CREATE TABLE github_repos (
    repo_id          TEXT PRIMARY KEY REFERENCES repos(id),
    owner            TEXT NOT NULL,
    name             TEXT NOT NULL,
    installation_id  BIGINT NOT NULL
);
CREATE UNIQUE INDEX github_repos_full_name ON github_repos(owner, name);

CREATE TABLE pull_requests (
    session_id  TEXT PRIMARY KEY REFERENCES sessions(id),
    repo_id     TEXT NOT NULL REFERENCES repos(id),
    number      BIGINT NOT NULL,
    url         TEXT NOT NULL,
    branch      TEXT NOT NULL,
    base        TEXT NOT NULL,
    state       TEXT NOT NULL,
    head_sha    TEXT NOT NULL,
    opened_by   TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL
);
CREATE UNIQUE INDEX pull_requests_number ON pull_requests(repo_id, number);

CREATE TABLE session_credentials (
    session_id    TEXT PRIMARY KEY REFERENCES sessions(id),
    token_sealed  TEXT NOT NULL,
    expires_at    BIGINT NOT NULL,
    revoked_at    BIGINT
);

CREATE TABLE github_deliveries (
    id           TEXT PRIMARY KEY,
    event        TEXT NOT NULL,
    received_at  BIGINT NOT NULL
);
