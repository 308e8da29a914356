-- Settings made on the first-run/settings page. `<data dir>/tandem.toml` wins over any of them.
CREATE TABLE settings (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL,
    updated_at BIGINT NOT NULL,
    updated_by TEXT
);
