package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/berth-dev/berth"
)

// PeerLogs reads the output of a job handed to a federation peer from
// that peer: the federation manager, which holds the peers' addresses and
// tokens.
type PeerLogs interface {
	// OpenLogs asks peer for the output of its job remoteID with query as
	// GET /api/v1/jobs/{id}/logs takes it, and returns the answer, whose
	// body the caller reads and closes; a refusal is a *berth.Error.
	OpenLogs(ctx context.Context, peer, remoteID string, query url.Values) (*http.Response, error)
}

// handoffPoll is how often a federated job's logs, followed before the
// peer acknowledged the job, look again for its acknowledgement.
const handoffPoll = time.Second

// federatedLogs streams the output of j, a job handed to a federation
// peer, from that peer: GET /api/v1/jobs/{id}/logs of the peer's job,
// with the request's query (follow, attempt, offset, format) and the peer
// token, each chunk flushed as it arrives, so that a client never needs
// the peer's address or credential. The handle read is the job's latest
// that the peer acknowledged; following a job not yet acknowledged waits
// for that (no output before). A peer that stops answering mid-stream
// aborts the response, so that a following client asks again from where
// it was rather than taking the end for the job's.
func (s *Server) federatedLogs(w http.ResponseWriter, r *http.Request, j *berth.JobDetail, follow, records, download bool) {
	ctx := r.Context()
	h := acknowledged(j.Handoffs)
	for h == nil && follow && !j.State.Terminal() {
		select {
		case <-ctx.Done():
			return
		case <-time.After(handoffPoll):
		}
		var err error
		if j, err = s.ownJob(r, j.ID, false); err != nil {
			writeError(w, r, err)
			return
		}
		h = acknowledged(j.Handoffs)
	}
	if h == nil { // no peer ever took it: no output
		w.Header().Set("Content-Type", logsType(records))
		w.WriteHeader(http.StatusOK)
		return
	}
	resp, err := s.PeerLogs.OpenLogs(ctx, h.Peer, h.RemoteJobID, r.URL.Query())
	if err != nil {
		writeError(w, r, err)
		return
	}
	defer resp.Body.Close()
	w.Header().Set("Content-Type", logsType(records))
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if download {
		w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", j.ID+".log"))
	}
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return // the client left
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, io.EOF) {
				s.log.Warn("federated job's logs: the peer's stream broke", "job", j.ID, "peer", h.Peer, "err", err)
				panic(http.ErrAbortHandler)
			}
			return
		}
	}
}

// acknowledged returns the latest (by incarnation) of handles whose peer
// acknowledged the job, nil when none did.
func acknowledged(handles []*berth.Handoff) *berth.Handoff {
	var last *berth.Handoff
	for _, h := range handles {
		if h.RemoteJobID != "" && (last == nil || h.Incarnation > last.Incarnation) {
			last = h
		}
	}
	return last
}

// logsType is the Content-Type of the logs: records or text.
func logsType(records bool) string {
	if records {
		return "application/x-ndjson"
	}
	return "text/plain; charset=utf-8"
}
