-- The Chrome extension: an API token may carry a scope (`extension`: prompting and reading what
-- its person may see; none is a full token), and pairings in flight (device-style: the extension
-- shows a code, a signed-in person approves it, the extension takes its token once).
ALTER TABLE api_tokens ADD COLUMN scope TEXT;

CREATE TABLE pairings (
    id               TEXT PRIMARY KEY,
    device_hash      TEXT NOT NULL UNIQUE,
    user_code_hash   TEXT NOT NULL UNIQUE,
    label            TEXT NOT NULL,
    created_at       BIGINT NOT NULL,
    expires_at       BIGINT NOT NULL,
    approved_by      TEXT REFERENCES users(id),
    approved_at      BIGINT,
    taken_at         BIGINT
);
