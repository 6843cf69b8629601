-- Execution backends added through /api/v1/backends (docs/kubernetes.md).
-- kind is the backend's kind (kubernetes); queues a JSON array ([]: every
-- queue); settings a JSON object of the kind's settings ({"kubernetes":
-- {...}}) with no credentials in it; sealed_credentials the kind's
-- credentials (a kubeconfig), sealed as secrets are. created_at is unix
-- nanoseconds.
CREATE TABLE backends (
	name               TEXT PRIMARY KEY,
	kind               TEXT NOT NULL,
	queues             TEXT NOT NULL,
	settings           TEXT NOT NULL,
	sealed_credentials BLOB,
	created_at         INTEGER NOT NULL
) WITHOUT ROWID;
