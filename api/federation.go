package api

import (
	"net/http"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/auth"
	"github.com/berth-dev/berth/federation"
)

// The peer side of federation (docs/federation.md): the endpoints an
// origin calls with a token of role peer, whose name is the origin's name
// here. Ingress is default-deny: every other role gets 403.

// isPeer reports whether id is a federation peer's credential.
func isPeer(id auth.Identity) bool { return id.Role == auth.RolePeer }

// federationRoutes registers the endpoints a federation origin calls.
func (s *Server) federationRoutes() {
	s.route("POST /api/v1/federation/handoffs", isPeer, "peer", s.receiveHandoff)
	s.route("GET /api/v1/federation/changes", isPeer, "peer", s.federationChanges)
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

// federationChanges answers a changes pull: ?cursor=EPOCH.SEQ.TAG (none:
// a full resync) and ?limit=N rows at most (default and most: those of
// federation.Answer).
func (s *Server) federationChanges(w http.ResponseWriter, r *http.Request) {
	cursor, err := federation.ParseCursor(r.URL.Query().Get("cursor"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	limit, err := wholeQuery(r, "limit", federation.DefaultLimit, "rows of changes")
	if err != nil {
		writeError(w, r, err)
		return
	}
	ch, err := s.ctl.Changes(r.Context(), identity(r).Name, cursor, limit)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ch)
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
