package webhook_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/controller"
	"github.com/berth-dev/berth/internal/fakeclock"
	"github.com/berth-dev/berth/sqlite"
	"github.com/berth-dev/berth/store"
	"github.com/berth-dev/berth/webhook"
)

// hit is one request a hookReceiver got.
type hit struct {
	header http.Header
	body   []byte
}

// hookReceiver is a webhook receiver on loopback: it records every request
// and answers the status that status returns for the nth (from 1).
type hookReceiver struct {
	url string

	mu     sync.Mutex
	hits   []hit
	status func(n int) int
	hold   chan struct{} // when not nil, requests wait for it to close
}

func newHookReceiver(t *testing.T, status func(n int) int) *hookReceiver {
	t.Helper()
	r := &hookReceiver{status: status}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.hits = append(r.hits, hit{header: req.Header.Clone(), body: body})
		n, hold, status := len(r.hits), r.hold, r.status
		r.mu.Unlock()
		if hold != nil {
			select {
			case <-hold:
			case <-req.Context().Done():
			}
		}
		code := status(n)
		w.WriteHeader(code)
		if code/100 != 2 {
			io.WriteString(w, "not now")
		}
	}))
	t.Cleanup(hs.Close)
	r.url = hs.URL
	return r
}

// failFirst answers 500 to the first n requests, then 200.
func failFirst(n int) func(int) int {
	return func(i int) int {
		if i <= n {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	}
}

func (r *hookReceiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.hits)
}

func (r *hookReceiver) hit(i int) hit {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hits[i]
}

func (r *hookReceiver) setStatus(f func(int) int) {
	r.mu.Lock()
	r.status = f
	r.mu.Unlock()
}

// awaitHits waits until r got n requests.
func (r *hookReceiver) awaitHits(t *testing.T, n int) {
	t.Helper()
	eventually(t, "receiver hit "+strconv.Itoa(n)+" times", func() bool { return r.count() >= n })
	if got := r.count(); got != n {
		t.Fatalf("receiver got %d requests, want %d", got, n)
	}
}

