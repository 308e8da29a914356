-- How many started, unclaimed workspaces to keep ready for a repo.
ALTER TABLE repos ADD COLUMN warm_pool BIGINT NOT NULL DEFAULT 0;
