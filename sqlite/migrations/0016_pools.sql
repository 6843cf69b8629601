-- Cloud pools (docs/pools.md): the pools, the instances they rented and
-- the records of the marketplace's machines. Times are unix nanoseconds,
-- 0 for none; durations nanoseconds.

-- queues is a JSON array ([]: every queue), labels a JSON object;
-- sealed_api_key is the provider credential, sealed.
CREATE TABLE pools (
	name                TEXT PRIMARY KEY,
	provider            TEXT NOT NULL,
	gpu_type            TEXT NOT NULL,
	gpus                INTEGER NOT NULL,
	max_instances       INTEGER NOT NULL,
	max_price           REAL NOT NULL,
	idle_timeout        INTEGER NOT NULL,
	strictness          TEXT NOT NULL,
	image               TEXT NOT NULL,
	url                 TEXT NOT NULL,
	queues              TEXT NOT NULL,
	labels              TEXT NOT NULL,
	preserve_on_failure INTEGER NOT NULL,
	sealed_api_key      BLOB,
	created_at          INTEGER NOT NULL,
	updated_at          INTEGER NOT NULL
) WITHOUT ROWID;

-- One row per instance rented (or being rented); it outlives its pool.
-- timeline and probes are JSON arrays of the instance's phase changes and
-- readiness checks.
CREATE TABLE instances (
	id          TEXT PRIMARY KEY,
	pool        TEXT NOT NULL,
	provider_id INTEGER NOT NULL,
	offer_id    INTEGER NOT NULL,
	machine_id  INTEGER NOT NULL,
	gpu_name    TEXT NOT NULL,
	gpus        INTEGER NOT NULL,
	price_per_h REAL NOT NULL,
	phase       TEXT NOT NULL,
	failure     TEXT NOT NULL,
	last_error  TEXT NOT NULL,
	worker_host TEXT NOT NULL,
	ssh_addr    TEXT NOT NULL,
	timeline    TEXT NOT NULL,
	probes      TEXT NOT NULL,
	created_at  INTEGER NOT NULL,
	ready_at    INTEGER NOT NULL,
	idle_since  INTEGER NOT NULL,
	ended_at    INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX instances_pool ON instances (pool, created_at);
CREATE INDEX instances_phase ON instances (phase);

-- Berth's memory of each marketplace machine: failures is a JSON object of
-- counts by failure class.
CREATE TABLE host_records (
	provider          TEXT NOT NULL,
	machine_id        INTEGER NOT NULL,
	gpu_name          TEXT NOT NULL,
	driver            TEXT NOT NULL,
	successes         INTEGER NOT NULL,
	failures          TEXT NOT NULL,
	last_seen         INTEGER NOT NULL,
	last_failure      TEXT NOT NULL,
	quarantined_until INTEGER NOT NULL,
	blocked           INTEGER NOT NULL,
	PRIMARY KEY (provider, machine_id)
) WITHOUT ROWID;
