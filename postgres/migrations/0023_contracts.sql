-- Extraction contracts stored through the API (docs/contracts.md): the
-- tables of sqlite/migrations' 0022_contracts.sql. Times are unix
-- nanoseconds.
CREATE TABLE contracts (
	name       text COLLATE "C" PRIMARY KEY,
	source     text NOT NULL,
	created_by text NOT NULL,
	created_at bigint NOT NULL,
	updated_at bigint NOT NULL
);
