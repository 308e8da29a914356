-- The server (its data dir's id) whose host runs a session's workspace: only it supervises
-- or recovers that workspace when several servers share the database.
ALTER TABLE sessions ADD COLUMN workspace_host TEXT;
