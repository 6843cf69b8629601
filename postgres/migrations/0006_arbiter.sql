-- The GPU arbiter's coordination state (seed 000), kept across restarts
-- and shared by every server of the database. Times are unix nanoseconds.

-- The swap reservation lock: at most one row (id 1). A row past its
-- expires_at is no lock; the next acquire replaces it.
CREATE TABLE swap_lock (
	id          integer PRIMARY KEY CHECK (id = 1),
	holder      text NOT NULL,
	note        text NOT NULL DEFAULT '',
	token       text NOT NULL,
	acquired_at bigint NOT NULL,
	expires_at  bigint NOT NULL
);

-- The schedule registry: jobs external schedulers run on the GPUs,
-- registered for display.
CREATE TABLE schedules (
	id            text PRIMARY KEY,
	name          text NOT NULL,
	owner         text NOT NULL DEFAULT '',
	cron          text NOT NULL DEFAULT '',
	next_run      text NOT NULL DEFAULT '',
	description   text NOT NULL DEFAULT '',
	registered_at bigint NOT NULL,
	updated_at    bigint NOT NULL
);
