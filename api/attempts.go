package api

import "net/http"

// attemptValid answers GET /api/v1/attempts/{id}/valid: 200 with whether
// the attempt may still act for its job (berth.AttemptValidity; valid
// false is an answer, not an error), 404 for an unknown attempt. Whoever
// may read the job may ask.
func (s *Server) attemptValid(w http.ResponseWriter, r *http.Request) {
	v, err := s.ctl.AttemptValidity(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	if who := identity(r); !who.SeesAllJobs() {
		j, err := s.store.Job(r.Context(), v.JobID)
		if err == nil {
			err = checkOwner(who, j, false)
		}
		if err != nil {
			writeError(w, r, err)
			return
		}
	}
	writeJSON(w, http.StatusOK, v)
}
