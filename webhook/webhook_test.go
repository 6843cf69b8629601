package webhook_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/webhook"
)

// delivery is one request a receiver got.
type delivery struct {
	header http.Header
	body   []byte
}

// receiver is a webhook receiver on loopback that records what it gets and
// answers status.
type receiver struct {
	url   string
	got   chan delivery
	block chan struct{} // when not nil, requests wait on it
}

func newReceiver(t *testing.T, status int, block chan struct{}) *receiver {
	t.Helper()
	r := &receiver{got: make(chan delivery, 16), block: block}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.got <- delivery{header: req.Header.Clone(), body: body}
		if r.block != nil {
			select {
			case <-r.block:
			case <-req.Context().Done():
			}
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(hs.Close)
	r.url = hs.URL
	return r
}

func (r *receiver) next(t *testing.T) delivery {
	t.Helper()
	select {
	case d := <-r.got:
		return d
	case <-time.After(10 * time.Second):
		t.Fatal("the receiver got nothing")
		return delivery{}
	}
}

// sparkVerify checks a signature exactly as seed 000's Python snippet:
//
//	expected = "sha256=" + hmac.new(secret.encode(), raw_body, hashlib.sha256).hexdigest()
//	assert hmac.compare_digest(expected, request.headers["X-Spark-Signature"])
func sparkVerify(secret string, rawBody []byte, header http.Header) bool {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(rawBody)
	expected := "sha256=" + hex.EncodeToString(mac.Sum(nil))
	return hmac.Equal([]byte(expected), []byte(header.Get("X-Spark-Signature")))
}

func TestSign(t *testing.T) {
	t.Parallel()
	// HMAC-SHA256 test vector (RFC 4231, test case 2).
	got := webhook.Sign([]byte("Jefe"), []byte("what do ya want for nothing?"))
	want := "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
	if got != want {
		t.Fatalf("Sign = %s, want %s", got, want)
	}
	if !webhook.Verify([]byte("Jefe"), []byte("what do ya want for nothing?"), want) {
		t.Error("Verify refuses a good signature")
	}
	for _, bad := range []string{"", "sha256=", strings.ToUpper(want), want[:len(want)-1] + "4", "sha1=" + want[7:]} {
		if webhook.Verify([]byte("Jefe"), []byte("what do ya want for nothing?"), bad) {
			t.Errorf("Verify accepts %q", bad)
		}
	}
	if webhook.Verify([]byte("jefe"), []byte("what do ya want for nothing?"), want) {
		t.Error("Verify accepts a signature under another secret")
	}
}

func swapEvent() berth.SwapEvent {
	rc := 0
	return berth.SwapEvent{Event: berth.SwapComplete, JobID: "1a2b3c4d", ModelKey: "gemma-3-27b", State: "ready",
		Returncode: &rc, StartedAt: "2026-06-17T12:00:00+00:00", FinishedAt: "2026-06-17T12:03:11+00:00"}
}

func TestFireSignedSwapEvent(t *testing.T) {
	t.Parallel()
	r := newReceiver(t, http.StatusOK, nil)
	const secret = "s3cr3t"
	s := webhook.NewSender(r.url, []byte(secret), nil)
	s.Fire(berth.SwapComplete, swapEvent())
	d := r.next(t)

	if got := d.header.Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type = %q", got)
	}
	if got := d.header.Get("X-Spark-Event"); got != "swap_complete" {
		t.Errorf("X-Spark-Event = %q", got)
	}
	if !sparkVerify(secret, d.body, d.header) {
		t.Errorf("X-Spark-Signature %q does not verify over the raw body %s", d.header.Get("X-Spark-Signature"), d.body)
	}
	if sparkVerify("other", d.body, d.header) {
		t.Error("the signature verifies under another secret")
	}
	// The body is the seed's payload, field for field.
	var fields map[string]any
	if err := json.Unmarshal(d.body, &fields); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"event": "swap_complete", "job_id": "1a2b3c4d", "model_key": "gemma-3-27b", "state": "ready",
		"returncode": 0.0, "started_at": "2026-06-17T12:00:00+00:00", "finished_at": "2026-06-17T12:03:11+00:00", "dry_run": false}
	if len(fields) != len(want) {
		t.Errorf("body %s has %d fields, want %d", d.body, len(fields), len(want))
	}
	for k, v := range want {
		if fields[k] != v {
			t.Errorf("body field %s = %#v, want %#v", k, fields[k], v)
		}
	}
	if err := s.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestUnsignedWithoutSecret(t *testing.T) {
	t.Parallel()
	r := newReceiver(t, http.StatusNoContent, nil)
	s := webhook.NewSender(r.url, nil, nil)
	ev := swapEvent()
	ev.Event, ev.State, ev.Returncode = berth.SwapFailed, "failed", nil
	if err := s.Send(t.Context(), berth.SwapFailed, ev); err != nil {
		t.Fatalf("Send: %v", err)
	}
	d := r.next(t)
	if _, ok := d.header["X-Spark-Signature"]; ok {
		t.Errorf("unsigned sender sent X-Spark-Signature %q", d.header.Get("X-Spark-Signature"))
	}
	if got := d.header.Get("X-Spark-Event"); got != "swap_failed" {
		t.Errorf("X-Spark-Event = %q", got)
	}
	if !bytes.Contains(d.body, []byte(`"returncode":null`)) {
		t.Errorf("body %s: want returncode null", d.body)
	}
}

