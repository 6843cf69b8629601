package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/webhook"
)

// hookLog is a webhook receiver on loopback: it verifies each request's
// signature with secret, answers 500 to the first failFirst requests and
// 200 after, and records the event types of the verified requests it
// answered 200.
type hookLog struct {
	url string

	mu       sync.Mutex
	requests int
	bad      []string            // what was wrong with requests
	events   map[string][]string // job id → event types answered 200, in order
}

func newHookLog(t *testing.T, secret string, failFirst int) *hookLog {
	t.Helper()
	h := &hookLog{events: map[string][]string{}}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		defer h.mu.Unlock()
		h.requests++
		var p webhook.Payload
		switch {
		case !webhook.Verify([]byte(secret), body, r.Header.Get(webhook.BerthSignatureHeader)):
			h.bad = append(h.bad, "signature "+r.Header.Get(webhook.BerthSignatureHeader)+" does not verify")
		case json.Unmarshal(body, &p) != nil:
			h.bad = append(h.bad, "body "+string(body))
		case p.Event != r.Header.Get(webhook.BerthEventHeader) || p.DeliveryID != r.Header.Get(webhook.BerthDeliveryHeader) ||
			p.Data.Type != p.Event || r.Header.Get("Content-Type") != "application/json":
			h.bad = append(h.bad, "headers disagree with the body "+string(body))
		}
		if h.requests <= failFirst {
			http.Error(w, "warming up", http.StatusInternalServerError)
			return
		}
		h.events[p.Data.JobID] = append(h.events[p.Data.JobID], p.Event)
	}))
	t.Cleanup(hs.Close)
	h.url = hs.URL
	return h
}

// got returns the sorted event types answered 200 for job id.
func (h *hookLog) got(id string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Sorted(slices.Values(h.events[id]))
}

// TestWebhooksDeliverJobEvents runs a job on a real agent with two
// receivers subscribed to "job.": each gets job.submitted, job.running
// and job.succeeded, signed with its secret; the one that fails its first
// two requests gets them on retries, which the delivery log shows.
func TestWebhooksDeliverJobEvents(t *testing.T) {
	t.Parallel()
	cl := newCluster(t)
	ctx := context.Background()
	ok := newHookLog(t, "ok-secret", 0)
	flaky := newHookLog(t, "flaky-secret", 2)
	okHook, err := cl.c.CreateWebhook(ctx, berth.WebhookRequest{URL: ok.url, Secret: "ok-secret", Events: []string{"job."}})
	if err != nil {
		t.Fatal(err)
	}
	flakyHook, err := cl.c.CreateWebhook(ctx, berth.WebhookRequest{URL: flaky.url, Secret: "flaky-secret", Events: []string{"job."}})
	if err != nil {
		t.Fatal(err)
	}
	cl.addAgent("gpu1")
	id := cl.submit(shellJob("echo hello"))[0].ID
	cl.awaitState(id, 30*time.Second, berth.JobSucceeded)

	want := []string{"job.running", "job.submitted", "job.succeeded"}
	for name, h := range map[string]*hookLog{"ok": ok, "flaky": flaky} {
		cl.eventually(30*time.Second, name+" receiver got the job's events", func() bool { return slices.Equal(h.got(id), want) })
		h.mu.Lock()
		if len(h.bad) > 0 {
			t.Errorf("%s receiver: %v", name, h.bad)
		}
		h.mu.Unlock()
	}
	// The worker's events matched neither webhook.
	for _, h := range []*hookLog{ok, flaky} {
		h.mu.Lock()
		if len(h.events) != 1 {
			t.Errorf("receiver got events of %d jobs, want only %s's: %v", len(h.events), id, h.events)
		}
		h.mu.Unlock()
	}

	// The delivery logs: the flaky receiver's show the retries.
	logOf := func(hook *berth.Webhook) []*berth.Delivery {
		ds, err := cl.c.Deliveries(ctx, hook.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		return ds
	}
	var retried int
	cl.eventually(10*time.Second, "every delivery logged as delivered", func() bool {
		retried = 0
		for _, hook := range []*berth.Webhook{okHook, flakyHook} {
			ds := logOf(hook)
			if len(ds) != 3 {
				return false
			}
			for _, d := range ds {
				if d.State != berth.DeliveryDelivered || d.LastStatus != 200 {
					return false
				}
				if d.Attempts > 1 {
					retried += d.Attempts - 1
				}
			}
		}
		return true
	})
	if retried != 2 {
		t.Errorf("deliveries retried %d times in all, want 2 (the flaky receiver's first two requests)", retried)
	}
	for _, d := range logOf(okHook) {
		if d.Attempts != 1 {
			t.Errorf("delivery to the healthy receiver took %d attempts: %+v", d.Attempts, d)
		}
	}
}
