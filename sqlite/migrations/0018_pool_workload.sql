-- A pool's workload (docs/pools.md, "A bare vLLM node"): agent (berth
-- agent joins the queue, what every pool did before) or vllm (a bare vLLM
-- server of model on port, with max_model_len when not 0); and the
-- endpoint (host:port) of a vLLM node once ready.
ALTER TABLE pools ADD COLUMN workload TEXT NOT NULL DEFAULT 'agent';
ALTER TABLE pools ADD COLUMN model TEXT NOT NULL DEFAULT '';
ALTER TABLE pools ADD COLUMN max_model_len INTEGER NOT NULL DEFAULT 0;
ALTER TABLE pools ADD COLUMN port INTEGER NOT NULL DEFAULT 0;
ALTER TABLE instances ADD COLUMN endpoint TEXT NOT NULL DEFAULT '';
