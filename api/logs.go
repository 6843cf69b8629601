package api

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"

	"github.com/berth-dev/berth"
)

const logReadSize = 256 << 10

// logs streams a job's output: every attempt in order, each after the
// first introduced by a header line of its own, "==> attempt 2 on HOST
// (ID) <=="; a gang's members each have one, naming their rank: "==>
// attempt 1, rank 0 on HOST (ID) <==". What comes before an attempt never
// depends on the attempts after it, so a client that lost the stream may
// ask again from the offset it has (offset=N skips the first N bytes).
// attempt=N (from 1) streams the N-th attempt's output alone, without a
// header (a gang's members keep theirs); 404 when the job has no such
// attempt and will make none it could follow. With follow=true it keeps
// streaming until the job (or that attempt) ends.
func (s *Server) logs(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	follow, err := boolQuery(r, "follow")
	if err != nil {
		writeError(w, r, err)
		return
	}
	download, err := boolQuery(r, "download")
	if err != nil {
		writeError(w, r, err)
		return
	}
	only, err := wholeQuery(r, "attempt", 0, "1 for the first attempt, 0 for all")
	if err != nil {
		writeError(w, r, err)
		return
	}
	skip, err := wholeQuery(r, "offset", 0, "bytes of the output to skip")
	if err != nil {
		writeError(w, r, err)
		return
	}
	records, err := recordsFormat(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if records && (only > 0 || skip > 0 || download) {
		writeError(w, r, berth.Invalidf("format", "records are sent for every attempt from the start: without attempt, offset or download"))
		return
	}
	ctx := r.Context()
	st := s.store
	j, err := s.ownJob(r, id, false)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if j.Cluster != "" && s.PeerLogs != nil { // handed to a federation peer: its output is there
		s.federatedLogs(w, r, j, follow, records, download)
		return
	}
	if records {
		s.logRecords(w, r, id, follow)
		return
	}
	if made := placements(j.AttemptList); only > 0 && only > made[len(made)-1] && (!follow || j.State.Terminal()) {
		writeError(w, r, berth.Errorf(berth.ECodeNotFound, "job %s has no attempt %d (it has %d)", id, only, made[len(made)-1]))
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if download { // a browser saves it as a file
		w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", id+".log"))
	}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	out := &skipWriter{w: w, skip: int64(skip)}
	gang := j.Nodes > 1
	var (
		index   int         // attempt row being read
		offset  int64       // within it
		headed  = -1        // the last row whose header is written
		midLine bool        // the last byte written was not a newline
		found   = only == 0 // index is at a row to stream
	)
	s.followJob(w, r, id, follow, func(job *berth.Job, attempts []*berth.Attempt, placement []int) bool {
		if !found {
			if index = slices.Index(placement[1:], only); index >= 0 {
				found = true
			} else {
				index = len(attempts) // not made yet
			}
		}
		for index < len(attempts) {
			a := attempts[index]
			if (gang || (only == 0 && index > 0)) && headed < index {
				writeAttemptHeader(out, placement[index+1], gang, a, midLine)
				headed, midLine = index, false
			}
			for {
				data, err := st.Logs(ctx, a.ID, offset, logReadSize)
				if err != nil {
					return true
				}
				if len(data) == 0 {
					break
				}
				if _, err := out.Write(data); err != nil {
					return true
				}
				offset += int64(len(data))
				midLine = data[len(data)-1] != '\n'
			}
			if index == len(attempts)-1 && !a.State.Terminal() {
				break // the live attempt: wait for more
			}
			if only > 0 && (index+1 == len(attempts) || placement[index+2] != only) {
				return true // every member of the attempt asked for has ended
			}
			index, offset = index+1, 0
		}
		return job.State.Terminal() && index >= len(attempts)
	})
}

// followJob calls send with job id, its attempts and their placements
// (see placements) as they are now, then flushes what it wrote; with
// follow, it does so again each time output is stored or a job ends,
// until send reports that it is done (the job has ended and all is sent,
// or it cannot go on), reading fails or the client leaves.
func (s *Server) followJob(w http.ResponseWriter, r *http.Request, id string, follow bool,
	send func(job *berth.Job, attempts []*berth.Attempt, placement []int) (done bool)) {
	ctx := r.Context()
	flusher, _ := w.(http.Flusher)
	for {
		notify := s.ctl.LogNotify() // before reading, so nothing stored after the read is missed
		job, err := s.store.Job(ctx, id)
		if err != nil {
			return
		}
		attempts, err := s.store.Attempts(ctx, id)
		if err != nil {
			return
		}
		done := send(job, attempts, placements(attempts))
		if flusher != nil {
			flusher.Flush()
		}
		if done || !follow {
			return
		}
		select {
		case <-notify:
		case <-ctx.Done():
			return
		}
	}
}

// recordsFormat reports whether the logs are asked for as records
// (format=records) rather than text (format empty or text).
func recordsFormat(r *http.Request) (bool, error) {
	switch f := r.URL.Query().Get("format"); f {
	case "", "text":
		return false, nil
	case "records":
		return true, nil
	default:
		return false, berth.Invalidf("format", "%q is not a logs format: text or records", f)
	}
}

// logRecords streams job id's output as berth.LogRecords, one JSON object
// a line: each chunk as it was stored, with its attempt, rank, placement
// and stream. A gang's members are sent side by side, each record as soon
// as it is stored (not one member after the other, as text is); records of
// one attempt come in offset order. With follow it keeps streaming until
// the job ends.
func (s *Server) logRecords(w http.ResponseWriter, r *http.Request, id string, follow bool) {
	ctx := r.Context()
	st := s.store
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	enc := json.NewEncoder(w)
	sent := map[string]int64{} // bytes sent of each attempt's output
	ended := map[string]bool{} // attempts whose whole output is sent
	s.followJob(w, r, id, follow, func(job *berth.Job, attempts []*berth.Attempt, placement []int) bool {
		for i, a := range attempts {
			if ended[a.ID] {
				continue
			}
			terminal := a.State.Terminal() // read before its output: then the output is whole
			for {
				chunks, err := st.LogChunks(ctx, a.ID, sent[a.ID], logReadSize)
				if err != nil {
					return true
				}
				if len(chunks) == 0 {
					break
				}
				for _, c := range chunks {
					rec := berth.LogRecord{AttemptID: a.ID, Rank: a.TaskIndex, Placement: placement[i+1],
						Stream: c.Stream, Offset: c.Offset, Data: c.Data}
					if err := enc.Encode(&rec); err != nil {
						return true
					}
					sent[a.ID] = c.Offset + int64(len(c.Data))
				}
			}
			ended[a.ID] = terminal
		}
		return job.State.Terminal()
	})
}

// placements numbers a job's attempt rows by the placement each belongs
// to, from 1: a new placement begins at each rank 0, and a gang's members
// share theirs. It returns one more entry than there are rows: the count
// of placements before the first row (0), then each row's. The last entry
// is the count of placements.
func placements(attempts []*berth.Attempt) []int {
	out := make([]int, len(attempts)+1)
	for i, a := range attempts {
		out[i+1] = out[i]
		if a.TaskIndex == 0 || i == 0 {
			out[i+1]++
		}
	}
	return out
}

// skipWriter drops the first skip bytes written to it, and writes the
// rest to w.
type skipWriter struct {
	w    io.Writer
	skip int64
}

func (s *skipWriter) Write(p []byte) (int, error) {
	n := len(p)
	if s.skip >= int64(n) {
		s.skip -= int64(n)
		return n, nil
	}
	_, err := s.w.Write(p[s.skip:])
	s.skip = 0
	return n, err
}

// writeAttemptHeader introduces the output of attempt row a, of the
// given placement, on a line of its own: after a newline when the output
// before it ended mid-line. A gang member's header names its rank.
func writeAttemptHeader(w io.Writer, placement int, gang bool, a *berth.Attempt, midLine bool) {
	if midLine {
		fmt.Fprintln(w)
	}
	if gang {
		fmt.Fprintf(w, "==> attempt %d, rank %d on %s (%s) <==\n", placement, a.TaskIndex, a.Host, a.ID)
		return
	}
	fmt.Fprintf(w, "==> attempt %d on %s (%s) <==\n", placement, a.Host, a.ID)
}
