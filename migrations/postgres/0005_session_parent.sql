-- Forked and child sessions point at the session they came from.
ALTER TABLE sessions ADD COLUMN parent_id TEXT REFERENCES sessions(id);
