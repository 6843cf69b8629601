-- A pool's workload and a vLLM node's endpoint: the columns of sqlite
-- migrations' 0019_pool_workload.sql.
ALTER TABLE pools ADD COLUMN workload text NOT NULL DEFAULT 'agent',
	ADD COLUMN model text NOT NULL DEFAULT '',
	ADD COLUMN max_model_len integer NOT NULL DEFAULT 0,
	ADD COLUMN port integer NOT NULL DEFAULT 0;
ALTER TABLE instances ADD COLUMN endpoint text NOT NULL DEFAULT '';
