package api

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/store"
)

// forwardedHeader marks a request a standby forwarded, so that a request
// is forwarded at most once.
const forwardedHeader = "Berth-Forwarded-By"

// reader is what the read endpoints a standby also serves need: the
// controller on the leader, the store on a standby.
type reader interface {
	Jobs(ctx context.Context, f store.JobFilter) ([]*berth.Job, error)
	JobHosts(ctx context.Context, ids []string) (map[string]string, error)
	Job(ctx context.Context, id string) (*berth.JobDetail, error)
	Quotas(ctx context.Context) ([]*berth.QuotaRule, error)
}

// storeReads answers reads from the store, as a standby does.
type storeReads struct{ store.JobReader }

// Job reads a job and its attempts; a pending job's reason is the one
// stored (only the leader's scheduler can explain it further).
func (r storeReads) Job(ctx context.Context, id string) (*berth.JobDetail, error) {
	return store.JobDetail(ctx, r.JobReader, id)
}

// Standby is the HTTP face of a server waiting to lead. It reads job
// listings, jobs and quota rules from the database itself (GET
// /api/v1/jobs, /api/v1/jobs/{id}, /api/v1/quotas), and answers GET
// /healthz with {"status":"standby","leader":URL}. Other requests are
// forwarded to the leader, streams included; the agent WebSocket is not
// (agents connect to the leader themselves). What cannot be forwarded — no
// leader yet, the leader unreachable, an agent, a request already
// forwarded once — is a 503 naming the leader in the body and in
// berth.LeaderHeader. leader returns the leader's URL ("" when none is
// known); self is this server's URL. Requests are admitted as by New
// before they are answered or forwarded; a forwarded request carries
// X-Forwarded-For, so the leader admits it by its token only. Each answer
// carries a request id as New's do; a forwarded one, the leader's. log
// gets what PublicError logs (nil: discarded).
func Standby(st store.JobReader, leader func(context.Context) (string, error), self string, sec *Security, log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{reads: storeReads{st}, sec: sec, log: log, mux: http.NewServeMux()}
	s.readRoutes()
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		lead, err := leader(r.Context())
		if err != nil {
			writeError(w, r, berth.Errorf(berth.ECodeUnavailable, "this server is a standby and cannot read who leads").WithCause(err))
			return
		}
		if r.Method == http.MethodGet && r.URL.Path == "/healthz" {
			status := "standby"
			if lead == self {
				status = "starting" // it leads and is loading the store
			}
			writeJSON(w, http.StatusOK, map[string]string{"status": status, "leader": lead})
			return
		}
		target, perr := url.Parse(lead)
		if lead == "" || lead == self || perr != nil || r.URL.Path == "/api/v1/agent" || r.Header.Get(forwardedHeader) != "" {
			unavailable(w, r, lead, self)
			return
		}
		proxy := &httputil.ReverseProxy{
			Rewrite: func(pr *httputil.ProxyRequest) {
				pr.SetURL(target)
				pr.SetXForwarded() // the leader must not take it for a loopback client of its own
				pr.Out.Header.Set(forwardedHeader, self)
			},
			FlushInterval: -1, // logs -f and events stream as they come
			ModifyResponse: func(resp *http.Response) error {
				if resp.Header.Get(berth.RequestIDHeader) != "" {
					w.Header().Del(berth.RequestIDHeader) // the leader's id names its log lines
				}
				return nil
			},
			ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
				requestLog(r).Warn("forward to the leader", "leader", lead, "err", err)
				unavailable(w, r, lead, self)
			},
		}
		proxy.ServeHTTP(w, r)
	})
	return s
}

// unavailable answers 503 naming the leader, for the client to go there;
// where the leader is this server itself (self), it has taken the lead
// and is still loading the store, and says so.
func unavailable(w http.ResponseWriter, r *http.Request, lead, self string) {
	w.Header().Set(berth.LeaderHeader, lead)
	msg := "this server is a standby; no server leads yet"
	switch lead {
	case "":
	case self:
		msg = "this server leads and is starting: it is loading the store; try again in a moment"
	default:
		msg = "this server is a standby; the leader is " + lead
	}
	writeError(w, r, berth.Errorf(berth.ECodeUnavailable, "%s", msg))
}
