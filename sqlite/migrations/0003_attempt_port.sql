-- The coordinator port held by rank 0 of a gang, so that a restarted
-- server does not hand it to another gang on the same worker.
ALTER TABLE attempts ADD COLUMN port INTEGER NOT NULL DEFAULT 0;