// stillHits checks r gets no more than n requests over several polls.
func (r *hookReceiver) stillHits(t *testing.T, n int) {
	t.Helper()
	time.Sleep(100 * time.Millisecond) // ten polls
	if got := r.count(); got != n {
		t.Fatalf("receiver got %d requests, want still %d", got, n)
	}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// openStore opens the SQLite store at path, closed when t ends.
func openStore(t *testing.T, path string) store.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

var t0 = time.Date(2026, 6, 17, 12, 0, 0, 0, time.UTC)

// startDispatcher starts a dispatcher over st and bus with clock clk,
// polling every 10 ms, stopped when t ends.
func startDispatcher(t *testing.T, st store.Store, bus webhook.Events, clk *fakeclock.Clock, tweak func(*webhook.DispatcherConfig)) *webhook.Dispatcher {
	t.Helper()
	cfg := webhook.DispatcherConfig{Store: st, Events: bus, Now: clk.Now, Poll: 10 * time.Millisecond}
	if tweak != nil {
		tweak(&cfg)
	}
	d := webhook.NewDispatcher(cfg)
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Stop(context.Background()); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return d
}

// newDispatcher starts a dispatcher, as startDispatcher does, on a new
// SQLite store, with its own event bus and clock.
func newDispatcher(t *testing.T, tweak func(*webhook.DispatcherConfig)) (*webhook.Dispatcher, *controller.Bus, *fakeclock.Clock) {
	t.Helper()
	bus, clk := controller.NewBus(64), fakeclock.New(t0)
	return startDispatcher(t, openStore(t, filepath.Join(t.TempDir(), "berth.db")), bus, clk, tweak), bus, clk
}

func create(t *testing.T, d *webhook.Dispatcher, req berth.WebhookRequest) *berth.Webhook {
	t.Helper()
	w, err := d.Create(context.Background(), req, "alice", nil)
	if err != nil {
		t.Fatalf("Create %+v: %v", req, err)
	}
	return w
}

// onlyDelivery returns the one delivery of webhook id.
func onlyDelivery(t *testing.T, d *webhook.Dispatcher, id string) *berth.Delivery {
	t.Helper()
	ds, err := d.Deliveries(context.Background(), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 1 {
		t.Fatalf("webhook %s has %d deliveries, want 1", id, len(ds))
	}
	return ds[0]
}

// awaitDelivery waits until delivery id satisfies cond and returns it.
func awaitDelivery(t *testing.T, d *webhook.Dispatcher, id, what string, cond func(*berth.Delivery) bool) *berth.Delivery {
	t.Helper()
	var dl *berth.Delivery
	eventually(t, "delivery "+what, func() bool {
		var err error
		dl, err = d.Delivery(context.Background(), id)
		return err == nil && cond(dl)
	})
	return dl
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	for n, want := range map[int]time.Duration{0: time.Second, 1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second,
		8: 128 * time.Second, 10: 512 * time.Second, 11: webhook.MaxBackoff, 64: webhook.MaxBackoff, 1 << 30: webhook.MaxBackoff} {
		if got := webhook.Backoff(n); got != want {
			t.Errorf("Backoff(%d) = %v, want %v", n, got, want)
		}
	}
}

// TestDispatcherRetriesSignedDeliveryWithBackoff follows one event to a
// receiver that fails twice: the delivery is signed, the same on each
// attempt, retried after 1 s and then 2 s of the dispatcher's clock (not
// before), logged, and redelivered on request.
func TestDispatcherRetriesSignedDeliveryWithBackoff(t *testing.T) {
	t.Parallel()
	d, bus, clk := newDispatcher(t, nil)
	rcv := newHookReceiver(t, failFirst(2))
	other := newHookReceiver(t, failFirst(0))
	const secret = "shh — ünïcode"
	jobs := create(t, d, berth.WebhookRequest{URL: rcv.url, Secret: secret, Events: []string{"job."}})
	services := create(t, d, berth.WebhookRequest{URL: other.url, Events: []string{"service.ready"}})
	if !jobs.SecretSet || jobs.Secret != secret || services.SecretSet || jobs.CreatedBy != "alice" || !jobs.CreatedAt.Equal(t0) {
		t.Fatalf("created %+v and %+v", jobs, services)
	}

	ev := berth.Event{Seq: 1, Time: t0.Add(-time.Minute), Type: berth.EventJobSucceeded, JobID: "J1", State: berth.JobSucceeded}
	bus.Publish(ev, berth.Event{Seq: 2, Time: t0, Type: berth.EventWorkerLost, Host: "gpu-1"})

	// Attempt 1 fails: put off by 1 s.
	rcv.awaitHits(t, 1)
	first := onlyDelivery(t, d, jobs.ID)
	dl := awaitDelivery(t, d, first.ID, "after attempt 1", func(dl *berth.Delivery) bool { return dl.Attempts == 1 })
	if dl.State != berth.DeliveryPending || dl.LastStatus != 500 || !strings.Contains(dl.LastError, "500") ||
		!strings.Contains(dl.LastError, "not now") || !dl.NextAttemptAt.Equal(t0.Add(time.Second)) ||
		dl.EventSeq != 1 || dl.EventType != "job.succeeded" || dl.WebhookID != jobs.ID || !dl.CreatedAt.Equal(t0) {
		t.Fatalf("delivery after attempt 1 = %+v", dl)
	}
	rcv.stillHits(t, 1)
	clk.Advance(999 * time.Millisecond)
	rcv.stillHits(t, 1)
	clk.Advance(time.Millisecond)

	// Attempt 2 fails: put off by 2 s more.
	rcv.awaitHits(t, 2)
	dl = awaitDelivery(t, d, first.ID, "after attempt 2", func(dl *berth.Delivery) bool { return dl.Attempts == 2 })
	if dl.State != berth.DeliveryPending || !dl.NextAttemptAt.Equal(t0.Add(3*time.Second)) {
		t.Fatalf("delivery after attempt 2 = %+v", dl)
	}
	clk.Advance(time.Second)
	rcv.stillHits(t, 2)
	clk.Advance(time.Second)

	// Attempt 3 succeeds.
	rcv.awaitHits(t, 3)
	dl = awaitDelivery(t, d, first.ID, "delivered", func(dl *berth.Delivery) bool { return dl.State == berth.DeliveryDelivered })
	if dl.Attempts != 3 || dl.LastStatus != 200 || dl.LastError != "" || !dl.NextAttemptAt.IsZero() || !dl.DeliveredAt.Equal(t0.Add(3*time.Second)) {
		t.Fatalf("delivered delivery = %+v", dl)
	}
	for i := range 3 {
		h := rcv.hit(i)
		if string(h.body) != string(dl.Body) {
			t.Errorf("attempt %d body %s, want the logged %s", i+1, h.body, dl.Body)
		}
		if h.header.Get("Content-Type") != "application/json" || h.header.Get(webhook.BerthEventHeader) != "job.succeeded" ||
			h.header.Get(webhook.BerthDeliveryHeader) != dl.ID {
			t.Errorf("attempt %d headers %v", i+1, h.header)
		}
		if sig := h.header.Get(webhook.BerthSignatureHeader); !webhook.Verify([]byte(secret), h.body, sig) {
			t.Errorf("attempt %d signature %q does not verify", i+1, sig)
		}
	}
	var p webhook.Payload
	if err := json.Unmarshal(rcv.hit(0).body, &p); err != nil {
		t.Fatal(err)
	}
	if p.Event != "job.succeeded" || p.DeliveryID != dl.ID || !p.Time.Equal(ev.Time) || p.Data.Seq != 1 || p.Data.JobID != "J1" ||
		p.Data.State != berth.JobSucceeded {
		t.Errorf("payload = %+v", p)
	}
	// The worker event matched no webhook; the unsigned one got nothing.
	if n := other.count(); n != 0 {
		t.Errorf("service.ready webhook got %d requests", n)
	}
	if ds, _ := d.Deliveries(context.Background(), services.ID, 0); len(ds) != 0 {
		t.Errorf("service.ready webhook has deliveries %+v", ds)
	}

	// A service event reaches the other webhook, unsigned.
	bus.Publish(berth.Event{Seq: 3, Time: t0, Type: berth.EventServiceReady, JobID: "S1"})
	other.awaitHits(t, 1)
	if h := other.hit(0); h.header.Get(webhook.BerthSignatureHeader) != "" || h.header.Get(webhook.BerthEventHeader) != "service.ready" {
		t.Errorf("unsigned webhook got headers %v", h.header)
	}

	// Redelivery of a delivered one: one more attempt, now.
	again, err := d.Redeliver(context.Background(), dl.ID)
	if err != nil || again.State != berth.DeliveryPending || !again.NextAttemptAt.Equal(t0.Add(3*time.Second)) {
		t.Fatalf("Redeliver = %+v, %v", again, err)
	}
	rcv.awaitHits(t, 4)
	dl = awaitDelivery(t, d, dl.ID, "redelivered", func(dl *berth.Delivery) bool { return dl.Attempts == 4 })
	if dl.State != berth.DeliveryDelivered || string(rcv.hit(3).body) != string(dl.Body) ||
		rcv.hit(3).header.Get(webhook.BerthDeliveryHeader) != dl.ID {
		t.Fatalf("redelivered delivery = %+v", dl)
	}
	if _, err := d.Redeliver(context.Background(), "nope"); berth.ErrorCode(err) != berth.ECodeNotFound {
		t.Errorf("Redeliver of an unknown id: got %v, want not found", err)
	}
	if _, err := d.Deliveries(context.Background(), "nope", 0); berth.ErrorCode(err) != berth.ECodeNotFound {
		t.Errorf("Deliveries of an unknown webhook: got %v, want not found", err)
	}
}

// TestDispatcherGivesUpAfterMaxAttempts checks a receiver that always
// fails gets MaxAttempts attempts, then none, and that a redelivery of
// the failed delivery gets one more.
func TestDispatcherGivesUpAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	d, bus, clk := newDispatcher(t, func(c *webhook.DispatcherConfig) { c.MaxAttempts = 3 })
	rcv := newHookReceiver(t, func(int) int { return http.StatusServiceUnavailable })
	w := create(t, d, berth.WebhookRequest{URL: rcv.url})
	bus.Publish(berth.Event{Seq: 1, Time: t0, Type: berth.EventWorkerRegistered, Host: "gpu-1"})
	rcv.awaitHits(t, 1)
	id := onlyDelivery(t, d, w.ID).ID
	for n := 1; n < 3; n++ {
		// The retry is due Backoff(n) after the attempt is recorded: advance
		// the clock only then.
		awaitDelivery(t, d, id, "after attempt "+strconv.Itoa(n), func(dl *berth.Delivery) bool { return dl.Attempts == n })
		clk.Advance(webhook.Backoff(n))
		rcv.awaitHits(t, n+1)
	}
	dl := awaitDelivery(t, d, id, "failed", func(dl *berth.Delivery) bool { return dl.State == berth.DeliveryFailed })
	if dl.Attempts != 3 || dl.LastStatus != 503 || !dl.NextAttemptAt.IsZero() || !dl.DeliveredAt.IsZero() {
		t.Fatalf("failed delivery = %+v", dl)
	}
	clk.Advance(time.Hour)
	rcv.stillHits(t, 3)

	rcv.setStatus(failFirst(0))
	if _, err := d.Redeliver(context.Background(), dl.ID); err != nil {
		t.Fatal(err)
	}
	rcv.awaitHits(t, 4)
	dl = awaitDelivery(t, d, dl.ID, "delivered", func(dl *berth.Delivery) bool { return dl.State == berth.DeliveryDelivered })
	if dl.Attempts != 4 || dl.LastStatus != 200 {
		t.Fatalf("redelivered delivery = %+v", dl)
	}
	// Counted as each outcome was recorded, before the store saw it.
	if got, want := d.Outcomes(), map[string]uint64{"retrying": 2, "failed": 1, "delivered": 1}; !maps.Equal(got, want) {
		t.Errorf("Outcomes() = %v, want %v", got, want)
	}
}

// TestDispatcherTimeout checks an attempt past Timeout fails with no
// status and is retried.
func TestDispatcherTimeout(t *testing.T) {
	t.Parallel()
	// Held, an attempt times out; released, it answers well within the
	// timeout, even on a loaded machine.
	d, bus, clk := newDispatcher(t, func(c *webhook.DispatcherConfig) { c.Timeout = time.Second })
	rcv := newHookReceiver(t, failFirst(0))
	hold := make(chan struct{})
	rcv.hold = hold
	w := create(t, d, berth.WebhookRequest{URL: rcv.url, Events: []string{"*"}})
	bus.Publish(berth.Event{Seq: 1, Time: t0, Type: berth.EventJobSubmitted, JobID: "J1"})
	id := func() string { rcv.awaitHits(t, 1); return onlyDelivery(t, d, w.ID).ID }()
	dl := awaitDelivery(t, d, id, "timed out", func(dl *berth.Delivery) bool { return dl.Attempts == 1 })
	if dl.State != berth.DeliveryPending || dl.LastStatus != 0 || !strings.Contains(dl.LastError, "deadline") {
		t.Fatalf("timed-out delivery = %+v", dl)
	}
	close(hold)
	clk.Advance(time.Second)
	rcv.awaitHits(t, 2)
	awaitDelivery(t, d, id, "delivered", func(dl *berth.Delivery) bool { return dl.State == berth.DeliveryDelivered })
}

// TestDispatcherRedeliverWhileInFlight checks a redelivery asked for
// during an attempt is made after it, even though it succeeded.
func TestDispatcherRedeliverWhileInFlight(t *testing.T) {
	t.Parallel()
	d, bus, _ := newDispatcher(t, nil)
	rcv := newHookReceiver(t, failFirst(0))
	hold := make(chan struct{})
	rcv.hold = hold
	w := create(t, d, berth.WebhookRequest{URL: rcv.url})
	bus.Publish(berth.Event{Seq: 1, Time: t0, Type: berth.EventJobSubmitted, JobID: "J1"})
	rcv.awaitHits(t, 1)
	id := onlyDelivery(t, d, w.ID).ID
	if queued, err := d.Redeliver(context.Background(), id); err != nil || queued.State != berth.DeliveryPending {
		t.Fatalf("Redeliver during the attempt = %+v, %v; want it queued", queued, err)
	}
	rcv.mu.Lock()
	rcv.hold = nil
	rcv.mu.Unlock()
	close(hold)
	rcv.awaitHits(t, 2)
	dl := awaitDelivery(t, d, id, "delivered twice", func(dl *berth.Delivery) bool {
		return dl.Attempts == 2 && dl.State == berth.DeliveryDelivered
	})
	if rcv.hit(1).header.Get(webhook.BerthDeliveryHeader) != dl.ID {
		t.Errorf("second attempt is of another delivery")
	}
	rcv.stillHits(t, 2)
}

// heldOutcome is a store whose first write of a delivered outcome
// returns only when release is closed, after signalling written: the
// attempt is then recorded but not yet over.
type heldOutcome struct {
	store.Store
	once             sync.Once
	written, release chan struct{}
}

func (h *heldOutcome) UpdateDelivery(ctx context.Context, dl *berth.Delivery) error {
	err := h.Store.UpdateDelivery(ctx, dl)
	if dl.State == berth.DeliveryDelivered {
		h.once.Do(func() {
			close(h.written)
			<-h.release
		})
	}
	return err
}

// TestDispatcherRedeliverAfterOutcomeWritten checks a redelivery asked
// for once an attempt's success is stored, but before the attempt is
// over, answers the delivery as queued and is made.
func TestDispatcherRedeliverAfterOutcomeWritten(t *testing.T) {
	t.Parallel()
	st := &heldOutcome{Store: openStore(t, filepath.Join(t.TempDir(), "berth.db")),
		written: make(chan struct{}), release: make(chan struct{})}
	bus, clk := controller.NewBus(64), fakeclock.New(t0)
	d := startDispatcher(t, st, bus, clk, nil)
	rcv := newHookReceiver(t, failFirst(0))
	w := create(t, d, berth.WebhookRequest{URL: rcv.url})
	bus.Publish(berth.Event{Seq: 1, Time: t0, Type: berth.EventJobSubmitted, JobID: "J1"})
	<-st.written
	id := onlyDelivery(t, d, w.ID).ID
	queued, err := d.Redeliver(context.Background(), id)
	close(st.release)
	if err != nil {
		t.Fatalf("Redeliver after the outcome was written: %v; want it pending, due now", err)
	}
	if queued.State != berth.DeliveryPending || queued.NextAttemptAt.IsZero() {
		t.Fatalf("Redeliver after the outcome was written = state %s, due %v; want pending, due now", queued.State, queued.NextAttemptAt)
	}
	rcv.awaitHits(t, 2)
	awaitDelivery(t, d, id, "delivered twice", func(dl *berth.Delivery) bool {
		return dl.Attempts == 2 && dl.State == berth.DeliveryDelivered
	})
	rcv.stillHits(t, 2)
}

// TestDispatcherRestartDeliversPending checks that deliveries recorded
// before a stop — including those of events published just before it —
// are delivered by a new Dispatcher over the same SQLite file, with their
// ids and bodies.
func TestDispatcherRestartDeliversPending(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "berth.db")
	st, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	bus := controller.NewBus(64)
	clk := fakeclock.New(t0)
	d := webhook.NewDispatcher(webhook.DispatcherConfig{Store: st, Events: bus, Now: clk.Now, Poll: 10 * time.Millisecond})
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	rcv := newHookReceiver(t, func(int) int { return http.StatusBadGateway })
	w := create(t, d, berth.WebhookRequest{URL: rcv.url, Secret: "k", Events: []string{"job.succeeded", "job.failed"}})
	bus.Publish(berth.Event{Seq: 1, Time: t0, Type: berth.EventJobSucceeded, JobID: "J1"})
	rcv.awaitHits(t, 1)
	first := onlyDelivery(t, d, w.ID)
	awaitDelivery(t, d, first.ID, "attempted", func(dl *berth.Delivery) bool { return dl.Attempts == 1 })
	// Published just before the stop: recorded by it.
	bus.Publish(berth.Event{Seq: 2, Time: t0, Type: berth.EventJobFailed, JobID: "J2"},
		berth.Event{Seq: 3, Time: t0, Type: berth.EventJobRunning, JobID: "J3"})
	if err := d.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := d.Stop(context.Background()); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	ds, err := st.Deliveries(context.Background(), w.ID, 0)
	if err != nil || len(ds) != 2 || ds[0].EventType != "job.failed" || ds[1].ID != first.ID {
		t.Fatalf("deliveries after stop = %+v, %v; want job.failed and the first", ds, err)
	}
	pending := ds[0]
	hitsBefore := rcv.count()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	// A new server: new store handle, new (empty) bus, the receiver up.
	rcv.setStatus(failFirst(0))
	st2 := openStore(t, path)
	clk.Advance(time.Second)
	d2 := startDispatcher(t, st2, controller.NewBus(64), clk, nil)
	rcv.awaitHits(t, hitsBefore+2)
	for _, id := range []string{first.ID, pending.ID} {
		dl := awaitDelivery(t, d2, id, "delivered after restart", func(dl *berth.Delivery) bool { return dl.State == berth.DeliveryDelivered })
		if dl.WebhookID != w.ID {
			t.Errorf("delivery %+v", dl)
		}
	}
	seen := map[string]bool{}
	for i := hitsBefore; i < rcv.count(); i++ {
		h := rcv.hit(i)
		seen[h.header.Get(webhook.BerthDeliveryHeader)] = true
		if !webhook.Verify([]byte("k"), h.body, h.header.Get(webhook.BerthSignatureHeader)) {
			t.Errorf("delivery after restart not signed: %v", h.header)
		}
	}
	if !seen[first.ID] || !seen[pending.ID] {
		t.Errorf("after restart the receiver got deliveries %v, want %s and %s", seen, first.ID, pending.ID)
	}
}

