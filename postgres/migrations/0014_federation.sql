-- Federation (docs/federation.md): the tables of sqlite/migrations'
-- 0015_federation.sql, with the same columns. Times are unix nanoseconds,
-- 0 for none.

-- On an origin: the peers it hands jobs to, with their sealed tokens and
-- timeouts (nanoseconds, 0 for the default).
CREATE TABLE peers (
	name           text COLLATE "C" PRIMARY KEY,
	url            text NOT NULL,
	ca_fingerprint text NOT NULL,
	sealed_token   bytea,
	route_timeout  bigint NOT NULL,
	lost_timeout   bigint NOT NULL,
	created_at     bigint NOT NULL,
	updated_at     bigint NOT NULL
);

-- On an origin: its handle on each incarnation of a job handed to a peer.
CREATE TABLE handoffs (
	job_id         text COLLATE "C" NOT NULL,
	incarnation    integer NOT NULL,
	peer           text COLLATE "C" NOT NULL,
	remote_id      text NOT NULL,
	nonce          text NOT NULL,
	state          text NOT NULL,
	remote_job_id  text NOT NULL,
	sent           boolean NOT NULL,
	cancel_version integer NOT NULL,
	cancel_acked   integer NOT NULL,
	last_error     text NOT NULL,
	created_at     bigint NOT NULL,
	updated_at     bigint NOT NULL,
	-- the peer's changelog row that recorded the job's creation ('', 0, ''
	-- when unknown)
	create_epoch   text NOT NULL,
	create_seq     bigint NOT NULL,
	create_tag     text NOT NULL,
	-- the job was pinned to the peer at submit (--cluster)
	pinned         boolean NOT NULL,
	PRIMARY KEY (job_id, incarnation)
);
CREATE INDEX handoffs_peer ON handoffs (peer);
CREATE INDEX handoffs_job ON handoffs (job_id);

-- On an origin: where its mirror of each peer stands (the peer's cursor).
CREATE TABLE peer_cursors (
	peer  text COLLATE "C" PRIMARY KEY,
	epoch text NOT NULL,
	seq   bigint NOT NULL,
	tag   text NOT NULL
);

-- On a peer: the job created for each handoff an origin delivered.
CREATE TABLE received_jobs (
	origin    text COLLATE "C" NOT NULL,
	remote_id text COLLATE "C" NOT NULL,
	nonce     text COLLATE "C" NOT NULL,
	job_id    text COLLATE "C" NOT NULL,
	PRIMARY KEY (origin, remote_id, nonce)
);

-- On a peer: the changelog of its received jobs, by seq; a tombstone is
-- the row recording a job's end.
CREATE TABLE federation_changelog (
	seq         bigint PRIMARY KEY,
	tag         text NOT NULL,
	origin      text COLLATE "C" NOT NULL,
	remote_id   text NOT NULL,
	nonce       text NOT NULL,
	job_id      text COLLATE "C" NOT NULL,
	state       text NOT NULL,
	reason      text NOT NULL,
	exit_code   integer,
	attempts    integer NOT NULL,
	started_at  bigint NOT NULL,
	finished_at bigint NOT NULL,
	tombstone   boolean NOT NULL,
	at          bigint NOT NULL
);
CREATE INDEX federation_changelog_origin ON federation_changelog (origin, seq);

-- On a peer: the cursor each origin last acknowledged, and the highest seq
-- of its rows pruned by age above it.
CREATE TABLE federation_origins (
	origin     text COLLATE "C" PRIMARY KEY,
	acked_seq  bigint NOT NULL,
	acked_tag  text NOT NULL,
	pruned_seq bigint NOT NULL
);

-- This database's federation epoch: random, made once here, so that each
-- database has its own and a restored backup keeps its own.
CREATE TABLE federation_epoch (
	id    integer PRIMARY KEY CHECK (id = 1),
	epoch text NOT NULL
);
INSERT INTO federation_epoch (id, epoch) VALUES (1, substr(md5(random()::text), 1, 16));
