-- The SSH host key each instance showed at its first connection
-- (authorized_keys format; '' until then), pinned across restarts: a
-- later connection showing another key is refused (docs/pools.md).
ALTER TABLE instances ADD COLUMN host_key text NOT NULL DEFAULT '';