// logBuffer is a concurrency-safe log destination.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestFailuresAreLoggedNotReturned(t *testing.T) {
	t.Parallel()
	r := newReceiver(t, http.StatusInternalServerError, nil)
	var logs logBuffer
	s := webhook.NewSender(r.url, []byte("k"), slog.New(slog.NewTextHandler(&logs, nil)))
	s.Fire("swap_complete", swapEvent())
	r.next(t)
	if err := s.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	if out := logs.String(); !strings.Contains(out, "webhook delivery failed") || !strings.Contains(out, "500") {
		t.Errorf("log = %q, want the failed delivery and its status", out)
	}
	if err := s.Send(t.Context(), "swap_complete", swapEvent()); err == nil || !strings.Contains(err.Error(), "500") {
		t.Errorf("Send to a failing receiver = %v, want an error naming 500", err)
	}

	// An unencodable payload is logged, not sent.
	s.Fire("x", func() {})
	if out := logs.String(); !strings.Contains(out, "encode payload") {
		t.Errorf("log = %q, want the encoding failure", out)
	}
}

func TestFireNeverBlocks(t *testing.T) {
	t.Parallel()
	block := make(chan struct{})
	r := newReceiver(t, http.StatusOK, block)
	var logs logBuffer
	s := &webhook.Sender{URL: r.url, MaxInFlight: 2, Log: slog.New(slog.NewTextHandler(&logs, nil))}
	start := time.Now()
	for range 5 {
		s.Fire("swap_complete", swapEvent()) // the receiver holds every request
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("5 Fires to a stuck receiver took %v", d)
	}
	r.next(t)
	r.next(t)
	if out := logs.String(); strings.Count(out, "too many deliveries in flight") != 3 {
		t.Errorf("log = %q, want 3 dropped deliveries", out)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := s.Wait(ctx); err == nil {
		t.Error("Wait returned while deliveries were stuck")
	}
	close(block)
	if err := s.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	// Slots are free again.
	s.Fire("swap_complete", swapEvent())
	r.next(t)
	if err := s.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestTimeout(t *testing.T) {
	t.Parallel()
	block := make(chan struct{})
	defer close(block)
	r := newReceiver(t, http.StatusOK, block)
	s := &webhook.Sender{URL: r.url, Client: &http.Client{Timeout: 100 * time.Millisecond}}
	start := time.Now()
	err := s.Send(t.Context(), "swap_complete", swapEvent())
	if err == nil {
		t.Fatal("Send to a receiver that never answers returned nil")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Send took %v past its client's timeout", d)
	}
	if webhook.Timeout != 5*time.Second {
		t.Errorf("Timeout = %v, want the seed's 5 s", webhook.Timeout)
	}
}

func TestDisabled(t *testing.T) {
	t.Parallel()
	var nilSender *webhook.Sender
	nilSender.Fire("swap_complete", swapEvent())
	if err := nilSender.Send(t.Context(), "swap_complete", nil); err != nil {
		t.Fatal(err)
	}
	if err := nilSender.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	(&webhook.Sender{}).Fire("swap_complete", swapEvent())
	if err := (&webhook.Sender{}).Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
}
