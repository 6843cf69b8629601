-- Cloud pools (docs/pools.md): the tables of sqlite/migrations'
-- 0016_pools.sql, with the same columns. Times are unix nanoseconds, 0 for
-- none; durations nanoseconds.

-- queues is a JSON array ([]: every queue), labels a JSON object;
-- sealed_api_key is the provider credential, sealed.
CREATE TABLE pools (
	name                text COLLATE "C" PRIMARY KEY,
	provider            text NOT NULL,
	gpu_type            text NOT NULL,
	gpus                integer NOT NULL,
	max_instances       integer NOT NULL,
	max_price           double precision NOT NULL,
	idle_timeout        bigint NOT NULL,
	strictness          text NOT NULL,
	image               text NOT NULL,
	url                 text NOT NULL,
	queues              text NOT NULL,
	labels              text NOT NULL,
	preserve_on_failure boolean NOT NULL,
	sealed_api_key      bytea,
	created_at          bigint NOT NULL,
	updated_at          bigint NOT NULL
);

-- One row per instance rented (or being rented); it outlives its pool.
-- timeline and probes are JSON arrays of the instance's phase changes and
-- readiness checks.
CREATE TABLE instances (
	id          text COLLATE "C" PRIMARY KEY,
	pool        text COLLATE "C" NOT NULL,
	provider_id bigint NOT NULL,
	offer_id    bigint NOT NULL,
	machine_id  bigint NOT NULL,
	gpu_name    text NOT NULL,
	gpus        integer NOT NULL,
	price_per_h double precision NOT NULL,
	phase       text NOT NULL,
	failure     text NOT NULL,
	last_error  text NOT NULL,
	worker_host text NOT NULL,
	ssh_addr    text NOT NULL,
	timeline    text NOT NULL,
	probes      text NOT NULL,
	created_at  bigint NOT NULL,
	ready_at    bigint NOT NULL,
	idle_since  bigint NOT NULL,
	ended_at    bigint NOT NULL
);
CREATE INDEX instances_pool ON instances (pool, created_at);
CREATE INDEX instances_phase ON instances (phase);

-- Berth's memory of each marketplace machine: failures is a JSON object of
-- counts by failure class.
CREATE TABLE host_records (
	provider          text COLLATE "C" NOT NULL,
	machine_id        bigint NOT NULL,
	gpu_name          text NOT NULL,
	driver            text NOT NULL,
	successes         integer NOT NULL,
	failures          text NOT NULL,
	last_seen         bigint NOT NULL,
	last_failure      text NOT NULL,
	quarantined_until bigint NOT NULL,
	blocked           boolean NOT NULL,
	PRIMARY KEY (provider, machine_id)
);
