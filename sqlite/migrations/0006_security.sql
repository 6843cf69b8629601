-- The token registry: every issued bearer token by id (the JWT's jti). A
-- token is honoured only while its row is here, unrevoked and unexpired.
-- Times are unix nanoseconds, 0 for none.
CREATE TABLE tokens (
	id         TEXT PRIMARY KEY,
	name       TEXT NOT NULL,
	role       TEXT NOT NULL,
	worker     TEXT NOT NULL DEFAULT '',
	created_by TEXT NOT NULL DEFAULT '',
	created_at INTEGER NOT NULL,
	expires_at INTEGER NOT NULL DEFAULT 0,
	revoked_at INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

-- Secrets, sealed (AES-256-GCM) with a key kept outside the store.
CREATE TABLE secrets (
	owner      TEXT NOT NULL,
	name       TEXT NOT NULL,
	sealed     BLOB NOT NULL,
	updated_by TEXT NOT NULL DEFAULT '',
	updated_at INTEGER NOT NULL,
	PRIMARY KEY (owner, name)
) WITHOUT ROWID;
