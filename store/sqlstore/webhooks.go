package sqlstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/store"
)

// Subscriptions implements the webhook subscriptions and their delivery log
// of store.Store over a Reader's queries and a driver's ExecFunc; drivers
// embed it. Each write is one statement in a transaction of its own. Its
// methods are safe for concurrent use when the driver's functions are.
type Subscriptions struct {
	r    *Reader
	exec ExecFunc
}

// NewSubscriptions returns Subscriptions reading through r and writing with exec.
func NewSubscriptions(r *Reader, exec ExecFunc) *Subscriptions {
	return &Subscriptions{r: r, exec: exec}
}

// sql rewrites the "?" placeholders of query into the dialect's.
func (h *Subscriptions) sql(query string) string { return h.r.dialect.rewrite(query) }

const (
	webhookColumns  = `id, url, secret, events, created_by, created_at, disabled`
	deliveryColumns = `id, webhook_id, event_seq, event_type, body, attempts, state, last_status, last_error, next_attempt_at, created_at, delivered_at`
)

// CreateWebhook adds w; an id already there is ECodeConflict.
func (h *Subscriptions) CreateWebhook(ctx context.Context, w *berth.Webhook) error {
	events := w.Events
	if events == nil {
		events = []string{}
	}
	ev, err := json.Marshal(events)
	if err != nil {
		return fmt.Errorf("create webhook %s: %w", w.ID, err)
	}
	n, err := h.exec(ctx, h.sql(`INSERT INTO webhooks (`+webhookColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`),
		w.ID, w.URL, w.Secret, string(ev), w.CreatedBy, nanos(w.CreatedAt), w.Disabled)
	if err != nil {
		return fmt.Errorf("create webhook %s: %w", w.ID, err)
	}
	if n == 0 {
		return berth.Errorf(berth.ECodeConflict, "webhook %s already exists", w.ID)
	}
	return nil
}

// Webhooks returns every webhook, oldest first, with its secret.
func (h *Subscriptions) Webhooks(ctx context.Context) ([]*berth.Webhook, error) {
	ws, err := collect(ctx, h.r, scanWebhook, `SELECT `+webhookColumns+` FROM webhooks ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("list webhooks: %w", err)
	}
	return ws, nil
}

func scanWebhook(row scanner) (*berth.Webhook, error) {
	var w berth.Webhook
	var events string
	var created int64
	if err := row.Scan(&w.ID, &w.URL, &w.Secret, &events, &w.CreatedBy, &created, &w.Disabled); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(events), &w.Events); err != nil {
		return nil, fmt.Errorf("webhook %s: events: %w", w.ID, err)
	}
	if w.Events == nil {
		w.Events = []string{}
	}
	w.SecretSet, w.CreatedAt = w.Secret != "", fromNanos(created)
	return &w, nil
}

// DeleteWebhook deletes webhook id, then its deliveries; an unknown id is
// ECodeNotFound. Deliveries left behind by a failure in between are never
// due (DueDeliveries reads those of existing webhooks only), and a retry
// of the delete cannot reach them: they cost space only.
func (h *Subscriptions) DeleteWebhook(ctx context.Context, id string) error {
	n, err := h.exec(ctx, h.sql(`DELETE FROM webhooks WHERE id = ?`), id)
	if err != nil {
		return fmt.Errorf("delete webhook %s: %w", id, err)
	}
	if n == 0 {
		return &berth.Error{Code: berth.ECodeNotFound, Field: "id", Message: fmt.Sprintf("no webhook %s", id)}
	}
	if _, err := h.exec(ctx, h.sql(`DELETE FROM webhook_deliveries WHERE webhook_id = ?`), id); err != nil {
		return fmt.Errorf("delete deliveries of webhook %s: %w", id, err)
	}
	return nil
}

// AddDeliveries adds ds in one statement: all or none. More than
// store.MaxDeliveriesPerAdd is ECodeInvalid; an id already stored fails
// the statement, adding none.
func (h *Subscriptions) AddDeliveries(ctx context.Context, ds []*berth.Delivery) error {
	if len(ds) == 0 {
		return nil
	}
	if len(ds) > store.MaxDeliveriesPerAdd {
		return berth.Invalidf("deliveries", "at most %d at once, got %d", store.MaxDeliveriesPerAdd, len(ds))
	}
	var q strings.Builder
	q.WriteString(`INSERT INTO webhook_deliveries (` + deliveryColumns + `) VALUES `)
	args := make([]any, 0, 12*len(ds))
	for i, d := range ds {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
		args = append(args, d.ID, d.WebhookID, int64(d.EventSeq), d.EventType, string(d.Body), d.Attempts, string(d.State),
			d.LastStatus, d.LastError, nanos(d.NextAttemptAt), nanos(d.CreatedAt), nanos(d.DeliveredAt))
	}
	if _, err := h.exec(ctx, h.sql(q.String()), args...); err != nil {
		return fmt.Errorf("add %d deliveries: %w", len(ds), err)
	}
	return nil
}

