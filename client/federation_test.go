package client_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/client"
)

// answerError answers status with a Berth error body of code.
func answerError(status int, code string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"error":{"code":%q,"message":"refused"}}`, code)
	}
}

// answerText answers status with a body that is not a Berth error, as a
// proxy in front of a server does.
func answerText(status int) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, http.StatusText(status), status)
	}
}

// TestFederationClassifiesAnswers checks what a federation origin makes of
// each way a handoff can fail: a refusal that cannot change (final), one
// that may pass (retried), and no answer at all.
func TestFederationClassifiesAnswers(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name            string
		answer          http.HandlerFunc
		url             string
		final, answered bool
		notFound        bool
	}{
		{name: "invalid", answer: answerError(400, berth.ECodeInvalid), final: true, answered: true},
		{name: "forbidden", answer: answerError(403, berth.ECodeForbidden), final: true, answered: true},
		{name: "quota", answer: answerError(409, berth.ECodeConflict), final: true, answered: true},
		{name: "unsatisfiable", answer: answerError(409, berth.ECodeUnsatisfiable), final: true, answered: true},
		{name: "too large", answer: answerError(413, berth.ECodeTooLarge), final: true, answered: true},
		{name: "proxy forbidden", answer: answerText(403), final: true, answered: true},
		{name: "token revoked", answer: answerError(401, berth.ECodeUnauthorized), answered: true},
		{name: "not found", answer: answerError(404, berth.ECodeNotFound), answered: true, notFound: true},
		{name: "too many", answer: answerError(429, berth.ECodeTooMany), answered: true},
		{name: "internal", answer: answerError(500, berth.ECodeInternal), answered: true},
		{name: "unavailable", answer: answerError(503, berth.ECodeUnavailable), answered: true},
		{name: "proxy conflict", answer: answerText(409), final: true, answered: true},
		{name: "bad gateway", answer: answerText(502)},
		{name: "gateway unavailable", answer: answerText(503)},
		{name: "gateway timeout", answer: answerText(504)},
		{name: "reset", answer: resets},
		{name: "timeout", answer: func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() }},
		{name: "refused", url: deadURL(t)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url := tc.url
			if url == "" {
				url = newFakeServer(t, tc.answer).url
			}
			c := client.New(url, "peer-token", nil)
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			defer cancel()
			_, err := c.Handoff(ctx, &berth.HandoffRequest{RemoteID: "j1", Nonce: "n1"})
			if err == nil {
				t.Fatal("the handoff succeeded")
			}
			if got := client.Final(err); got != tc.final {
				t.Errorf("Final(%v) = %v, want %v", err, got, tc.final)
			}
			if got := client.Answered(err); got != tc.answered {
				t.Errorf("Answered(%v) = %v, want %v", err, got, tc.answered)
			}
			if got := client.NotFound(err); got != tc.notFound {
				t.Errorf("NotFound(%v) = %v, want %v", err, got, tc.notFound)
			}
		})
	}
	if client.Final(nil) || client.NotFound(nil) {
		t.Error("no error is classified as a refusal")
	}
}

// TestFederationEndpoints checks the paths, queries, token and bodies the
// four peer calls use.
func TestFederationEndpoints(t *testing.T) {
	t.Parallel()
	var got []string
	fs := newFakeServer(t, func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Method+" "+r.URL.RequestURI()+" "+r.Header.Get("Authorization"))
		switch r.URL.Path {
		case "/api/v1/federation/handoffs":
			fmt.Fprint(w, `{"job_id":"b-1","state":"pending","duplicate":true}`)
		case "/api/v1/federation/changes":
			fmt.Fprint(w, `{"full":false,"jobs":[{"remote_id":"j1","nonce":"n1","job_id":"b-1","state":"running","attempts":1,"at":"2026-01-01T00:00:00Z"}],"cursor":{"epoch":"e","seq":7,"tag":"t"},"more":true}`)
		case "/api/v1/federation/cancels":
			fmt.Fprint(w, `{"version":3,"state":"cancelled"}`)
		case "/api/v1/federation/capacity":
			fmt.Fprint(w, `{"workers":[{"free_gpus":2,"cpus":8,"memory":1024}],"at":"2026-01-01T00:00:00Z"}`)
		}
	})
	c := client.New(fs.url, "tok", nil)
	ctx := t.Context()
	h, err := c.Handoff(ctx, &berth.HandoffRequest{RemoteID: "j1", Nonce: "n1"})
	if err != nil || h.JobID != "b-1" || !h.Duplicate {
		t.Fatalf("Handoff = %+v, %v", h, err)
	}
	ch, err := c.FederationChanges(ctx, "e.6.x", 50)
	if err != nil || len(ch.Jobs) != 1 || ch.Jobs[0].State != berth.JobRunning || !ch.More || ch.Cursor.Seq != 7 {
		t.Fatalf("FederationChanges = %+v, %v", ch, err)
	}
	cr, err := c.FederationCancel(ctx, &berth.FederationCancel{RemoteID: "j1", Nonce: "n1", Version: 3})
	if err != nil || cr.Version != 3 || cr.State != berth.JobCancelled {
		t.Fatalf("FederationCancel = %+v, %v", cr, err)
	}
	pc, err := c.PeerCapacity(ctx)
	if err != nil || len(pc.Workers) != 1 || pc.Workers[0].FreeGPUs != 2 {
		t.Fatalf("PeerCapacity = %+v, %v", pc, err)
	}
	want := []string{
		"POST /api/v1/federation/handoffs Bearer tok",
		"GET /api/v1/federation/changes?cursor=e.6.x&limit=50 Bearer tok",
		"POST /api/v1/federation/cancels Bearer tok",
		"GET /api/v1/federation/capacity Bearer tok",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("requests:\n got %q\nwant %q", got, want)
	}
	if bodies := fs.requests(); bodies[2] != `{"remote_id":"j1","nonce":"n1","version":3}` {
		t.Fatalf("bodies %q", bodies)
	}
}
