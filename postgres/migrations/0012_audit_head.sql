-- The audit log's head (seq and line hash of its last record), written in
-- the same transaction as the batch whose audit records it covers, so that
-- berth audit verify can tell a log cut short from one that is whole.
CREATE TABLE audit_head (
  id   INTEGER PRIMARY KEY CHECK (id = 1),
  seq  BIGINT NOT NULL,
  hash TEXT NOT NULL
);
