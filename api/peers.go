package api

import (
	"net/http"

	"github.com/berth-dev/berth"
)

// PeerStatuses is the live view of the federation peers, kept by the
// federation manager.
type PeerStatuses interface {
	// Status returns what is known of the peer name now; a peer the
	// manager has not heard of has the zero PeerStatus (state new).
	Status(name string) berth.PeerStatus
}

// PeerInfo returns p, its token cleared, with its live status as
// statuses says: state new when statuses is nil or knows nothing of p (the
// dashboard shows peers with it too).
func PeerInfo(p *berth.Peer, statuses PeerStatuses) *berth.PeerInfo {
	var st berth.PeerStatus
	if statuses != nil {
		st = statuses.Status(p.Name)
	}
	if st.State == "" {
		st.State = berth.PeerNew
	}
	p.Token = ""
	return &berth.PeerInfo{Peer: p, Status: st}
}

func (s *Server) listPeers(w http.ResponseWriter, r *http.Request) {
	peers, err := s.ctl.Peers(r.Context())
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := berth.PeerList{Peers: make([]*berth.PeerInfo, len(peers))}
	for i, p := range peers {
		out.Peers[i] = PeerInfo(p, s.PeerStatuses)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getPeer(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	peers, err := s.ctl.Peers(r.Context())
	if err != nil {
		writeError(w, r, err)
		return
	}
	for _, p := range peers {
		if p.Name == name {
			writeJSON(w, http.StatusOK, PeerInfo(p, s.PeerStatuses))
			return
		}
	}
	writeError(w, r, &berth.Error{Code: berth.ECodeNotFound, Field: "name", Message: "no peer " + name})
}

// putPeer adds or changes the peer named by the path from a berth.Peer.
// The body may repeat the name but not contradict it; created_at and
// updated_at are the server's to set. A body without a token keeps the
// stored one. It answers the peer as stored, without its token.
func (s *Server) putPeer(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var p berth.Peer
	if err := decode(r, &p); err != nil {
		writeError(w, r, err)
		return
	}
	if p.Name != "" && p.Name != name {
		writeError(w, r, berth.Invalidf("name", "%q differs from the path's peer %q", p.Name, name))
		return
	}
	p.Name = name
	if err := s.ctl.PutPeer(r.Context(), &p); err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, PeerInfo(&p, s.PeerStatuses))
}

// deletePeer removes a peer: 204; 409 while it holds active jobs, unless
// ?force=true.
func (s *Server) deletePeer(w http.ResponseWriter, r *http.Request) {
	force, err := boolQuery(r, "force")
	if err == nil {
		err = s.ctl.DeletePeer(r.Context(), r.PathValue("name"), force)
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