// TestDispatcherCreateDelete checks input validation, that a deleted
// webhook's log goes and it gets no more deliveries, and that events
// published before Start are not delivered.
func TestDispatcherCreateDelete(t *testing.T) {
	t.Parallel()
	st := openStore(t, filepath.Join(t.TempDir(), "berth.db"))
	bus := controller.NewBus(64)
	bus.Publish(berth.Event{Seq: 1, Time: t0, Type: berth.EventJobSubmitted, JobID: "old"})
	clk := fakeclock.New(t0)
	d := startDispatcher(t, st, bus, clk, nil)
	rcv := newHookReceiver(t, failFirst(0))
	for _, tc := range []struct {
		req   berth.WebhookRequest
		field string
	}{
		{berth.WebhookRequest{}, "url"},
		{berth.WebhookRequest{URL: "ftp://example.com/"}, "url"},
		{berth.WebhookRequest{URL: "http://"}, "url"},
		{berth.WebhookRequest{URL: "example.com/hook"}, "url"},
		{berth.WebhookRequest{URL: rcv.url, Events: []string{"Job."}}, "events"},
		{berth.WebhookRequest{URL: rcv.url, Events: []string{""}}, "events"},
		{berth.WebhookRequest{URL: rcv.url, Secret: strings.Repeat("s", berth.MaxWebhookSecret+1)}, "secret"},
	} {
		_, err := d.Create(context.Background(), tc.req, "alice", nil)
		if e, ok := err.(*berth.Error); !ok || e.Code != berth.ECodeInvalid || e.Field != tc.field {
			t.Errorf("Create %+v: got %v, want invalid %s", tc.req, err, tc.field)
		}
	}
	refused := berth.Errorf(berth.ECodeUnavailable, "audit log down")
	if _, err := d.Create(context.Background(), berth.WebhookRequest{URL: rcv.url}, "alice",
		func(*berth.Webhook) error { return refused }); err != refused {
		t.Errorf("Create with a failing before: got %v", err)
	}
	if hooks, _ := d.Webhooks(context.Background()); len(hooks) != 0 {
		t.Fatalf("webhooks after refused creates: %+v", hooks)
	}

	w := create(t, d, berth.WebhookRequest{URL: rcv.url, Events: []string{"job.", "*"}})
	if len(w.Events) != 0 {
		t.Errorf("events with * = %v, want none (every event)", w.Events)
	}
	bus.Publish(berth.Event{Seq: 2, Time: t0, Type: berth.EventJobSubmitted, JobID: "new"})
	rcv.awaitHits(t, 1)
	awaitDelivery(t, d, onlyDelivery(t, d, w.ID).ID, "delivered", func(dl *berth.Delivery) bool { return dl.State == berth.DeliveryDelivered })
	var p webhook.Payload
	if err := json.Unmarshal(rcv.hit(0).body, &p); err != nil || p.Data.JobID != "new" {
		t.Errorf("delivered %s, want the event published after Start", rcv.hit(0).body)
	}

	if err := d.Delete(context.Background(), w.ID, func(*berth.Webhook) error { return refused }); err != refused {
		t.Errorf("Delete with a failing before: got %v", err)
	}
	var deleted *berth.Webhook
	if err := d.Delete(context.Background(), w.ID, func(h *berth.Webhook) error { deleted = h; return nil }); err != nil {
		t.Fatal(err)
	}
	if deleted == nil || deleted.ID != w.ID {
		t.Errorf("before got %+v", deleted)
	}
	if err := d.Delete(context.Background(), w.ID, nil); berth.ErrorCode(err) != berth.ECodeNotFound {
		t.Errorf("Delete twice: got %v, want not found", err)
	}
	if ds, err := st.Deliveries(context.Background(), w.ID, 0); err != nil || len(ds) != 0 {
		t.Errorf("deliveries of a deleted webhook: %+v, %v", ds, err)
	}
	bus.Publish(berth.Event{Seq: 3, Time: t0, Type: berth.EventJobSubmitted, JobID: "after"})
	rcv.stillHits(t, 1)
}

