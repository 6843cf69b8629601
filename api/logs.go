package api

import (
	"fmt"
	"net/http"
)

const logReadSize = 256 << 10

// logs streams a job's output: every attempt in order, each introduced by a
// header line when there is more than one. With follow=true it keeps
// streaming until the job ends.
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
		index  int   // attempt being read
		offset int64 // within it
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
			if offset == 0 && len(attempts) > 1 {
				fmt.Fprintf(w, "==> attempt %d of %d on %s (%s) <==\n", index+1, len(attempts), a.Host, a.ID)
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
