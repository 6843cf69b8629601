package web

import (
	"net/http"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/api"
)

// peers lists the federation peers with their live status, as berth
// peers does (admins only, as GET /api/v1/peers).
func (h *Handler) peers(r *http.Request) (string, any, error) {
	list, err := h.cfg.Ctl.Peers(r.Context())
	if err != nil {
		return "", nil, err
	}
	out := make([]*berth.PeerInfo, len(list))
	for i, p := range list {
		out[i] = api.PeerInfo(p, h.cfg.PeerStatuses)
	}
	return "", out, nil
}