// TestDispatcherDoesNotFollowRedirects checks a 3xx answer fails the
// attempt (a POST turned into a GET elsewhere is no delivery).
func TestDispatcherDoesNotFollowRedirects(t *testing.T) {
	t.Parallel()
	d, bus, _ := newDispatcher(t, nil)
	target := newHookReceiver(t, failFirst(0))
	hs := httptest.NewServer(http.RedirectHandler(target.url, http.StatusFound))
	t.Cleanup(hs.Close)
	w := create(t, d, berth.WebhookRequest{URL: hs.URL})
	bus.Publish(berth.Event{Seq: 1, Time: t0, Type: berth.EventJobSubmitted, JobID: "J1"})
	var id string
	eventually(t, "a delivery", func() bool {
		ds, _ := d.Deliveries(context.Background(), w.ID, 0)
		if len(ds) == 1 {
			id = ds[0].ID
		}
		return id != ""
	})
	dl := awaitDelivery(t, d, id, "attempted", func(dl *berth.Delivery) bool { return dl.Attempts == 1 })
	if dl.State != berth.DeliveryPending || dl.LastStatus != http.StatusFound {
		t.Errorf("redirected delivery = %+v", dl)
	}
	target.stillHits(t, 0)
}

// readsPast is an event stream that tells, on reached, when its reader
// asks for the events after seq at or beyond the stream's mark: it has
// then handled every event up to the mark.
type readsPast struct {
	*controller.Bus
	mark    uint64
	reached chan struct{}
	once    sync.Once
}

