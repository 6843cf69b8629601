// Package webhook sends Spark Control's signed event webhooks (seed 000
// §2): a JSON POST with the event's name in X-Spark-Event and, when a
// secret is set, X-Spark-Signature: sha256=<HMAC-SHA256 of the raw body>.
// Delivery is best-effort and fire-and-forget: one try, a 5 s timeout, no
// retries; a failure is logged and never reaches the caller.
//
// It also delivers Berth's own events to webhook subscriptions
// (Dispatcher): recorded durably, signed with X-Berth-Signature, retried
// with backoff, kept in a delivery log and redeliverable.
package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"
)

// Headers of a webhook request.
const (
	EventHeader     = "X-Spark-Event"
	SignatureHeader = "X-Spark-Signature"
)

// Timeout bounds one delivery, from connecting to reading the answer.
const Timeout = 5 * time.Second

// DefaultMaxInFlight is how many deliveries a Sender runs at once unless
// told otherwise; Fire drops (and logs) an event beyond it.
const DefaultMaxInFlight = 64

// Sign returns the signature of body under secret: "sha256=" and the
// lowercase hex HMAC-SHA256, as Python's
// "sha256=" + hmac.new(secret, raw_body, hashlib.sha256).hexdigest().
func Sign(secret, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// Verify reports, in constant time, whether signature is Sign(secret,
// body): what a receiver checks.
func Verify(secret, body []byte, signature string) bool {
	return hmac.Equal([]byte(Sign(secret, body)), []byte(signature))
}

// Sender delivers webhooks to one URL. Set its fields before the first
// Fire or Send; then it is safe for concurrent use. A nil Sender, or one
// with no URL, sends nothing.
type Sender struct {
	// URL receives the POSTs; "" disables the sender.
	URL string
	// Secret, when set, signs each body (X-Spark-Signature).
	Secret []byte
	// Client sends the requests (default: a client with Timeout).
	Client *http.Client
	// Log gets each failed delivery (default: discarded).
	Log *slog.Logger
	// MaxInFlight bounds the deliveries running at once (default
	// DefaultMaxInFlight).
	MaxInFlight int

	once  sync.Once
	slots chan struct{} // one per delivery running

	mu    sync.Mutex
	count int           // deliveries running
	idle  chan struct{} // closed when count drops to 0; nil while 0
}

// NewSender returns a sender to url, signing with secret when it is not
// empty, logging failures to log (nil: discarded).
func NewSender(url string, secret []byte, log *slog.Logger) *Sender {
	return &Sender{URL: url, Secret: secret, Log: log}
}

func (s *Sender) init() {
	s.once.Do(func() {
		if s.Client == nil {
			s.Client = &http.Client{Timeout: Timeout}
		}
		if s.Log == nil {
			s.Log = slog.New(slog.DiscardHandler)
		}
		if s.MaxInFlight <= 0 {
			s.MaxInFlight = DefaultMaxInFlight
		}
		s.slots = make(chan struct{}, s.MaxInFlight)
	})
}

// Fire sends event with payload (encoded as JSON) in the background and
// returns at once. A failure — the payload not encoding, the receiver
// unreachable, slow past Timeout or answering other than 2xx, or
// MaxInFlight deliveries already running — is logged, never returned.
func (s *Sender) Fire(event string, payload any) {
	if s == nil || s.URL == "" {
		return
	}
	s.init()
	body, err := json.Marshal(payload)
	if err != nil {
		s.Log.Error("webhook not sent: encode payload", "event", event, "err", err)
		return
	}
	select {
	case s.slots <- struct{}{}:
	default:
		s.Log.Error("webhook dropped: too many deliveries in flight", "event", event, "url", s.URL, "in_flight", s.MaxInFlight)
		return
	}
	s.mu.Lock()
	if s.count == 0 {
		s.idle = make(chan struct{})
	}
	s.count++
	s.mu.Unlock()
	go func() {
		defer s.done()
		ctx, cancel := context.WithTimeout(context.Background(), Timeout)
		defer cancel()
		if err := s.post(ctx, event, body); err != nil {
			s.Log.Warn("webhook delivery failed", "event", event, "url", s.URL, "err", err)
		}
	}()
}

// Send delivers event with payload now and returns the delivery's error:
// an encoding error, a transport error or timeout (Timeout, or ctx's
// end), or an answer other than 2xx. A nil Sender or one with no URL
// returns nil.
func (s *Sender) Send(ctx context.Context, event string, payload any) error {
	if s == nil || s.URL == "" {
		return nil
	}
	s.init()
	body, err := json.Marshal(payload)
	if err != nil {
		return fmt.Errorf("webhook %s: encode payload: %w", event, err)
	}
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	return s.post(ctx, event, body)
}

// post sends one signed request with body.
func (s *Sender) post(ctx context.Context, event string, body []byte) error {
	header := map[string]string{EventHeader: event}
	if len(s.Secret) > 0 {
		header[SignatureHeader] = Sign(s.Secret, body)
	}
	resp, _, err := post(ctx, s.Client, s.URL, body, header)
	if err != nil {
		return fmt.Errorf("webhook %s: %w", event, err)
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("webhook %s: %s answered %s", event, s.URL, resp.Status)
	}
	return nil
}

// post sends body to url as a JSON POST with header's fields set, and
// returns the answer (its body closed) and up to 64 KiB of that body; err
// is a request or transport error. Both kinds of webhook deliver with it.
func post(ctx context.Context, client *http.Client, url string, body []byte, header map[string]string) (*http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp, answer, nil
}

// done ends one delivery Fire started.
func (s *Sender) done() {
	<-s.slots
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.count--; s.count == 0 {
		close(s.idle)
		s.idle = nil
	}
}

// Wait returns nil once no delivery Fire started is running, or ctx's
// error when ctx ends first (deliveries still end within Timeout).
func (s *Sender) Wait(ctx context.Context) error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	idle := s.idle
	s.mu.Unlock()
	if idle == nil {
		return nil
	}
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
