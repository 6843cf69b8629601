-- leader records which server leads: the one holding the leadership
-- advisory lock. Standbys read it to tell clients where to go.
CREATE TABLE leader (
	id    int PRIMARY KEY CHECK (id = 1),
	url   text NOT NULL,
	since bigint NOT NULL -- unix nanoseconds
);
