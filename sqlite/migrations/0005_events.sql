-- Events: each berth.Event as JSON, by its sequence number (the rowid).
-- Writes keep the newest store.KeptEvents and delete older ones.
CREATE TABLE events (
	seq  INTEGER PRIMARY KEY,
	body BLOB NOT NULL
);
