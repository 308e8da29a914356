-- The diff a stopped or suspended session keeps (its workspace is gone or asleep): in the
-- store, so every server process sees it, not in one server's data directory. `diff` is the
-- protocol's Diff as JSON, its patch bounded by MAX_DIFF_BYTES.
CREATE TABLE kept_diffs (
    session_id  TEXT PRIMARY KEY REFERENCES sessions(id),
    diff        TEXT NOT NULL,
    kept_at     BIGINT NOT NULL
);
