-- Extraction contracts stored through the API (docs/contracts.md): the
-- document as posted (YAML or JSON). Times are unix nanoseconds.
CREATE TABLE contracts (
	name       TEXT PRIMARY KEY,
	source     TEXT NOT NULL,
	created_by TEXT NOT NULL,
	created_at INTEGER NOT NULL,
	updated_at INTEGER NOT NULL
) WITHOUT ROWID;
