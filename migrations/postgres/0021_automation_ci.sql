-- An automation may run when a pull request's CI check fails on a Tandem branch: at most
-- `ci_max_runs` follow-up prompts per pull request.
ALTER TABLE automations ADD COLUMN ci_max_runs BIGINT;
