-- A stop asked through another server process, kept with the prompt so the process running
-- its turn finds it at its next heartbeat even if the notification was lost.
ALTER TABLE prompts ADD COLUMN stop_requested_by TEXT;
