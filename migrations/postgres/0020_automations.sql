-- Automations: a prompt a repo runs on a schedule (`schedule` set) or when its webhook is called
-- (`webhook_hash`: the URL's secret, hashed); each run (one per period, whichever server process
-- claims it first: the primary key) is a session attributed to the automation.
CREATE TABLE automations (
    id          TEXT PRIMARY KEY,
    repo_id     TEXT NOT NULL REFERENCES repos(id) ON DELETE CASCADE,
    name        TEXT NOT NULL,
    prompt      TEXT NOT NULL,
    schedule    TEXT,
    webhook_hash TEXT UNIQUE,
    agent       TEXT,
    created_by  TEXT NOT NULL REFERENCES users(id),
    created_at  BIGINT NOT NULL,
    next_at     BIGINT
);

CREATE TABLE automation_runs (
    automation_id  TEXT NOT NULL REFERENCES automations(id) ON DELETE CASCADE,
    period         BIGINT NOT NULL,
    session_id     TEXT,
    error          TEXT,
    created_at     BIGINT NOT NULL,
    PRIMARY KEY (automation_id, period)
);
