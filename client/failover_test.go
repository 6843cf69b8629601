package client_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/client"
)

// fakeServer answers every request with answer and records the body of
// each request it read.
type fakeServer struct {
	url    string
	mu     sync.Mutex
	bodies []string
}

func newFakeServer(t *testing.T, answer http.HandlerFunc) *fakeServer {
	t.Helper()
	fs := &fakeServer{}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fs.mu.Lock()
		fs.bodies = append(fs.bodies, string(body))
		fs.mu.Unlock()
		answer(w, r)
	}))
	t.Cleanup(hs.Close)
	fs.url = hs.URL
	return fs
}

// requests returns the bodies of the requests the server got.
func (fs *fakeServer) requests() []string {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.bodies
}

// leads answers as the leader, with a body every method of the client
// can decode.
func leads(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"done":true,"jobs":[{"id":"j1"}],"workers":[]}`)
}

// standby answers as a standby naming leader ("" for none).
func standby(leader string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set(berth.LeaderHeader, leader)
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, `{"error":{"code":"unavailable","message":"this server is a standby; the leader is %s"}}`, leader)
	}
}

// resets resets the connection of a request it has read, as a server
// dying before it answers.
func resets(w http.ResponseWriter, _ *http.Request) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(err)
	}
	_ = conn.(*net.TCPConn).SetLinger(0)
	_ = conn.Close()
}

// deadURL returns the URL of a port nothing listens on.
func deadURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return url
}

func TestFailoverPastADeadServer(t *testing.T) {
	t.Parallel()
	live := newFakeServer(t, leads)
	c := client.New(deadURL(t)+","+live.url, "", nil)
	for i := range 2 {
		if _, err := c.Workers(t.Context()); err != nil {
			t.Fatalf("Workers %d: %v", i, err)
		}
	}
	if n := len(live.requests()); n != 2 {
		t.Fatalf("the live server got %d requests, want 2", n)
	}
}

func TestFailoverFollowsTheLeader(t *testing.T) {
	t.Parallel()
	leader := newFakeServer(t, leads)
	other := newFakeServer(t, leads)
	stby := newFakeServer(t, standby(leader.url))
	c := client.New(stby.url+", "+other.url+","+leader.url+"/", "", nil)
	for i := range 2 {
		if _, err := c.Jobs(t.Context(), client.ListOptions{}); err != nil {
			t.Fatalf("Jobs %d: %v", i, err)
		}
	}
	// The standby once, then the leader it named, which the second request
	// goes to directly.
	if s, o, l := len(stby.requests()), len(other.requests()), len(leader.requests()); s != 1 || o != 0 || l != 2 {
		t.Fatalf("requests: standby %d, other %d, leader %d; want 1, 0, 2", s, o, l)
	}

	// A standby that knows no leader: the next server.
	unsure := newFakeServer(t, standby(""))
	if _, err := client.New(unsure.url+","+leader.url, "", nil).Workers(t.Context()); err != nil {
		t.Fatalf("Workers past a standby that knows no leader: %v", err)
	}
	if len(unsure.requests()) != 1 || len(leader.requests()) != 3 {
		t.Fatalf("requests: unsure standby %d, leader %d; want 1, 3", len(unsure.requests()), len(leader.requests()))
	}
}

// TestFailoverResendsOnlyIdempotentRequests sends requests that the first
// server reads and then resets: only those that are harmless to repeat
// go to the second.
func TestFailoverResendsOnlyIdempotentRequests(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		call   func(*client.Client) error
		resent bool
	}{
		{"cancel", func(c *client.Client) error { _, err := c.Cancel(t.Context(), "j1"); return err }, false},
		{"jobs", func(c *client.Client) error { _, err := c.Jobs(t.Context(), client.ListOptions{}); return err }, true},
		{"wait", func(c *client.Client) error { _, err := c.Wait(t.Context(), []string{"j1"}, false, 0); return err }, true},
		{"submit with a key", func(c *client.Client) error {
			req := &berth.SubmitRequest{JobSpec: berth.JobSpec{Command: berth.Argv{"true"}, IdempotencyKey: "k1"}}
			_, err := c.Submit(t.Context(), req)
			return err
		}, true},
		{"submit without a key", func(c *client.Client) error {
			req := &berth.SubmitRequest{JobSpec: berth.JobSpec{Command: berth.Argv{"true"}}}
			_, err := c.Submit(t.Context(), req)
			if req.IdempotencyKey != "" {
				t.Errorf("Submit set the caller's idempotency key to %q", req.IdempotencyKey)
			}
			return err
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			first, second := newFakeServer(t, resets), newFakeServer(t, leads)
			err := tc.call(client.New(first.url+","+second.url, "", nil))
			if n := len(first.requests()); n != 1 {
				t.Fatalf("the first server got %d requests, want 1", n)
			}
			if !tc.resent {
				want := "cannot reach the server at " + first.url + ": "
				if err == nil || !strings.HasPrefix(err.Error(), want) || len(second.requests()) != 0 {
					t.Fatalf("error %v and %d requests to the second server; want an error starting %q and none",
						err, len(second.requests()), want)
				}
				return
			}
			if err != nil || len(second.requests()) != 1 {
				t.Fatalf("error %v and %d requests to the second server; want the second's answer", err, len(second.requests()))
			}
			if strings.HasPrefix(tc.name, "submit") {
				keys := [2]string{idempotencyKey(t, first.requests()[0]), idempotencyKey(t, second.requests()[0])}
				if keys[0] == "" || keys[0] != keys[1] || (tc.name == "submit with a key" && keys[0] != "k1") {
					t.Fatalf("idempotency keys sent: %q; want the same, k1 if the caller set it", keys)
				}
			}
		})
	}
}

// idempotencyKey returns the idempotency key of a submission's body.
func idempotencyKey(t *testing.T, body string) string {
	t.Helper()
	var req berth.SubmitRequest
	if err := json.Unmarshal([]byte(body), &req); err != nil {
		t.Fatalf("submission %q: %v", body, err)
	}
	return req.IdempotencyKey
}

func TestFailoverNoServerAnswers(t *testing.T) {
	t.Parallel()
	a, b := deadURL(t), deadURL(t)
	_, err := client.New(a+","+b, "", nil).Workers(t.Context())
	if want := "no server of " + a + ", " + b + " answered: cannot reach the server at " + b + ": "; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("every server dead: error %v, want one starting %q", err, want)
	}
	_, err = client.New(a, "", nil).Workers(t.Context())
	if want := "cannot reach the server at " + a + ": "; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("the one server dead: error %v, want one starting %q", err, want)
	}

	s1, s2 := newFakeServer(t, standby("")), newFakeServer(t, standby(""))
	_, err = client.New(s1.url+","+s2.url, "", nil).Workers(t.Context())
	var be *berth.Error
	if want := "no server of " + s1.url + ", " + s2.url + " answered: this server is a standby"; !errors.As(err, &be) ||
		be.Code != berth.ECodeUnavailable || !strings.HasPrefix(be.Message, want) {
		t.Errorf("only standbys: error %v, want the unavailable error starting %q", err, want)
	}
}
