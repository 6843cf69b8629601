package api

import (
	"net/http"

	"github.com/berth-dev/berth"
)

// putControl sets the desired state of one queue of the host in the path
// (every queue when the body names none).
func (s *Server) putControl(w http.ResponseWriter, r *http.Request) {
	host := r.PathValue("host")
	if err := berth.ValidHost("host", host); err != nil {
		writeError(w, r, err)
		return
	}
	var req berth.ControlRequest
	if err := decode(r, &req); err != nil {
		writeError(w, r, err)
		return
	}
	if req.RequestedBy == "" {
		req.RequestedBy = identity(r).Name // the event's actor is the identity either way
	}
	resp, err := s.ctl.SetWorkerControl(r.Context(), host, req)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

func (s *Server) getControl(w http.ResponseWriter, r *http.Request) {
	list, err := s.ctl.WorkerControls(r.Context(), r.PathValue("host"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, berth.ControlList{Controls: list})
}
