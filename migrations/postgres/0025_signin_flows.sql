-- Keep in step with ../sqlite/0025_signin_flows.sql.
-- Sign-in and link flows in flight (GitHub, OpenID Connect, the Slack link) in one table: the
-- state's hash, the hash of the per-browser binding secret (it lives only in an HttpOnly
-- cookie), the kind, the person who started it when signed in, and what the kind keeps
-- (OpenID's nonce and PKCE verifier, the Slack link code's hash). A flow is taken once, by one
-- conditional DELETE. It replaces oidc_flows (a sign-in in flight during the upgrade starts again).
CREATE TABLE signin_flows (
    state_hash    TEXT PRIMARY KEY,
    binding_hash  TEXT NOT NULL,
    kind          TEXT NOT NULL,
    started_by    TEXT,
    data          TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    expires_at    BIGINT NOT NULL
);
CREATE INDEX signin_flows_expires ON signin_flows(expires_at);
DROP TABLE oidc_flows;

-- What Slack vouches for about the Slack user a one-time link is for, shown on the link page:
-- their email (a full member's) and their workspace's name. slack_name is now their handle.
ALTER TABLE slack_link_codes ADD COLUMN slack_email TEXT;
ALTER TABLE slack_link_codes ADD COLUMN team_label TEXT NOT NULL DEFAULT '';
