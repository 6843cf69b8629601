-- Execution backends (docs/kubernetes.md): the table of sqlite/migrations'
-- 0019_backends.sql, with the same columns. settings is the kind's
-- settings as a JSON object with no credentials in it; sealed_credentials
-- the kind's credentials (a kubeconfig), sealed as secrets are. created_at
-- is unix nanoseconds.
CREATE TABLE backends (
	name               text COLLATE "C" PRIMARY KEY,
	kind               text NOT NULL,
	queues             text NOT NULL,
	settings           text NOT NULL,
	sealed_credentials bytea,
	created_at         bigint NOT NULL
);
