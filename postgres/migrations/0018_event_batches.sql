-- Events are stored a write at a time: one row for the events of each
-- Write, body the JSON array of them and seqs their seqs, in the same
-- order, seq the newest one's. A row an event, its index entry and its
-- later delete were a quarter of the writer's work in a run of short jobs
-- (three events a job). body is text, kept out of line uncompressed:
-- PostgreSQL neither parses the JSON Berth wrote (json would, on every
-- write) nor compresses it, which took most of the rest. Writes delete the
-- rows whose events are all older than the newest 65536 (store.KeptEvents).
CREATE TABLE event_batches (
	seq  bigint PRIMARY KEY,
	seqs bigint[] NOT NULL,
	body text NOT NULL
);
ALTER TABLE event_batches ALTER COLUMN body SET STORAGE EXTERNAL;
INSERT INTO event_batches (seq, seqs, body) SELECT seq, ARRAY[seq], json_build_array(body)::text FROM events;
DROP TABLE events;

-- events is the newest 65536 events (store.KeptEvents), one row each, as
-- the table of that name held them.
CREATE VIEW events AS
WITH newest AS (SELECT coalesce(max(seq), 0) - 65536 AS past FROM event_batches)
SELECT e.seq, e.body
FROM newest, event_batches b, ROWS FROM (unnest(b.seqs), json_array_elements(b.body::json)) AS e (seq, body)
WHERE b.seq > newest.past AND e.seq > newest.past;
