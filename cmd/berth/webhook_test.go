package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/webhook"
)

// TestWebhookAddListDeliveriesRedeliverRm drives berth webhook against a
// real server: a submission reaches a receiver on loopback, signed, and
// shows in the delivery log; redeliver sends it again.
func TestWebhookAddListDeliveriesRedeliverRm(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var bodies [][]byte
	var sigs []string
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies, sigs = append(bodies, b), append(sigs, r.Header.Get(webhook.BerthSignatureHeader))
		mu.Unlock()
	}))
	t.Cleanup(hs.Close)
	got := func() int { mu.Lock(); defer mu.Unlock(); return len(bodies) }
	await := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	c := newCLI(t)
	code, out, errOut := c.run("webhook", "add", hs.URL, "--secret", "s3", "--events", "job.submitted, service.")
	if code != 0 || !strings.HasSuffix(out, " created: "+hs.URL+" (job.submitted,service., signed)\n") || errOut != "" {
		t.Fatalf("webhook add: exit %d, %q, %q", code, out, errOut)
	}
	id := strings.Fields(out)[0]
	code, out, _ = c.run("webhook", "list", "-o", "json")
	var hooks []berth.Webhook
	if code != 0 || json.Unmarshal([]byte(out), &hooks) != nil || len(hooks) != 1 || hooks[0].ID != id || !hooks[0].SecretSet ||
		strings.Contains(out, `"s3"`) {
		t.Fatalf("webhook list -o json: exit %d, %q", code, out)
	}
	code, out, _ = c.run("webhook", "list")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); code != 0 || len(lines) != 2 ||
		strings.Join(strings.Fields(lines[0]), " ") != "ID URL EVENTS SIGNED CREATED" || !strings.HasPrefix(lines[1], id) {
		t.Fatalf("webhook list: exit %d:\n%s", code, out)
	}

	if code, _, errOut := c.run("submit", "--", "true"); code != 0 {
		t.Fatalf("submit: %s", errOut)
	}
	await("the delivery", func() bool { return got() == 1 })
	mu.Lock()
	if !webhook.Verify([]byte("s3"), bodies[0], sigs[0]) {
		t.Errorf("delivery signature %q does not verify", sigs[0])
	}
	mu.Unlock()
	var ds []berth.Delivery
	await("the delivery logged", func() bool {
		code, out, _ = c.run("webhook", "deliveries", id, "-o", "json")
		return code == 0 && json.Unmarshal([]byte(out), &ds) == nil && len(ds) == 1 && ds[0].State == berth.DeliveryDelivered
	})
	code, out, _ = c.run("webhook", "deliveries", "--limit", "5", id)
	if lines := strings.Split(strings.TrimSpace(out), "\n"); code != 0 || len(lines) != 2 ||
		strings.Join(strings.Fields(lines[0]), " ") != "ID EVENT STATE ATTEMPTS STATUS WHEN ERROR" ||
		strings.Join(strings.Fields(lines[1])[:5], " ") != ds[0].ID+" job.submitted delivered 1 200" {
		t.Fatalf("webhook deliveries: exit %d:\n%s", code, out)
	}

	code, out, _ = c.run("webhook", "redeliver", ds[0].ID)
	if code != 0 || out != ds[0].ID+" queued for redelivery (job.submitted)\n" {
		t.Fatalf("webhook redeliver: exit %d, %q", code, out)
	}
	await("the redelivery", func() bool { return got() == 2 })

	if code, out, _ := c.run("webhook", "rm", id); code != 0 || out != id+" removed\n" {
		t.Fatalf("webhook rm: exit %d, %q", code, out)
	}
	code, out, errOut = c.run("webhook", "rm", id)
	if code != exitUsage || out != "" || !strings.Contains(errOut, "not_found") {
		t.Fatalf("webhook rm of a removed webhook: exit %d, %q, %q", code, out, errOut)
	}
	if code, out, _ := c.run("webhook", "help"); code != 0 || !strings.Contains(out, "berth webhook add URL") {
		t.Errorf("webhook help: exit %d, %q", code, out)
	}
}

// TestWebhookBadInput checks each mistake gives exit 2 and one error line
// naming the field.
func TestWebhookBadInput(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"webhook"}, "subcommand"},
		{[]string{"webhook", "add"}, "url"},
		{[]string{"webhook", "add", "ftp://example.com/"}, "url"},
		{[]string{"webhook", "add", "http://example.com/", "--events", "job.,BAD"}, "--events"},
		{[]string{"webhook", "add", "http://a/", "http://b/"}, "url"},
		{[]string{"webhook", "rm"}, "id"},
		{[]string{"webhook", "deliveries", "x", "--limit", "-1"}, "--limit"},
		{[]string{"webhook", "deliveries", "nope"}, "not_found"},
		{[]string{"webhook", "redeliver", "nope"}, "not_found"},
	} {
		code, out, errOut := c.run(tc.args...)
		if code != exitUsage || out != "" || !strings.Contains(errOut, tc.want) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: exit %d, %q, %q; want 2 and one line naming %s", tc.args, code, out, errOut, tc.want)
		}
	}
	if code, out, _ := c.run("webhook", "list", "-o", "json"); code != 0 || out != "[]\n" {
		t.Errorf("webhooks after bad input: exit %d, %q", code, out)
	}
}
