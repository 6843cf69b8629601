package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/berth-dev/berth"
)

// DefaultEventKeepalive is how long the event stream may be silent before
// the server sends a keepalive comment (": keepalive"), well within the
// idle timeouts of common proxies.
const DefaultEventKeepalive = 15 * time.Second

// events streams the events after the position the request asks for
// (Last-Event-ID, else ?after=N, else the newest event) as server-sent
// events, and a keepalive comment whenever it has been silent for
// EventKeepalive. A position ahead of the newest event is one of another
// numbering (the server restarted on SQLite): the stream says so with a
// reset event and goes on from the oldest event kept.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		writeError(w, r, berth.Errorf(berth.ECodeInternal, "streaming unsupported"))
		return
	}
	last := s.ctl.Bus().Last()
	after, err := eventPosition(r, last)
	if err != nil {
		writeError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if after > last {
		if writeReset(w, after, last) != nil {
			return
		}
		after = 0
	}
	flusher.Flush()
	s.streamEvents(r.Context(), w, flusher, after, s.eventFilter(r))
}

// eventPosition returns the seq of the last event the request has seen:
// its Last-Event-ID when that is a number (an EventSource sends it when it
// reconnects, to the URL it was opened with), else ?after=N, else newest.
// A malformed after is an invalid error naming it.
func eventPosition(r *http.Request, newest uint64) (uint64, error) {
	after := newest
	if v := r.URL.Query().Get("after"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, berth.Invalidf("after", "must be an event sequence number")
		}
		after = n
	}
	if n, err := strconv.ParseUint(r.Header.Get("Last-Event-ID"), 10, 64); err == nil {
		after = n
	}
	return after, nil
}

// resetEvent is the data of a reset event.
type resetEvent struct {
	After  uint64 `json:"after"`  // the position the client asked for
	Last   uint64 `json:"last"`   // the newest event of the server
	Reason string `json:"reason"` // the two in words
}

// writeReset writes the event that tells a client asking for the events
// after a position this server has not reached that the stream goes on in
// the server's numbering, from the oldest event it keeps. Its id is 0, so
// that a client reconnecting before the next event resumes from there too.
func writeReset(w io.Writer, after, last uint64) error {
	data, err := json.Marshal(resetEvent{After: after, Last: last, Reason: fmt.Sprintf(
		"asked for the events after %d, but the newest here is %d: the event numbering restarted "+
			"(the server restarted on SQLite, or this is another server); resuming from the oldest event kept", after, last)})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "id: 0\nevent: reset\ndata: %s\n\n", data)
	return err
}

// streamEvents writes the events after seq after that visible lets
// through as they come, and a keepalive comment after every
// EventKeepalive of silence, until ctx ends or a write fails.
func (s *Server) streamEvents(ctx context.Context, w io.Writer, flusher http.Flusher, after uint64, visible func(berth.Event) bool) {
	period := s.EventKeepalive
	if period <= 0 {
		period = DefaultEventKeepalive
	}
	quietUntil := time.Now().Add(period)
	for {
		rctx, cancel := context.WithDeadline(ctx, quietUntil)
		events, missed, _ := s.ctl.Bus().Read(rctx, after) // an error: ctx ended, or quietUntil passed with no event
		cancel()
		if ctx.Err() != nil {
			return
		}
		var n int
		var err error
		after, n, err = writeEvents(w, after, events, missed, visible)
		if err == nil && n == 0 && !time.Now().Before(quietUntil) {
			n, err = io.WriteString(w, ": keepalive\n\n")
		}
		if err != nil {
			return
		}
		if n > 0 {
			flusher.Flush()
			quietUntil = time.Now().Add(period)
		}
	}
}

// writeEvents writes a missed event when missed > 0 and the events that
// visible lets through, and returns the seq of the last of events (after
// when there are none) and the bytes written.
func writeEvents(w io.Writer, after uint64, events []berth.Event, missed uint64, visible func(berth.Event) bool) (uint64, int, error) {
	written := 0
	if missed > 0 {
		n, err := fmt.Fprintf(w, "event: missed\ndata: {\"missed\":%d}\n\n", missed)
		if written += n; err != nil {
			return after, written, err
		}
	}
	for _, e := range events {
		after = e.Seq
		if !visible(e) {
			continue
		}
		data, _ := json.Marshal(e)
		n, err := fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", e.Seq, e.Type, data)
		if written += n; err != nil {
			return after, written, err
		}
	}
	return after, written, nil
}

// eventFilter returns which events the request's identity may see: all of
// them for those who see every job; for users, those of their own jobs
// and those about no job and no other user.
func (s *Server) eventFilter(r *http.Request) func(berth.Event) bool {
	who := identity(r)
	if who.SeesAllJobs() {
		return func(berth.Event) bool { return true }
	}
	owned := map[string]bool{} // job id → the user's
	return func(e berth.Event) bool {
		if e.User != "" && e.User != who.Name {
			return false
		}
		if e.JobID == "" {
			return true
		}
		mine, known := owned[e.JobID]
		if !known {
			j, err := s.reads.Job(r.Context(), e.JobID)
			mine = err == nil && j.User == who.Name
			if len(owned) >= 1<<16 {
				clear(owned) // bounded: looked up again when seen again
			}
			owned[e.JobID] = mine
		}
		return mine
	}
}
