-- What the agents cost and how long their workspaces ran, counted as it happens so the budgets
-- and the insights page read it in one indexed query.
--
-- Per session: its model (the last one a request named), the gateway's own count of tokens and
-- their cost in micro-dollars (from the provider's answers, never from the workspace), and a
-- tree's totals on its root (as `tree_model_requests`). Sandbox time: `running_ms` (starting,
-- ready, running, idle) and `suspended_ms` add up the time spent in each state, counted at each
-- state change from `state_since`. Test commands the agent ran, and how many passed.
ALTER TABLE sessions ADD COLUMN model TEXT;
ALTER TABLE sessions ADD COLUMN prompt_tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN completion_tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN cost_micros BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN tree_tokens BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN tree_cost_micros BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN running_ms BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN suspended_ms BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN state_since BIGINT;
ALTER TABLE sessions ADD COLUMN tests_run BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN tests_passed BIGINT NOT NULL DEFAULT 0;
-- An automation's limits for each of its runs, copied to the run's root like `model_budget`.
ALTER TABLE sessions ADD COLUMN token_budget BIGINT;
ALTER TABLE sessions ADD COLUMN cost_budget_micros BIGINT;
ALTER TABLE automations ADD COLUMN max_cost_micros BIGINT;
ALTER TABLE automations ADD COLUMN max_tokens BIGINT;
-- Review time: when a pull request was merged or closed unmerged (from the webhooks).
ALTER TABLE pull_requests ADD COLUMN merged_at BIGINT;
ALTER TABLE pull_requests ADD COLUMN closed_at BIGINT;
-- Use per day (days since 1970-01-01, UTC) of a person (`scope` = 'person', `key` their user
-- id) and of a repo ('repo', its id): the daily budgets.
CREATE TABLE spend_daily (
    scope        TEXT NOT NULL,
    key          TEXT NOT NULL,
    day          BIGINT NOT NULL,
    tokens       BIGINT NOT NULL DEFAULT 0,
    cost_micros  BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (scope, key, day)
);
-- The insights page filters sessions by when they were made and groups them: these cover
-- its per-person query (the per-repo one has `sessions_repo`).
CREATE INDEX sessions_author_created ON sessions (author_user_id, created_at);
-- Prompts waiting in every queue, counted at each scrape of /metrics.
CREATE INDEX prompts_state ON prompts (state);
-- The insights page's counts per session, kept as rows are written so its query is one scan
-- of the period's sessions: prompts submitted, turns that ended stopped or failed, prompts run
-- again after an interruption, approvals asked.
ALTER TABLE sessions ADD COLUMN prompts_count BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN interrupted_turns BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN retries BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN approvals_count BIGINT NOT NULL DEFAULT 0;
UPDATE sessions SET
    prompts_count = (SELECT COUNT(*) FROM prompts p WHERE p.session_id = sessions.id),
    interrupted_turns = (SELECT COUNT(*) FROM prompts p WHERE p.session_id = sessions.id AND p.state IN ('stopped', 'failed')),
    retries = (SELECT COALESCE(SUM(p.attempts), 0) FROM prompts p WHERE p.session_id = sessions.id),
    approvals_count = (SELECT COUNT(*) FROM approvals a WHERE a.session_id = sessions.id);
