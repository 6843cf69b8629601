-- A service attempt's port, readiness phase and failure class.
ALTER TABLE attempts ADD COLUMN service_port INTEGER NOT NULL DEFAULT 0;
ALTER TABLE attempts ADD COLUMN phase TEXT NOT NULL DEFAULT '';
ALTER TABLE attempts ADD COLUMN failure_class TEXT NOT NULL DEFAULT '';
