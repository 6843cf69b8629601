-- Quota rules: caps on the running jobs of a user, queue or template, and
-- a user's fair-share weight. id is "SCOPE:NAME"; max_gpus and max_jobs
-- are -1 for no limit; weight 0 means the default (1). updated_at is unix
-- nanoseconds.
CREATE TABLE quota_rules (
	id         TEXT PRIMARY KEY,
	scope      TEXT NOT NULL,
	name       TEXT NOT NULL,
	max_gpus   INTEGER NOT NULL,
	max_jobs   INTEGER NOT NULL,
	weight     REAL NOT NULL,
	updated_at INTEGER NOT NULL
) WITHOUT ROWID;
