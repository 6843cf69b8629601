-- A service attempt's port, readiness phase and failure class.
ALTER TABLE attempts ADD COLUMN service_port integer NOT NULL DEFAULT 0;
ALTER TABLE attempts ADD COLUMN phase text NOT NULL DEFAULT '';
ALTER TABLE attempts ADD COLUMN failure_class text NOT NULL DEFAULT '';
