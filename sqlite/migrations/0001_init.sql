-- Jobs: the spec as JSON, the columns listings filter on, and the mutable
-- state. Times are unix nanoseconds, 0 for none.
CREATE TABLE jobs (
	id              TEXT PRIMARY KEY,
	queue           TEXT NOT NULL,
	user_name       TEXT NOT NULL,
	idempotency_key TEXT,
	spec            BLOB NOT NULL,
	array_index     INTEGER,
	state           TEXT NOT NULL,
	reason          TEXT NOT NULL,
	exit_code       INTEGER,
	attempts        INTEGER NOT NULL,
	created_at      INTEGER NOT NULL,
	started_at      INTEGER NOT NULL,
	finished_at     INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX jobs_state ON jobs (state, id);
CREATE INDEX jobs_queue ON jobs (queue, id);
CREATE INDEX jobs_idempotency ON jobs (idempotency_key) WHERE idempotency_key IS NOT NULL;

CREATE TABLE attempts (
	id          TEXT PRIMARY KEY,
	job_id      TEXT NOT NULL,
	task_index  INTEGER NOT NULL,
	worker_id   TEXT NOT NULL,
	host        TEXT NOT NULL,
	gpus        TEXT NOT NULL,
	state       TEXT NOT NULL,
	exit_code   INTEGER,
	reason      TEXT NOT NULL,
	created_at  INTEGER NOT NULL,
	started_at  INTEGER NOT NULL,
	finished_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX attempts_job ON attempts (job_id, id);
CREATE INDEX attempts_active ON attempts (state) WHERE state IN ('assigned', 'running');

CREATE TABLE workers (
	id   TEXT PRIMARY KEY,
	body BLOB NOT NULL
) WITHOUT ROWID;

-- Logs: contiguous chunks of each attempt's output, keyed by byte offset.
CREATE TABLE logs (
	attempt_id TEXT NOT NULL,
	off        INTEGER NOT NULL,
	data       BLOB NOT NULL,
	PRIMARY KEY (attempt_id, off)
) WITHOUT ROWID;
