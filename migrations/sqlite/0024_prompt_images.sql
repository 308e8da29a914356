-- Images that came with a prompt from where it was written (a Slack message and its thread):
-- JSON `[{artifact, name, width, height}]`, the artifacts the session's.
ALTER TABLE prompts ADD COLUMN images TEXT;
