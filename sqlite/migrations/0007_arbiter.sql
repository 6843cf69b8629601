-- The GPU arbiter's coordination state (seed 000), kept across restarts.
-- Times are unix nanoseconds.

-- The swap reservation lock: at most one row (id 1). A row past its
-- expires_at is no lock; the next acquire replaces it.
CREATE TABLE swap_lock (
	id          INTEGER PRIMARY KEY CHECK (id = 1),
	holder      TEXT NOT NULL,
	note        TEXT NOT NULL DEFAULT '',
	token       TEXT NOT NULL,
	acquired_at INTEGER NOT NULL,
	expires_at  INTEGER NOT NULL
);

-- The schedule registry: jobs external schedulers run on the GPUs,
-- registered for display.
CREATE TABLE schedules (
	id            TEXT PRIMARY KEY,
	name          TEXT NOT NULL,
	owner         TEXT NOT NULL DEFAULT '',
	cron          TEXT NOT NULL DEFAULT '',
	next_run      TEXT NOT NULL DEFAULT '',
	description   TEXT NOT NULL DEFAULT '',
	registered_at INTEGER NOT NULL,
	updated_at    INTEGER NOT NULL
) WITHOUT ROWID;
