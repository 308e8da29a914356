-- Where a pairing of the Chrome extension was asked from (the client's address as the server
-- saw it), shown on the page where a person approves it.
ALTER TABLE pairings ADD COLUMN address TEXT;
