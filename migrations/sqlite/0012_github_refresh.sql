-- GitHub Apps' user tokens expire (8 hours): the refresh token (sealed) and when the access
-- token expires, so pull requests keep being opened as the person.
ALTER TABLE github_accounts ADD COLUMN refresh_sealed TEXT;
ALTER TABLE github_accounts ADD COLUMN token_expires_at BIGINT;
