-- The sweep and a restart look sessions up by the workspace they recorded.
CREATE INDEX IF NOT EXISTS sessions_workspace ON sessions (workspace_id);
