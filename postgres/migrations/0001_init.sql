-- The tables of sqlite/migrations, with the same columns. Times are unix
-- nanoseconds, 0 for none: timestamptz keeps only microseconds, and Berth's
-- times round-trip exactly. Keys sort byte-wise (COLLATE "C"), as ids and
-- listings expect whatever the database's locale. Values Berth owns (states,
-- policies) are not CHECKed: a value the schema refused would stop every
-- later write.

-- Jobs: the spec as JSON, the columns listings filter on, and the mutable
-- state.
CREATE TABLE jobs (
	id              text COLLATE "C" PRIMARY KEY,
	queue           text NOT NULL,
	user_name       text NOT NULL,
	idempotency_key text,
	spec            json NOT NULL,
	array_index     integer,
	state           text NOT NULL,
	reason          text NOT NULL,
	exit_code       integer,
	attempts        integer NOT NULL,
	created_at      bigint NOT NULL,
	started_at      bigint NOT NULL,
	finished_at     bigint NOT NULL
);
CREATE INDEX jobs_state ON jobs (state, id);
CREATE INDEX jobs_queue ON jobs (queue, id);
CREATE INDEX jobs_idempotency ON jobs (idempotency_key) WHERE idempotency_key IS NOT NULL;

-- Attempts: gpus is a JSON array of indexes; port is the coordinator port
-- held by rank 0 of a gang; progress is what the attempt last reported.
CREATE TABLE attempts (
	id          text COLLATE "C" PRIMARY KEY,
	job_id      text COLLATE "C" NOT NULL,
	task_index  integer NOT NULL,
	worker_id   text NOT NULL,
	host        text NOT NULL,
	gpus        json NOT NULL,
	state       text NOT NULL,
	exit_code   integer,
	reason      text NOT NULL,
	created_at  bigint NOT NULL,
	started_at  bigint NOT NULL,
	finished_at bigint NOT NULL,
	port        integer NOT NULL DEFAULT 0,
	progress    text NOT NULL DEFAULT ''
);
CREATE INDEX attempts_job ON attempts (job_id, id);
CREATE INDEX attempts_active ON attempts (state) WHERE state IN ('assigned', 'running');

-- Workers: each as the JSON of berth.Worker.
CREATE TABLE workers (
	id   text COLLATE "C" PRIMARY KEY,
	body json NOT NULL
);

-- Logs: contiguous chunks of each attempt's output, keyed by byte offset.
CREATE TABLE logs (
	attempt_id text COLLATE "C" NOT NULL,
	off        bigint NOT NULL,
	data       bytea NOT NULL,
	PRIMARY KEY (attempt_id, off)
);

-- Quota rules: caps on the running jobs of a user, queue or template, and
-- a user's fair-share weight. id is "SCOPE:NAME"; max_gpus and max_jobs
-- are -1 for no limit; weight 0 means the default (1).
CREATE TABLE quota_rules (
	id         text COLLATE "C" PRIMARY KEY,
	scope      text NOT NULL,
	name       text NOT NULL,
	max_gpus   integer NOT NULL,
	max_jobs   integer NOT NULL,
	weight     double precision NOT NULL,
	updated_at bigint NOT NULL
);

-- berth_raise fails the statement, and so the batch, that calls it: Write
-- uses it to refuse an update of a job that does not exist.
CREATE FUNCTION berth_raise(message text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
	RAISE EXCEPTION USING MESSAGE = message, ERRCODE = 'no_data_found';
END
$$;
