-- Sessions started from where people talk: Slack threads and GitHub issues.

-- Slack deliveries already handled (an event id, or a message's channel and ts): Slack retries.
CREATE TABLE slack_seen (
    key         TEXT PRIMARY KEY,
    at          BIGINT NOT NULL
);

-- A Slack user's Tandem person (by email, or through a one-time link).
CREATE TABLE slack_people (
    team_id       TEXT NOT NULL,
    slack_user_id TEXT NOT NULL,
    user_id       TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    linked_at     BIGINT NOT NULL,
    PRIMARY KEY (team_id, slack_user_id)
);

-- One-time links that tie a Slack user to the person who opens them (hashed).
CREATE TABLE slack_link_codes (
    code_hash     TEXT PRIMARY KEY,
    team_id       TEXT NOT NULL,
    slack_user_id TEXT NOT NULL,
    slack_name    TEXT NOT NULL,
    expires_at    BIGINT NOT NULL
);

-- A channel's default repo (`team_id` `*`: set in the web app, for any workspace).
CREATE TABLE slack_channels (
    team_id     TEXT NOT NULL,
    channel_id  TEXT NOT NULL,
    repo_id     TEXT NOT NULL REFERENCES repos(id) ON DELETE CASCADE,
    set_by      TEXT NOT NULL,
    set_at      BIGINT NOT NULL,
    PRIMARY KEY (team_id, channel_id)
);

-- Admins' rules: a message holding `keyword` (a word or a piece of a URL) is about `repo_id`.
CREATE TABLE slack_rules (
    keyword     TEXT PRIMARY KEY,
    repo_id     TEXT NOT NULL REFERENCES repos(id) ON DELETE CASCADE
);

-- A thread that is a session's conversation; `status_ts` is the status message kept up to date.
CREATE TABLE slack_threads (
    team_id     TEXT NOT NULL,
    channel_id  TEXT NOT NULL,
    thread_ts   TEXT NOT NULL,
    session_id  TEXT NOT NULL UNIQUE,
    status_ts   TEXT,
    trigger_ts  TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    PRIMARY KEY (team_id, channel_id, thread_ts)
);

-- A task waiting for its person to choose a repo.
CREATE TABLE slack_pending (
    id            TEXT PRIMARY KEY,
    team_id       TEXT NOT NULL,
    channel_id    TEXT NOT NULL,
    thread_ts     TEXT NOT NULL,
    trigger_ts    TEXT NOT NULL,
    slack_user_id TEXT NOT NULL,
    text          TEXT NOT NULL,
    created_at    BIGINT NOT NULL
);

-- The GitHub issue a session was started from; `comment_id` is its progress comment.
CREATE TABLE issue_sessions (
    session_id  TEXT PRIMARY KEY,
    repo_id     TEXT NOT NULL REFERENCES repos(id) ON DELETE CASCADE,
    number      BIGINT NOT NULL,
    comment_id  BIGINT,
    created_at  BIGINT NOT NULL
);

-- Who reports a session's progress somewhere (`kind`: slack, github_issue) and how far it got.
-- A process holds a follower while `claimed_until` is ahead; another takes it over after.
CREATE TABLE progress_followers (
    session_id    TEXT NOT NULL,
    kind          TEXT NOT NULL,
    last_seq      BIGINT NOT NULL DEFAULT 0,
    claimed_by    TEXT,
    claimed_until BIGINT NOT NULL DEFAULT 0,
    done          BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (session_id, kind)
);
