package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/api"
	"github.com/berth-dev/berth/api/apitest"
	"github.com/berth-dev/berth/auth"
	"github.com/berth-dev/berth/store"
)

// newEventServer starts a server that trusts loopback clients as admins
// and sends a keepalive after keepalive of silence (0: the default).
func newEventServer(t *testing.T, keepalive time.Duration) *server {
	t.Helper()
	st, ctl, sec := startController(t, t.TempDir(), func(st store.Store) *api.Security {
		return apitest.Security(t, st, auth.RoleAdmin)
	})
	srv := api.New(ctl, st, sec, nil)
	srv.EventKeepalive = keepalive
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return &server{t: t, url: hs.URL, ctl: ctl, st: st, sec: sec}
}

// openEvents opens the event stream at path with the Last-Event-ID
// lastID ("" for none) and returns a reader of its body.
func (s *server) openEvents(path, lastID string) *bufio.Reader {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	s.t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, "GET", s.url+path, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("GET %s: %v", path, err)
	}
	s.t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		s.t.Fatalf("GET %s: status %d", path, resp.StatusCode)
	}
	return bufio.NewReader(resp.Body)
}

// nextEvent reads the next event of r, failing the test when there is none.
func nextEvent(t *testing.T, r *bufio.Reader) sseEvent {
	t.Helper()
	e, err := readEvent(r)
	if err != nil {
		t.Fatalf("no next event: %v", err)
	}
	return e
}

// TestEventsResumeAheadOfTheServer asks for the events after a position
// the server has not reached, as a client of the server before a SQLite
// restart does: the stream says it was reset and goes on from the oldest
// event the server keeps, then with new events.
func TestEventsResumeAheadOfTheServer(t *testing.T) {
	t.Parallel()
	s := newEventServer(t, 0)
	s.submit(`{"command":["true"],"array":2}`, http.StatusCreated)
	last := s.ctl.Bus().Last()
	if last == 0 {
		t.Fatal("no events after two submissions")
	}
	for _, tc := range []struct{ path, lastID string }{
		{"/api/v1/events", strconv.FormatUint(last+69, 10)},
		{"/api/v1/events?after=100000", ""},
	} {
		r := s.openEvents(tc.path, tc.lastID)
		reset := nextEvent(t, r)
		var data struct {
			After, Last uint64
			Reason      string
		}
		if err := json.Unmarshal([]byte(reset.data), &data); err != nil || reset.typ != "reset" || reset.id != "0" ||
			data.Last != last || data.After <= last || !strings.Contains(data.Reason, "numbering") {
			t.Fatalf("%s (Last-Event-ID %q): first event %+v (%v); want a reset, id 0, naming the positions", tc.path, tc.lastID, reset, err)
		}
		for seq := uint64(1); seq <= last; seq++ {
			if e := nextEvent(t, r); e.id != strconv.FormatUint(seq, 10) {
				t.Fatalf("%s: after the reset, event %+v; want id %d", tc.path, e, seq)
			}
		}
		untilSubmitted(t, r, s.submit(`{"command":["true"]}`, http.StatusCreated)[0].ID)
		last = s.ctl.Bus().Last()
	}

	// Resuming at the newest event is no reset: the next is a new one.
	// Last-Event-ID, which an EventSource sends when it reconnects to the
	// URL it opened, comes before that URL's after.
	r := s.openEvents("/api/v1/events?after=1", strconv.FormatUint(last, 10))
	j := s.submit(`{"command":["true"]}`, http.StatusCreated)[0]
	if first := untilSubmitted(t, r, j.ID); first.id != strconv.FormatUint(last+1, 10) {
		t.Fatalf("resuming at the newest event: first event %+v; want id %d", first, last+1)
	}
}

// untilSubmitted reads the events of r up to job id's submission, which
// must come, and returns the first; a reset fails the test.
func untilSubmitted(t *testing.T, r *bufio.Reader, id string) sseEvent {
	t.Helper()
	var first sseEvent
	for {
		e := nextEvent(t, r)
		if first.id == "" {
			first = e
		}
		if e.typ == "reset" {
			t.Fatalf("a reset while waiting for %s's submission: %+v", id, e)
		}
		var ev berth.Event
		if err := json.Unmarshal([]byte(e.data), &ev); err != nil {
			t.Fatalf("event %+v: %v", e, err)
		}
		if ev.Type == berth.EventJobSubmitted && ev.JobID == id {
			return first
		}
	}
}

// TestEventsKeepalive: an idle stream carries a comment line now and then,
// which event readers skip.
func TestEventsKeepalive(t *testing.T) {
	t.Parallel()
	s := newEventServer(t, 10*time.Millisecond)
	r := s.openEvents("/api/v1/events", "")
	for range 2 {
		line, err := r.ReadString('\n')
		if err != nil || line != ": keepalive\n" {
			t.Fatalf("idle stream: %q (%v); want a keepalive comment", line, err)
		}
		if blank, err := r.ReadString('\n'); err != nil || blank != "\n" {
			t.Fatalf("after the keepalive: %q (%v); want a blank line", blank, err)
		}
	}
	untilSubmitted(t, r, s.submit(`{"command":["true"]}`, http.StatusCreated)[0].ID)
}
