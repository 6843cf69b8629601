-- An array's jobs store their spec once: the array's first job keeps it
-- in spec, and each other job of the array whose spec is the same stores
-- the JSON null there and the first job's id in array_id (so a million
-- jobs of one array are a million small rows, and a load decodes the spec
-- once). A job's spec is therefore never changed once written: the
-- cluster a federation handoff sets is kept in cluster (NULL: the
-- spec's), and jobs are never deleted while another job points at them.
ALTER TABLE jobs ADD COLUMN cluster TEXT;
ALTER TABLE jobs ADD COLUMN array_id TEXT;