func (r *readsPast) ReadCounting(ctx context.Context, after uint64) ([]berth.Event, uint64, map[string]uint64, error) {
	if after >= r.mark {
		r.once.Do(func() { close(r.reached) })
	}
	return r.Bus.ReadCounting(ctx, after)
}

// overflow publishes n job events at once on a bus of ring events, more
// than it keeps, to a dispatcher logging as JSON into logs, and returns
// the dispatcher once it has read them all. The events before them, of
// another type, are published before the dispatcher starts, and those
// with an even seq are job.succeeded, the rest job.submitted.
func overflow(t *testing.T, ring, n int, before func(*webhook.Dispatcher)) (*webhook.Dispatcher, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	const earlier = 5
	events := &readsPast{Bus: controller.NewBus(ring), mark: uint64(earlier + n), reached: make(chan struct{})}
	for seq := range uint64(earlier) {
		events.Publish(berth.Event{Seq: seq + 1, Time: t0, Type: berth.EventJobFailed, JobID: "before"})
	}
	d := startDispatcher(t, openStore(t, filepath.Join(t.TempDir(), "berth.db")), events, fakeclock.New(t0),
		func(c *webhook.DispatcherConfig) { c.Log = slog.New(slog.NewJSONHandler(logs, nil)) })
	if before != nil {
		before(d)
	}
	batch := make([]berth.Event, n)
	for i := range batch {
		seq := uint64(earlier + i + 1)
		batch[i] = berth.Event{Seq: seq, Time: t0, Type: berth.EventJobSubmitted, JobID: "j" + strconv.Itoa(i+1)}
		if seq%2 == 0 {
			batch[i].Type = berth.EventJobSucceeded
		}
	}
	events.Publish(batch...)
	select {
	case <-events.reached:
	case <-time.After(10 * time.Second):
		t.Fatalf("the dispatcher did not read past event %d", n)
	}
	return d, logs
}

