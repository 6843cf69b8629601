-- Worker controls (seed 001): an operator's desired state for one queue of
-- one host, or with queue '*' for every queue of it. Desired state, kept
-- apart from workers (observed state): an off row stays while the worker
-- is silent and across restarts; no row means on. Any program sharing the
-- database may write a row with plain SQL; the trigger below wakes Berth:
--
--   INSERT INTO worker_controls (host_label, queue, desired_state, stop_policy, requested_by)
--   VALUES ('spark', 'gpu', 'off', 'hard', 'ops')
--   ON CONFLICT (host_label, queue) DO UPDATE SET desired_state = excluded.desired_state,
--     stop_policy = excluded.stop_policy, requested_by = excluded.requested_by, updated_at = now();
--
-- stop_policy is free text, checked by the controller against its policies
-- (hard, drain, pause). updated_at is when the row was written (NULL: not
-- known). updated_at_ns is the same instant in unix nanoseconds, to the
-- nanosecond when Berth wrote it (timestamptz keeps microseconds), 0 for
-- NULL; a trigger derives it from updated_at when a writer changed only
-- updated_at, so plain SQL need not know it.
CREATE TABLE worker_controls (
	host_label    text COLLATE "C" NOT NULL CHECK (host_label <> ''),
	queue         text COLLATE "C" NOT NULL CHECK (queue <> ''),
	desired_state text NOT NULL CHECK (desired_state IN ('on', 'off')),
	stop_policy   text NOT NULL DEFAULT 'hard' CHECK (stop_policy <> ''),
	requested_by  text NOT NULL DEFAULT '',
	updated_at    timestamptz DEFAULT now(),
	updated_at_ns bigint NOT NULL DEFAULT 0,
	PRIMARY KEY (host_label, queue)
);

-- worker_controls_ns keeps updated_at_ns the nanoseconds of updated_at: it
-- keeps a value within updated_at's microsecond and otherwise derives it.
CREATE FUNCTION worker_controls_ns() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF NEW.updated_at IS NULL THEN
		NEW.updated_at_ns := 0;
	ELSIF floor(NEW.updated_at_ns / 1000.0) <> extract(epoch FROM NEW.updated_at) * 1000000 THEN
		NEW.updated_at_ns := extract(epoch FROM NEW.updated_at) * 1000000000;
	END IF;
	RETURN NEW;
END
$$;
CREATE TRIGGER worker_controls_ns BEFORE INSERT OR UPDATE ON worker_controls
	FOR EACH ROW EXECUTE FUNCTION worker_controls_ns();

-- worker_controls_notify wakes every listener on channel worker_control
-- with 'HOST:QUEUE' of each row written or deleted, at commit.
CREATE FUNCTION worker_controls_notify() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
	control worker_controls := COALESCE(NEW, OLD);
BEGIN
	PERFORM pg_notify('worker_control', control.host_label || ':' || control.queue);
	RETURN NULL;
END
$$;
CREATE TRIGGER worker_controls_notify AFTER INSERT OR UPDATE OR DELETE ON worker_controls
	FOR EACH ROW EXECUTE FUNCTION worker_controls_notify();
