-- The token registry: every issued bearer token by id (the JWT's jti). A
-- token is honoured only while its row is here, unrevoked and unexpired.
-- Times are unix nanoseconds, 0 for none.
CREATE TABLE tokens (
	id         text PRIMARY KEY,
	name       text NOT NULL,
	role       text NOT NULL,
	worker     text NOT NULL DEFAULT '',
	created_by text NOT NULL DEFAULT '',
	created_at bigint NOT NULL,
	expires_at bigint NOT NULL DEFAULT 0,
	revoked_at bigint NOT NULL DEFAULT 0
);

-- Secrets, sealed (AES-256-GCM) with a key kept outside the store.
CREATE TABLE secrets (
	owner      text NOT NULL,
	name       text NOT NULL,
	sealed     bytea NOT NULL,
	updated_by text NOT NULL DEFAULT '',
	updated_at bigint NOT NULL,
	PRIMARY KEY (owner, name)
);
