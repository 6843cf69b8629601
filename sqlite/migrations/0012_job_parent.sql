-- The job a job was submitted under (its spec's parent), NULL for none:
-- berth jobs --parent lists a job's children from it. Rows written before
-- take it from their spec.
ALTER TABLE jobs ADD COLUMN parent TEXT;
UPDATE jobs SET parent = json_extract(CAST(spec AS TEXT), '$.parent')
WHERE json_extract(CAST(spec AS TEXT), '$.parent') IS NOT NULL;
CREATE INDEX jobs_parent ON jobs (parent, id) WHERE parent IS NOT NULL;
