-- Webhook subscriptions and their delivery log. Times are unix
-- nanoseconds (0: none).

-- events is a JSON array of event types and prefixes; [] is every event.
CREATE TABLE webhooks (
	id         text PRIMARY KEY,
	url        text NOT NULL,
	secret     text NOT NULL DEFAULT '',
	events     text NOT NULL DEFAULT '[]',
	created_by text NOT NULL DEFAULT '',
	created_at bigint NOT NULL,
	disabled   boolean NOT NULL DEFAULT false
);

-- One row per event sent (or to be sent) to one webhook; body is the JSON
-- POSTed on every attempt. ids sort in creation order.
CREATE TABLE webhook_deliveries (
	id              text PRIMARY KEY,
	webhook_id      text NOT NULL,
	event_seq       bigint NOT NULL,
	event_type      text NOT NULL,
	body            text NOT NULL,
	attempts        integer NOT NULL DEFAULT 0,
	state           text NOT NULL,
	last_status     integer NOT NULL DEFAULT 0,
	last_error      text NOT NULL DEFAULT '',
	next_attempt_at bigint NOT NULL DEFAULT 0,
	created_at      bigint NOT NULL,
	delivered_at    bigint NOT NULL DEFAULT 0
);

CREATE INDEX webhook_deliveries_by_webhook ON webhook_deliveries (webhook_id, id);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE state = 'pending';
