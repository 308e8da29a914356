-- A session tree (a session, the children its agent spawns, forks, and theirs) shares one model
-- budget, its root's: `root_id` names the tree's root (NULL: the session is a root), and a
-- root's `tree_model_requests` counts the model requests of its whole tree.
ALTER TABLE sessions ADD COLUMN root_id TEXT REFERENCES sessions(id);
ALTER TABLE sessions ADD COLUMN tree_model_requests BIGINT NOT NULL DEFAULT 0;
-- First, so the backfill below and every tree lookup after it find a tree's sessions by index.
CREATE INDEX sessions_root ON sessions(root_id);
-- Each tree walked once from its root (children found by sessions_parent), joined back by id.
WITH RECURSIVE up(id, root) AS (
    SELECT id, id FROM sessions WHERE parent_id IS NULL
    UNION ALL
    SELECT s.id, up.root FROM sessions s JOIN up ON s.parent_id = up.id
)
UPDATE sessions SET root_id = up.root FROM up
WHERE up.id = sessions.id AND sessions.parent_id IS NOT NULL;
-- A root's total: its own requests plus its tree's, summed in one GROUP BY.
UPDATE sessions SET tree_model_requests = model_requests WHERE root_id IS NULL;
UPDATE sessions SET tree_model_requests = sessions.tree_model_requests + tree.n
FROM (SELECT root_id, SUM(model_requests) AS n FROM sessions WHERE root_id IS NOT NULL GROUP BY root_id) AS tree
WHERE sessions.id = tree.root_id;
