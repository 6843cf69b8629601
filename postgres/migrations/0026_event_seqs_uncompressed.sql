-- The seqs of a write's events are kept out of line uncompressed, as its
-- body is (0018): compressing them with pglz, on every write of more than
-- a few hundred events, was most of what storing events cost PostgreSQL
-- beyond the body's own write.
ALTER TABLE event_batches ALTER COLUMN seqs SET STORAGE EXTERNAL;
