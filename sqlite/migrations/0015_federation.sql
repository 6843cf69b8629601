-- Federation (docs/federation.md). Times are unix nanoseconds, 0 for none.

-- On an origin: the peers it hands jobs to, with their sealed tokens and
-- timeouts (nanoseconds, 0 for the default).
CREATE TABLE peers (
	name           TEXT PRIMARY KEY,
	url            TEXT NOT NULL,
	ca_fingerprint TEXT NOT NULL,
	sealed_token   BLOB,
	route_timeout  INTEGER NOT NULL,
	lost_timeout   INTEGER NOT NULL,
	created_at     INTEGER NOT NULL,
	updated_at     INTEGER NOT NULL
) WITHOUT ROWID;

-- On an origin: its handle on each incarnation of a job handed to a peer.
CREATE TABLE handoffs (
	job_id         TEXT NOT NULL,
	incarnation    INTEGER NOT NULL,
	peer           TEXT NOT NULL,
	remote_id      TEXT NOT NULL,
	nonce          TEXT NOT NULL,
	state          TEXT NOT NULL,
	remote_job_id  TEXT NOT NULL,
	sent           INTEGER NOT NULL,
	cancel_version INTEGER NOT NULL,
	cancel_acked   INTEGER NOT NULL,
	last_error     TEXT NOT NULL,
	created_at     INTEGER NOT NULL,
	updated_at     INTEGER NOT NULL,
	-- the peer's changelog row that recorded the job's creation ('', 0, ''
	-- when unknown)
	create_epoch   TEXT NOT NULL,
	create_seq     INTEGER NOT NULL,
	create_tag     TEXT NOT NULL,
	-- the job was pinned to the peer at submit (--cluster)
	pinned         INTEGER NOT NULL,
	PRIMARY KEY (job_id, incarnation)
) WITHOUT ROWID;
CREATE INDEX handoffs_peer ON handoffs (peer);
CREATE INDEX handoffs_job ON handoffs (job_id);

-- On an origin: where its mirror of each peer stands (the peer's cursor).
CREATE TABLE peer_cursors (
	peer  TEXT PRIMARY KEY,
	epoch TEXT NOT NULL,
	seq   INTEGER NOT NULL,
	tag   TEXT NOT NULL
) WITHOUT ROWID;

-- On a peer: the job created for each handoff an origin delivered.
CREATE TABLE received_jobs (
	origin    TEXT NOT NULL,
	remote_id TEXT NOT NULL,
	nonce     TEXT NOT NULL,
	job_id    TEXT NOT NULL,
	PRIMARY KEY (origin, remote_id, nonce)
) WITHOUT ROWID;

-- On a peer: the changelog of its received jobs, by seq; a tombstone is
-- the row recording a job's end.
CREATE TABLE federation_changelog (
	seq         INTEGER PRIMARY KEY,
	tag         TEXT NOT NULL,
	origin      TEXT NOT NULL,
	remote_id   TEXT NOT NULL,
	nonce       TEXT NOT NULL,
	job_id      TEXT NOT NULL,
	state       TEXT NOT NULL,
	reason      TEXT NOT NULL,
	exit_code   INTEGER,
	attempts    INTEGER NOT NULL,
	started_at  INTEGER NOT NULL,
	finished_at INTEGER NOT NULL,
	tombstone   INTEGER NOT NULL,
	at          INTEGER NOT NULL
);
CREATE INDEX federation_changelog_origin ON federation_changelog (origin, seq);

-- On a peer: the cursor each origin last acknowledged, and the highest seq
-- of its rows pruned by age above it.
CREATE TABLE federation_origins (
	origin     TEXT PRIMARY KEY,
	acked_seq  INTEGER NOT NULL,
	acked_tag  TEXT NOT NULL,
	pruned_seq INTEGER NOT NULL
) WITHOUT ROWID;

-- This database's federation epoch: random, made once here, so that each
-- database has its own and a restored backup keeps its own.
CREATE TABLE federation_epoch (
	id    INTEGER PRIMARY KEY CHECK (id = 1),
	epoch TEXT NOT NULL
);
INSERT INTO federation_epoch (id, epoch) VALUES (1, lower(hex(randomblob(8))));
