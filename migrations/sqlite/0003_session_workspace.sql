-- A session's workspace: its runtime id, the commit it started from, its init's host PID, and
-- where its diff is kept after it stops.
ALTER TABLE sessions ADD COLUMN workspace_id TEXT;
ALTER TABLE sessions ADD COLUMN base_commit TEXT;
ALTER TABLE sessions ADD COLUMN workspace_pid BIGINT;
