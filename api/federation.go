package api

import (
	"net/http"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/auth"
)

// The peer side of federation (docs/federation.md): the endpoints an
// origin calls with a token of role peer, whose name is the origin's name
// here. Ingress is default-deny: every other role gets 403.

// isPeer reports whether id is a federation peer's credential.
func isPeer(id auth.Identity) bool { return id.Role == auth.RolePeer }

// federationRoutes registers the endpoints a federation origin calls.
func (s *Server) federationRoutes() {
	s.route("POST /api/v1/federation/handoffs", isPeer, "peer", s.receiveHandoff)
	s.route("POST /api/v1/federation/cancels", isPeer, "peer", s.cancelReceived)
	s.route("GET /api/v1/federation/capacity", isPeer, "peer", s.peerCapacity)
}

// receiveHandoff creates the job an origin hands over: 201, or 200 with
// duplicate set for a repeat of the same (remote id, nonce).
func (s *Server) receiveHandoff(w http.ResponseWriter, r *http.Request) {
	req := berth.HandoffRequest{Job: berth.DefaultJobSpec()}
	if err := decode(r, &req); err != nil {
		writeError(w, r, err)
		return
	}
	resp, err := s.ctl.ReceiveHandoff(r.Context(), identity(r).Name, &req)
	if err != nil {
		writeError(w, r, err)
		return
	}
	status := http.StatusCreated
	if resp.Duplicate {
		status = http.StatusOK
	}
	writeJSON(w, status, resp)
}

// cancelReceived cancels a job the origin handed over; 404 when this
// cluster does not know it.
func (s *Server) cancelReceived(w http.ResponseWriter, r *http.Request) {
	var req berth.FederationCancel
	if err := decode(r, &req); err != nil {
		writeError(w, r, err)
		return
	}
	resp, err := s.ctl.CancelReceived(r.Context(), identity(r).Name, &req)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// peerCapacity answers the capability heartbeat.
func (s *Server) peerCapacity(w http.ResponseWriter, r *http.Request) {
	c, err := s.ctl.PeerCapacity(r.Context())
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, c)
}
