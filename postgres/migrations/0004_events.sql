-- Events: each berth.Event as JSON, by its sequence number. Writes keep
-- the newest store.KeptEvents and delete older ones.
CREATE TABLE events (
	seq  bigint PRIMARY KEY,
	body json NOT NULL
);
