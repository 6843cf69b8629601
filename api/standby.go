package api

import (
	"context"
	"net/http"

	"github.com/berth-dev/berth"
)

// Standby is the HTTP face of a server waiting to lead: GET /healthz
// answers 200 {"status":"standby","leader":URL}; every other request,
// the agent WebSocket included, 503 naming the leader in the body and in
// berth.LeaderHeader. leader returns the leader's URL ("" when none is known).
func Standby(leader func(context.Context) (string, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		url, err := leader(r.Context())
		if err != nil {
			writeError(w, berth.Errorf(berth.ECodeUnavailable, "this server is a standby and cannot read who leads: %v", err))
			return
		}
		if r.Method == http.MethodGet && r.URL.Path == "/healthz" {
			writeJSON(w, http.StatusOK, map[string]string{"status": "standby", "leader": url})
			return
		}
		w.Header().Set(berth.LeaderHeader, url)
		msg := "this server is a standby; no server leads yet"
		if url != "" {
			msg = "this server is a standby; the leader is " + url
		}
		writeError(w, berth.Errorf(berth.ECodeUnavailable, "%s", msg))
	})
}
