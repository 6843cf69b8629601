package berth

import (
	"encoding/json"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Webhook is a subscription to Berth's events: each event whose type one
// of Events matches is POSTed, signed with Secret when it is set, to URL,
// with retries (see docs/webhooks.md). Secret is the receiver's shared
// secret; it is stored as given and never answered: SecretSet says
// whether there is one.
type Webhook struct {
	ID        string    `json:"id"`
	URL       string    `json:"url"`
	Secret    string    `json:"-"`
	SecretSet bool      `json:"secret_set"`
	Events    []string  `json:"events"` // types ("service.ready") and prefixes ending in "." ("job."); empty: every event
	CreatedBy string    `json:"created_by,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	Disabled  bool      `json:"disabled,omitempty"` // a disabled webhook gets no new deliveries and none is attempted
}

// Matches reports whether an event of type typ is delivered to w: w is
// enabled and its Events are empty, or one of them is "*", is typ, or is
// a prefix of typ ending in ".".
func (w *Webhook) Matches(typ string) bool {
	if w.Disabled {
		return false
	}
	if len(w.Events) == 0 {
		return true
	}
	for _, e := range w.Events {
		if e == "*" || e == typ || strings.HasSuffix(e, ".") && strings.HasPrefix(typ, e) {
			return true
		}
	}
	return false
}

// WebhookList is the response of GET /api/v1/webhooks.
type WebhookList struct {
	Webhooks []*Webhook `json:"webhooks"`
}

// WebhookRequest is the body of POST /api/v1/webhooks.
type WebhookRequest struct {
	URL    string   `json:"url"`
	Secret string   `json:"secret,omitempty"`
	Events []string `json:"events,omitempty"` // empty: every event
}

// Limits of a WebhookRequest.
const (
	MaxWebhookURL    = 2048 // bytes of a webhook's URL
	MaxWebhookSecret = 1024 // bytes of a webhook's secret
	MaxWebhookEvents = 64   // entries of a webhook's event list
	maxEventPattern  = 64
)

// Validate checks r: URL an absolute http:// or https:// URL with a host,
// at most MaxWebhookURL bytes; Secret at most MaxWebhookSecret bytes;
// Events at most MaxWebhookEvents entries, each "*" or 1–64 lowercase
// letters, digits, '.', '_' and '-' (an entry ending in "." is a prefix).
// It returns an ECodeInvalid *Error naming the field, and sets Events to
// nil when it holds "*" (every event).
func (r *WebhookRequest) Validate() error {
	if r.URL == "" {
		return Invalidf("url", "required: the http:// or https:// URL to POST events to")
	}
	if len(r.URL) > MaxWebhookURL {
		return Invalidf("url", "must be at most %d bytes", MaxWebhookURL)
	}
	u, err := url.Parse(r.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "" {
		return Invalidf("url", "%q: must be an http:// or https:// URL with a host", r.URL)
	}
	if len(r.Secret) > MaxWebhookSecret {
		return Invalidf("secret", "must be at most %d bytes", MaxWebhookSecret)
	}
	if len(r.Events) > MaxWebhookEvents {
		return Invalidf("events", "at most %d entries", MaxWebhookEvents)
	}
	all := false
	for i, e := range r.Events {
		if e == "*" {
			all = true
			continue
		}
		if e == "" || len(e) > maxEventPattern || strings.IndexFunc(e, func(c rune) bool {
			return !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-')
		}) >= 0 {
			return Invalidf("events", "entry %d %q: must be an event type (job.succeeded), a prefix ending in \".\" (job.) or *", i, e)
		}
		if !slices.ContainsFunc(EventTypes, func(t string) bool { return t == e || strings.HasSuffix(e, ".") && strings.HasPrefix(t, e) }) {
			return Invalidf("events", "entry %d %q: no such event type; the types are %s (a prefix such as job. matches several)",
				i, e, strings.Join(EventTypes, ", "))
		}
	}
	if all {
		r.Events = nil
	}
	return nil
}

// DeliveryState is where a webhook delivery stands.
type DeliveryState string

// Delivery states.
const (
	DeliveryPending   DeliveryState = "pending"   // to be attempted at NextAttemptAt
	DeliveryDelivered DeliveryState = "delivered" // the receiver answered 2xx
	DeliveryFailed    DeliveryState = "failed"    // every attempt failed; redeliver to try again
)

// Delivery is one event sent, or to be sent, to one webhook: an entry of
// the delivery log. Body is the exact JSON POSTed (and signed) on every
// attempt.
type Delivery struct {
	ID            string          `json:"id"`
	WebhookID     string          `json:"webhook_id"`
	EventSeq      uint64          `json:"event_seq"`
	EventType     string          `json:"event_type"`
	Body          json.RawMessage `json:"body"`
	Attempts      int             `json:"attempts"`
	State         DeliveryState   `json:"state"`
	LastStatus    int             `json:"last_status,omitempty"` // HTTP status of the last attempt; 0: no answer
	LastError     string          `json:"last_error,omitempty"`
	NextAttemptAt time.Time       `json:"next_attempt_at,omitzero"` // while pending
	CreatedAt     time.Time       `json:"created_at"`
	DeliveredAt   time.Time       `json:"delivered_at,omitzero"`
}

// DeliveryList is the response of GET /api/v1/webhooks/{id}/deliveries,
// newest first.
type DeliveryList struct {
	Deliveries []*Delivery `json:"deliveries"`
}
