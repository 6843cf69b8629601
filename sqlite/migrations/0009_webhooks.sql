-- Webhook subscriptions and their delivery log. Times are unix
-- nanoseconds (0: none).

-- events is a JSON array of event types and prefixes; [] is every event.
CREATE TABLE webhooks (
	id         TEXT PRIMARY KEY,
	url        TEXT NOT NULL,
	secret     TEXT NOT NULL DEFAULT '',
	events     TEXT NOT NULL DEFAULT '[]',
	created_by TEXT NOT NULL DEFAULT '',
	created_at INTEGER NOT NULL,
	disabled   INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

-- One row per event sent (or to be sent) to one webhook; body is the JSON
-- POSTed on every attempt. ids sort in creation order.
CREATE TABLE webhook_deliveries (
	id              TEXT PRIMARY KEY,
	webhook_id      TEXT NOT NULL,
	event_seq       INTEGER NOT NULL,
	event_type      TEXT NOT NULL,
	body            TEXT NOT NULL,
	attempts        INTEGER NOT NULL DEFAULT 0,
	state           TEXT NOT NULL,
	last_status     INTEGER NOT NULL DEFAULT 0,
	last_error      TEXT NOT NULL DEFAULT '',
	next_attempt_at INTEGER NOT NULL DEFAULT 0,
	created_at      INTEGER NOT NULL,
	delivered_at    INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

CREATE INDEX webhook_deliveries_by_webhook ON webhook_deliveries (webhook_id, id);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE state = 'pending';
