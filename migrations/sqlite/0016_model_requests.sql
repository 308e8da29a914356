-- Model requests a session's workspace has made through its gateway (its budget's use; kept
-- across restarts and shared by every server of a cluster).
ALTER TABLE sessions ADD COLUMN model_requests BIGINT NOT NULL DEFAULT 0;
