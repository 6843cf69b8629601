-- An attempt's row is written three times: assigned, running, ended. With
-- its state indexed (attempts_active), PostgreSQL could make neither
-- update in place, and each inserted the row's new version into every
-- index of attempts: at the no-op benchmark's rate the largest share of
-- what the database did for a job. Without that index, and with half of
-- each page left free for the updates, both are heap-only (HOT) updates.
-- The restart's read of the active attempts walks the table instead (1M
-- attempts: ~0.15 s, beside the load of the jobs).
DROP INDEX attempts_active;
ALTER TABLE attempts SET (fillfactor = 50);
