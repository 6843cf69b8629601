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
// after it, so a client that lost the stream may ask again from the
// offset it has (offset=N skips the first N bytes). attempt=N (from 1)
// streams the N-th attempt's output alone, without a header; 404 when
// the job has no such attempt and will make none it could follow. With
// follow=true it keeps streaming until the job (or that attempt) ends.
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
	only, err := wholeQuery(r, "attempt", 0, "1 for the first attempt, 0 for all")
	if err != nil {
		writeError(w, err)
		return
	}
	skip, err := wholeQuery(r, "offset", 0, "bytes of the output to skip")
	if err != nil {
		writeError(w, err)
		return
	}
	ctx := r.Context()
	st := s.ctl.Store()
	j, err := s.ownJob(r, id, false)
	if err != nil {
		writeError(w, err)
		return
	}
	if only > 0 && only > len(j.AttemptList) && (!follow || j.State.Terminal()) {
		writeError(w, berth.Errorf(berth.ECodeNotFound, "job %s has no attempt %d (it has %d)", id, only, len(j.AttemptList)))
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if download { // a browser saves it as a file
		w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", id+".log"))
	}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	flusher, _ := w.(http.Flusher)
	out := &skipWriter{w: w, skip: int64(skip)}
	var (
		index   int   // attempt being read
		offset  int64 // within it
		headed  int   // the last attempt whose header is written
		midLine bool  // the last byte written was not a newline
	)
	if only > 0 {
		index, headed = only-1, only-1
	}
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
				writeAttemptHeader(out, index, a, midLine)
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
				if _, err := out.Write(data); err != nil {
					return
				}
				offset += int64(len(data))
				midLine = data[len(data)-1] != '\n'
			}
			if index == len(attempts)-1 && !a.State.Terminal() {
				break // the live attempt: wait for more
			}
			if index+1 == only {
				return // the attempt asked for has ended
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

// writeAttemptHeader introduces the output of attempt a, the index-th of
// its job, on a line of its own: after a newline when the output before
// it ended mid-line.
func writeAttemptHeader(w io.Writer, index int, a *berth.Attempt, midLine bool) {
	if midLine {
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "==> attempt %d on %s (%s) <==\n", index+1, a.Host, a.ID)
}
