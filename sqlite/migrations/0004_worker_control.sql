-- Worker controls (seed 001): an operator's desired state for one queue of
-- one host, or with queue '*' for every queue of it. Desired state, kept
-- apart from workers (observed state): an off row stays while the worker
-- is silent and across restarts; no row means on. stop_policy is free
-- text, checked by the controller against its registry of policies.
-- updated_at is unix nanoseconds, 0 for none. The defaults serve plain-SQL
-- writers.
CREATE TABLE worker_controls (
	host_label    TEXT NOT NULL,
	queue         TEXT NOT NULL,
	desired_state TEXT NOT NULL CHECK (desired_state IN ('on', 'off')),
	stop_policy   TEXT NOT NULL DEFAULT 'hard',
	requested_by  TEXT NOT NULL DEFAULT '',
	updated_at    INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (host_label, queue)
) WITHOUT ROWID;

-- The progress each attempt last reported.
ALTER TABLE attempts ADD COLUMN progress TEXT NOT NULL DEFAULT '';