// TestDispatcherWithoutWebhooksIgnoresOverflow publishes more events at
// once than the ring keeps, with no webhook: nothing was owed, so nothing
// is logged.
func TestDispatcherWithoutWebhooksIgnoresOverflow(t *testing.T) {
	t.Parallel()
	_, logs := overflow(t, 8, 20, nil)
	if out := logs.String(); out != "" {
		t.Errorf("log = %q, want nothing", out)
	}
}

// TestDispatcherNamesSkippedDeliveries publishes 20 events at once on a
// ring of 8, after 5 of another type, with four webhooks: the 8 events
// kept are delivered, and of the 12 (seq 6 to 17) that left the ring,
// each webhook they concern is told how many of its deliveries were
// skipped and of which types; one that subscribes to none of them is not.
func TestDispatcherNamesSkippedDeliveries(t *testing.T) {
	t.Parallel()
	rcv := newHookReceiver(t, failFirst(0))
	var all, succeeded, jobs, workers *berth.Webhook
	d, logs := overflow(t, 8, 20, func(d *webhook.Dispatcher) {
		all = create(t, d, berth.WebhookRequest{URL: rcv.url})
		succeeded = create(t, d, berth.WebhookRequest{URL: rcv.url, Events: []string{berth.EventJobSucceeded, berth.EventJobFailed}})
		jobs = create(t, d, berth.WebhookRequest{URL: rcv.url, Events: []string{"job."}})
		workers = create(t, d, berth.WebhookRequest{URL: rcv.url, Events: []string{"worker."}})
	})
	for w, want := range map[*berth.Webhook][]uint64{
		all:       {18, 19, 20, 21, 22, 23, 24, 25},
		succeeded: {18, 20, 22, 24},
		jobs:      {18, 19, 20, 21, 22, 23, 24, 25},
		workers:   nil,
	} {
		ds, err := d.Deliveries(context.Background(), w.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		var seqs []uint64
		for _, dl := range ds {
			seqs = append(seqs, dl.EventSeq)
		}
		slices.Sort(seqs)
		if !slices.Equal(seqs, want) {
			t.Errorf("webhook %v: deliveries of events %v, want %v (those the ring kept)", w.Events, seqs, want)
		}
	}
	// Seq 6 to 17: 6 job.submitted (odd), 6 job.succeeded (even); the
	// 5 job.failed before them were published before the dispatcher
	// started, so none of them is owed.
	want := map[string]string{
		all.ID:       "12 job.submitted=6,job.succeeded=6",
		succeeded.ID: "6 job.succeeded=6",
		jobs.ID:      "12 job.submitted=6,job.succeeded=6",
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != len(want) {
		t.Fatalf("log = %q, want one line per webhook concerned", lines)
	}
	for _, line := range lines {
		var rec struct {
			Level, Msg, Webhook, Types string
			Deliveries                 uint64
			FirstSeq                   uint64 `json:"first_seq"`
			LastSeq                    uint64 `json:"last_seq"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		got := fmt.Sprintf("%d %s", rec.Deliveries, rec.Types)
		if rec.Level != "ERROR" || !strings.Contains(rec.Msg, "deliveries skipped") || rec.FirstSeq != 6 || rec.LastSeq != 17 || want[rec.Webhook] != got {
			t.Errorf("log line %q: want an error naming webhook %s, %q, events 6 to 17", line, rec.Webhook, want[rec.Webhook])
		}
		delete(want, rec.Webhook)
	}
	if len(want) != 0 {
		t.Errorf("webhooks not named in the log: %v", want)
	}
}
