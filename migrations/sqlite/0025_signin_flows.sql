-- Keep in step with ../postgres/0025_signin_flows.sql.
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
-- A browser keeps at most 5 flows, a signed-in person 5 (flows.rs drops the oldest).
CREATE INDEX signin_flows_binding ON signin_flows(binding_hash, created_at);
CREATE INDEX signin_flows_started_by ON signin_flows(started_by, created_at);
DROP TABLE oidc_flows;

-- What Slack vouches for about the Slack user a one-time link is for, shown on the link page:
-- their email (a full member's) and their workspace's name. slack_name is now their handle.
ALTER TABLE slack_link_codes ADD COLUMN slack_email TEXT;
ALTER TABLE slack_link_codes ADD COLUMN team_label TEXT NOT NULL DEFAULT '';

-- OpenID groups are now `<provider>:<group>`; every group stored or granted before this
-- migration is a bare name, whichever provider it came from (a bare name that contains a colon
-- too: `acme:eng` then meant a group of that very name, not acme's `eng`). A person's groups
-- come back, namespaced, at their next OpenID sign-in; a bare grant would otherwise match
-- nothing (or, with a colon, another provider's group), so it goes: admins grant again by
-- `<provider>:<group>` (the repo's access page says so).
UPDATE users SET groups = '[]' WHERE groups <> '[]';
DELETE FROM repo_grants WHERE kind = 'group';
-- An email an OpenID provider said was verified was recorded whatever the provider; now only a
-- provider the admin marks trust_email_verified records one. A person's email came either from
-- their invite or from OpenID (nothing else sets it): one that is not their invite's goes, and a
-- trusted provider records it again at the next sign-in.
UPDATE users SET email = NULL
WHERE email IS NOT NULL
  AND NOT EXISTS (
      SELECT 1 FROM invites
      WHERE invites.used_by = users.id AND lower(invites.email) = users.email
  );
