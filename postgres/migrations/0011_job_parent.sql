-- The job a job was submitted under (its spec's parent), NULL for none:
-- berth jobs --parent lists a job's children from it. Rows written before
-- take it from their spec.
ALTER TABLE jobs ADD COLUMN parent text;
UPDATE jobs SET parent = spec->>'parent' WHERE spec->>'parent' IS NOT NULL;
CREATE INDEX jobs_parent ON jobs (parent, id) WHERE parent IS NOT NULL;
