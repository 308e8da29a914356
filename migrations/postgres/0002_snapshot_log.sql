-- Snapshot builds keep their log and the branch they were built from.
ALTER TABLE snapshots ADD COLUMN branch TEXT NOT NULL DEFAULT '';
ALTER TABLE snapshots ADD COLUMN log TEXT NOT NULL DEFAULT '';
