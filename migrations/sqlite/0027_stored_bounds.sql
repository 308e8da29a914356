-- What each session has stored, counted as it is written (events are append-only and artifacts
-- are never deleted, so a counter is exact): its events' payload bytes and its artifacts' bytes
-- (its event count is `last_seq`). A workspace's writes are refused past the bounds of
-- `tandem_protocol::limits`, per session and per session tree. `bounds_noted` holds which of
-- those bounds the session's timeline has said it reached (a bit each): said once, not per
-- refusal.
ALTER TABLE sessions ADD COLUMN event_bytes BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN artifact_bytes BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN bounds_noted BIGINT NOT NULL DEFAULT 0;
UPDATE sessions SET
    event_bytes = (SELECT COALESCE(SUM(LENGTH(CAST(e.payload AS BLOB))), 0) FROM events e WHERE e.session_id = sessions.id),
    artifact_bytes = (SELECT COALESCE(SUM(LENGTH(CAST(a.body AS BLOB))), 0) FROM artifacts a WHERE a.session_id = sessions.id);
-- A session tree is walked by its parent links.
CREATE INDEX sessions_parent ON sessions(parent_id);
