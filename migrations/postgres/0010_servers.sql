-- The server processes sharing the database and where the others reach them: a request about a
-- session whose workspace another server's host runs is forwarded there.
CREATE TABLE servers (
    id TEXT PRIMARY KEY,
    url TEXT NOT NULL,
    seen_at BIGINT NOT NULL
);
