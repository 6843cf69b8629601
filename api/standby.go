package api

import (
	"context"
	"net/http"
	"net/http/httputil"
	"net/url"

	"github.com/berth-dev/berth"
)

// forwardedHeader marks a request a standby forwarded, so that a request
// is forwarded at most once.
const forwardedHeader = "Berth-Forwarded-By"

// Standby is the HTTP face of a server waiting to lead. GET /healthz
// answers 200 {"status":"standby","leader":URL}. Other requests are
// forwarded to the leader, streams included, so a client pointed at a
// standby is served; the agent WebSocket is not (agents connect to the
// leader themselves). What cannot be forwarded — no leader yet, the
// leader unreachable, an agent, a request already forwarded once — is a
// 503 naming the leader in the body and in berth.LeaderHeader. leader
// returns the leader's URL ("" when none is known); self is this server's.
func Standby(leader func(context.Context) (string, error), self string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lead, err := leader(r.Context())
		if err != nil {
			writeError(w, berth.Errorf(berth.ECodeUnavailable, "this server is a standby and cannot read who leads: %v", err))
			return
		}
		if r.Method == http.MethodGet && r.URL.Path == "/healthz" {
			writeJSON(w, http.StatusOK, map[string]string{"status": "standby", "leader": lead})
			return
		}
		target, perr := url.Parse(lead)
		if lead == "" || lead == self || perr != nil || r.URL.Path == "/api/v1/agent" || r.Header.Get(forwardedHeader) != "" {
			unavailable(w, lead)
			return
		}
		proxy := &httputil.ReverseProxy{
			Rewrite: func(pr *httputil.ProxyRequest) {
				pr.SetURL(target)
				pr.Out.Header.Set(forwardedHeader, self)
			},
			FlushInterval: -1, // logs -f and events stream as they come
			ErrorHandler:  func(w http.ResponseWriter, _ *http.Request, _ error) { unavailable(w, lead) },
		}
		proxy.ServeHTTP(w, r)
	})
}

// unavailable answers 503 naming the leader, for the client to go there.
func unavailable(w http.ResponseWriter, lead string) {
	w.Header().Set(berth.LeaderHeader, lead)
	msg := "this server is a standby; no server leads yet"
	if lead != "" {
		msg = "this server is a standby; the leader is " + lead
	}
	writeError(w, berth.Errorf(berth.ECodeUnavailable, "%s", msg))
}
