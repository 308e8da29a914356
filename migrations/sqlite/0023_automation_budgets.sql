-- An automation's runs may each get at most `max_model_requests` model requests (below the
-- server's own limit); the session keeps its budget in `model_budget`.
ALTER TABLE automations ADD COLUMN max_model_requests BIGINT;
ALTER TABLE sessions ADD COLUMN model_budget BIGINT;
