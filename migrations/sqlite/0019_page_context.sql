-- What the Chrome extension sends with a prompt: the page, the picked element and its
-- screenshots (the screenshots themselves are the session's artifacts; this JSON names them).
ALTER TABLE prompts ADD COLUMN context TEXT;

-- Which repo a page belongs to, for the extension's default: `https://app.acme.com/*` → acme/web.
CREATE TABLE page_rules (
    pattern     TEXT PRIMARY KEY,
    repo_id     TEXT NOT NULL REFERENCES repos(id) ON DELETE CASCADE,
    created_by  TEXT NOT NULL REFERENCES users(id),
    created_at  BIGINT NOT NULL
);
