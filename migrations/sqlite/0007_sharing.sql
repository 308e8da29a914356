-- Share links (signed tokens; the row is what revocation and expiry are checked against) and
-- the sessions people joined through them.
CREATE TABLE share_links (
    jti           TEXT PRIMARY KEY,
    session_id    TEXT NOT NULL REFERENCES sessions(id),
    role          TEXT NOT NULL,
    allow_guests  BIGINT NOT NULL DEFAULT 0,
    created_by    TEXT NOT NULL REFERENCES users(id),
    created_at    BIGINT NOT NULL,
    expires_at    BIGINT NOT NULL,
    revoked_at    BIGINT
);
CREATE INDEX share_links_session ON share_links(session_id, created_at);

CREATE TABLE session_members (
    session_id  TEXT NOT NULL REFERENCES sessions(id),
    user_id     TEXT NOT NULL REFERENCES users(id),
    role        TEXT NOT NULL,
    via_link    TEXT REFERENCES share_links(jti),
    joined_at   BIGINT NOT NULL,
    PRIMARY KEY (session_id, user_id)
);