// selectDeliveries reads deliveries; the queries alias the table d.
const selectDeliveries = `SELECT d.id, d.webhook_id, d.event_seq, d.event_type, d.body, d.attempts, d.state, d.last_status,
	d.last_error, d.next_attempt_at, d.created_at, d.delivered_at FROM webhook_deliveries d`

// DueDeliveries returns up to limit pending deliveries of existing,
// enabled webhooks whose next attempt is at or before now, soonest first.
func (h *Subscriptions) DueDeliveries(ctx context.Context, now time.Time, limit int) ([]*berth.Delivery, error) {
	if limit <= 0 {
		return nil, nil
	}
	ds, err := collect(ctx, h.r, scanDelivery, h.sql(selectDeliveries+` JOIN webhooks w ON w.id = d.webhook_id
		WHERE d.state = 'pending' AND d.next_attempt_at <= ? AND NOT w.disabled ORDER BY d.next_attempt_at, d.id LIMIT ?`),
		nanos(now), limit)
	if err != nil {
		return nil, fmt.Errorf("due deliveries: %w", err)
	}
	return ds, nil
}

// UpdateDelivery sets the attempts, state, last status and error, next
// attempt and delivery time of the stored delivery d.ID; an unknown id is
// ECodeNotFound.
func (h *Subscriptions) UpdateDelivery(ctx context.Context, d *berth.Delivery) error {
	n, err := h.exec(ctx, h.sql(`UPDATE webhook_deliveries SET attempts = ?, state = ?, last_status = ?, last_error = ?,
		next_attempt_at = ?, delivered_at = ? WHERE id = ?`),
		d.Attempts, string(d.State), d.LastStatus, d.LastError, nanos(d.NextAttemptAt), nanos(d.DeliveredAt), d.ID)
	if err != nil {
		return fmt.Errorf("update delivery %s: %w", d.ID, err)
	}
	if n == 0 {
		return &berth.Error{Code: berth.ECodeNotFound, Field: "id", Message: fmt.Sprintf("no delivery %s", d.ID)}
	}
	return nil
}

// Deliveries returns up to limit (0: every one) of webhook webhookID's
// deliveries, newest first; an unknown webhook has none.
func (h *Subscriptions) Deliveries(ctx context.Context, webhookID string, limit int) ([]*berth.Delivery, error) {
	query, args := selectDeliveries+` WHERE d.webhook_id = ? ORDER BY d.id DESC`, []any{webhookID}
	if limit > 0 {
		query, args = query+` LIMIT ?`, append(args, limit)
	}
	ds, err := collect(ctx, h.r, scanDelivery, h.sql(query), args...)
	if err != nil {
		return nil, fmt.Errorf("deliveries of webhook %s: %w", webhookID, err)
	}
	return ds, nil
}

// Delivery returns delivery id; an unknown id is ECodeNotFound.
func (h *Subscriptions) Delivery(ctx context.Context, id string) (*berth.Delivery, error) {
	ds, err := collect(ctx, h.r, scanDelivery, h.sql(selectDeliveries+` WHERE d.id = ?`), id)
	if err != nil {
		return nil, fmt.Errorf("delivery %s: %w", id, err)
	}
	if len(ds) == 0 {
		return nil, &berth.Error{Code: berth.ECodeNotFound, Field: "id", Message: fmt.Sprintf("no delivery %s", id)}
	}
	return ds[0], nil
}

func scanDelivery(row scanner) (*berth.Delivery, error) {
	var d berth.Delivery
	var seq, next, created, delivered int64
	var body, state string
	if err := row.Scan(&d.ID, &d.WebhookID, &seq, &d.EventType, &body, &d.Attempts, &state, &d.LastStatus,
		&d.LastError, &next, &created, &delivered); err != nil {
		return nil, err
	}
	d.EventSeq, d.Body, d.State = uint64(seq), json.RawMessage(body), berth.DeliveryState(state)
	d.NextAttemptAt, d.CreatedAt, d.DeliveredAt = fromNanos(next), fromNanos(created), fromNanos(delivered)
	return &d, nil
}
