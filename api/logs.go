package api

import (
	"fmt"
	"io"
	"net/http"

	"github.com/berth-dev/berth"
)

const logReadSize = 256 << 10

// logs streams a job's output: every attempt in order, each after the
// first introduced by a header line of its own, "==> attempt 2 on HOST
// (ID) <==". What comes before an attempt never depends on the attempts
// after it, so a client that lost the stream may ask again and skip what
// it has. With follow=true it keeps streaming until the job ends.
func (s *Server) logs(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	follow, err := boolQuery(r, "follow")
	if err != nil {
		writeError(w, err)
		return
	}
	download, err := boolQuery(r, "download")
	if err != nil {
		writeError(w, err)
		return
	}
	ctx := r.Context()
	st := s.ctl.Store()
	if _, err := s.ownJob(r, id, false); err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if download { // a browser saves it as a file
		w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", id+".log"))
	}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	flusher, _ := w.(http.Flusher)
	var (
		index   int   // attempt being read
		offset  int64 // within it
		headed  int   // the last attempt whose header is written
		midLine bool  // the last byte written was not a newline
	)
	for {
		notify := s.ctl.LogNotify() // before reading, so nothing stored after the read is missed
		job, err := st.Job(ctx, id)
		if err != nil {
			return
		}
		attempts, err := st.Attempts(ctx, id)
		if err != nil {
			return
		}
		for index < len(attempts) {
			a := attempts[index]
			if index > 0 && headed < index {
				writeAttemptHeader(w, index, a, midLine)
				headed, midLine = index, false
			}
			for {
				data, err := st.Logs(ctx, a.ID, offset, logReadSize)
				if err != nil {
					return
				}
				if len(data) == 0 {
					break
				}
				if _, err := w.Write(data); err != nil {
					return
				}
				offset += int64(len(data))
				midLine = data[len(data)-1] != '\n'
			}
			if index == len(attempts)-1 && !a.State.Terminal() {
				break // the live attempt: wait for more
			}
			index, offset = index+1, 0
		}
		if flusher != nil {
			flusher.Flush()
		}
		if !follow || (job.State.Terminal() && index >= len(attempts)) {
			return
		}
		select {
		case <-notify:
		case <-ctx.Done():
			return
		}
	}
}

// writeAttemptHeader introduces the output of attempt a, the index-th of
// its job, on a line of its own: after a newline when the output before
// it ended mid-line.
func writeAttemptHeader(w io.Writer, index int, a *berth.Attempt, midLine bool) {
	if midLine {
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "==> attempt %d on %s (%s) <==\n", index+1, a.Host, a.ID)
}
