-- A token's limits at the inference gateway (issue 31): the models it may
-- use (a JSON array; '' for every model) and its requests per minute (0:
-- no limit).
ALTER TABLE tokens ADD COLUMN models TEXT NOT NULL DEFAULT '';
ALTER TABLE tokens ADD COLUMN rpm INTEGER NOT NULL DEFAULT 0;
