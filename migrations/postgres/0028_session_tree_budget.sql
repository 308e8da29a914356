-- A session tree (a session, the children its agent spawns, forks, and theirs) shares one model
-- budget, its root's: `root_id` names the tree's root (NULL: the session is a root), and a
-- root's `tree_model_requests` counts the model requests of its whole tree.
ALTER TABLE sessions ADD COLUMN root_id TEXT REFERENCES sessions(id);
ALTER TABLE sessions ADD COLUMN tree_model_requests BIGINT NOT NULL DEFAULT 0;
WITH RECURSIVE up(id, root) AS (
    SELECT id, id FROM sessions WHERE parent_id IS NULL
    UNION ALL
    SELECT s.id, up.root FROM sessions s JOIN up ON s.parent_id = up.id
)
UPDATE sessions SET root_id = (SELECT root FROM up WHERE up.id = sessions.id)
WHERE parent_id IS NOT NULL;
UPDATE sessions SET tree_model_requests = (
    SELECT COALESCE(SUM(t.model_requests), 0) FROM sessions t
    WHERE t.id = sessions.id OR t.root_id = sessions.id
) WHERE root_id IS NULL;
