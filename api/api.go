// Package api serves Berth's HTTP interface: JSON REST under /api/v1, the
// agent WebSocket, server-sent events, /healthz and /metrics. It is the only
// place error codes become HTTP statuses.
package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/arbiter"
	"github.com/berth-dev/berth/auth"
	"github.com/berth-dev/berth/contract"
	"github.com/berth-dev/berth/controller"
	"github.com/berth-dev/berth/gateway"
	"github.com/berth-dev/berth/internal/strict"
	"github.com/berth-dev/berth/store"
	"github.com/berth-dev/berth/webhook"
	"github.com/berth-dev/berth/wire"
)

// MaxBody is the largest request body accepted.
const MaxBody = 1 << 20

// MaxDiscard is how much of a body over MaxBody the server reads, and
// throws away, before it answers 413: a client that sends up to this much
// receives the answer; beyond it the server closes the connection.
const MaxDiscard = 32 * MaxBody

// Server is the HTTP front of a controller.
type Server struct {
	// Leader, when set, is this server's URL, reported by /healthz: it
	// leads the servers sharing its store.
	Leader string
	// Web, when set, serves every path outside the API (/api/, /metrics,
	// /healthz): the dashboard, with the requests already admitted but
	// for LoginPath and StaticPath.
	Web http.Handler
	// Swapper runs seed 000's model swaps over the server's catalog; nil:
	// no catalog, the swap endpoints answer 404.
	Swapper *arbiter.Swapper
	// Webhooks manages and delivers the webhook subscriptions; nil: the
	// webhook endpoints answer 404.
	Webhooks *webhook.Dispatcher
	// PeerStatuses, when set, is the federation peers' live status,
	// shown by GET /api/v1/peers; nil: every peer is new.
	PeerStatuses PeerStatuses
	// PeerLogs, when set, reads the output of a job handed to a federation
	// peer from that peer; nil: such a job shows no output here.
	PeerLogs PeerLogs
	// Pools manages the cloud pools, their instances and the host
	// records; nil: those endpoints answer 404.
	Pools *Pools
	// Backends manages the execution backends (Kubernetes clusters);
	// nil: those endpoints answer 404.
	Backends *Backends
	// Contracts holds the extraction contracts; nil: the
	// /api/v1/contracts endpoints answer 404.
	Contracts *contract.Registry
	// Gateway, when set, serves the OpenAI-compatible routes under /v1/
	// (docs/gateway.md), authenticating with GatewayCaller; nil: they
	// answer 404.
	Gateway *gateway.Gateway
	// EventKeepalive is how long the event stream may be silent before it
	// sends a keepalive comment, so that proxies keep it open; 0 means
	// DefaultEventKeepalive.
	EventKeepalive time.Duration

	ids   berth.IDGen // request ids
	ctl   *controller.Controller
	store Store
	reads reader // the controller; a standby's store
	sec   *Security
	log   *slog.Logger
	mux   *http.ServeMux
	// streams are the exec and port-forward streams agents are to dial.
	streams streams
}

// Store is what the API reads and writes in the store itself rather than
// through the controller: job output (read with the job and its attempts),
// the swap lock and the schedule registry. It is ctl's store; store.Store
// is one.
type Store interface {
	store.JobReader
	store.LogReader
	arbiter.LockStore
	arbiter.ScheduleStore
}

// New returns a server for ctl, whose store st is, that admits requests as
// sec says: every request but GET /healthz must authenticate, and each
// route allows the roles docs/security.md lists.
func New(ctl *controller.Controller, st Store, sec *Security, log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{ctl: ctl, store: st, reads: ctl, sec: sec, log: log, mux: http.NewServeMux()}
	s.mux.HandleFunc("GET /healthz", s.healthz)
	s.readRoutes()
	s.route("GET /metrics", auth.Identity.SeesAllJobs, "viewer, operator or admin", s.metrics)
	s.route("POST /api/v1/jobs", auth.Identity.CanSubmit, submitters, s.submit)
	s.route("POST /api/v1/jobs/{id}/cancel", auth.Identity.CanSubmit, submitters, s.cancel)
	s.route("POST /api/v1/jobs/cancel", auth.Identity.CanSubmit, submitters, s.cancelMatching)
	s.streamRoutes()
	s.route("GET /api/v1/jobs/{id}/logs", readsReceived, jobReader, s.logs)
	s.route("GET /api/v1/attempts/{id}/valid", readsJobs, people, s.attemptValid)
	s.route("POST /api/v1/wait", readsJobs, people, s.wait)
	s.route("GET /api/v1/workers", readsCluster, jobReader, s.workers)
	s.route("GET /api/v1/workers/{host}/control", readsCluster, jobReader, s.getControl)
	s.route("PUT /api/v1/workers/{host}/control", auth.Identity.ActsOnAllJobs, operators, s.putControl)
	s.route("PUT /api/v1/quotas/{id}", auth.Identity.ActsOnAllJobs, operators, s.putQuota)
	s.route("DELETE /api/v1/quotas/{id}", auth.Identity.ActsOnAllJobs, operators, s.deleteQuota)
	s.route("GET /api/v1/events", auth.Identity.IsPerson, people, s.events)
	s.route("GET /api/v1/services", readsJobs, people, s.services)
	s.route("GET /api/v1/endpoints", readsJobs, people, s.endpoints)
	s.route("POST /api/v1/tokens", auth.Identity.IsAdmin, "admin", s.createToken)
	s.route("GET /api/v1/tokens", auth.Identity.IsAdmin, "admin", s.listTokens)
	s.route("DELETE /api/v1/tokens/{id}", auth.Identity.IsAdmin, "admin", s.revokeToken)
	s.route("PUT /api/v1/secrets/{name}", auth.Identity.HoldsSecrets, holders, s.putSecret)
	s.route("GET /api/v1/secrets", auth.Identity.HoldsSecrets, holders, s.listSecrets)
	s.route("DELETE /api/v1/secrets/{name}", auth.Identity.HoldsSecrets, holders, s.deleteSecret)
	s.route("GET /api/swap/lock", readsCluster, jobReader, s.getSwapLock)
	s.route("POST /api/swap/lock", auth.Identity.ActsOnAllJobs, operators, s.acquireSwapLock)
	s.route("DELETE /api/swap/lock", auth.Identity.ActsOnAllJobs, operators, s.releaseSwapLock)
	s.route("GET /api/schedule", readsCluster, jobReader, s.listSchedules)
	s.route("POST /api/schedule", auth.Identity.ActsOnAllJobs, operators, s.putSchedule)
	s.route("DELETE /api/schedule/{id}", auth.Identity.ActsOnAllJobs, operators, s.deleteSchedule)
	s.route("POST /api/swap", auth.Identity.ActsOnAllJobs, operators, s.startSwap)
	s.route("GET /api/swap/{id}", readsCluster, jobReader, s.getSwap)
	s.route("POST /api/swap/{key}/validate", readsCluster, jobReader, s.validateSwap)
	s.route("GET /api/v1/catalog", readsCluster, jobReader, s.catalog)
	s.route("PUT /api/v1/catalog/models/{key}", auth.Identity.ActsOnAllJobs, operators, s.putCatalogModel)
	s.route("DELETE /api/v1/catalog/models/{key}", auth.Identity.ActsOnAllJobs, operators, s.deleteCatalogModel)
	s.route("POST /api/v1/webhooks", auth.Identity.IsAdmin, "admin", s.createWebhook)
	s.route("GET /api/v1/webhooks", auth.Identity.ActsOnAllJobs, operators, s.listWebhooks)
	s.route("DELETE /api/v1/webhooks/{id}", auth.Identity.IsAdmin, "admin", s.deleteWebhook)
	s.route("GET /api/v1/webhooks/{id}/deliveries", auth.Identity.ActsOnAllJobs, operators, s.listDeliveries)
	s.route("POST /api/v1/deliveries/{id}/redeliver", auth.Identity.IsAdmin, "admin", s.redeliver)
	s.route("GET /api/v1/peers", auth.Identity.IsAdmin, "admin", s.listPeers)
	s.route("GET /api/v1/peers/{name}", auth.Identity.IsAdmin, "admin", s.getPeer)
	s.route("PUT /api/v1/peers/{name}", auth.Identity.IsAdmin, "admin", s.putPeer)
	s.route("DELETE /api/v1/peers/{name}", auth.Identity.IsAdmin, "admin", s.deletePeer)
	s.route("POST /api/v1/agents/join", isJoinToken, "an agent join token", s.join)
	s.federationRoutes()
	s.poolRoutes()
	s.backendRoutes()
	s.contractRoutes()
	s.route("GET "+AgentBinaryPath, isAgent, "an agent credential or join token", s.agentBinary)
	s.route("GET /api/v1/agent", speaksAgent, "an agent credential (berth agent --join-token) or admin", s.agent)
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, r, berth.Errorf(berth.ECodeNotFound, "no such endpoint: %s %s", r.Method, r.URL.Path))
	})
	return s
}

// Who may call a route, as its 403 says.
const (
	people     = "viewer, user, operator or admin"
	jobReader  = "viewer, user, operator, admin or peer"
	submitters = "user, operator or admin"
	holders    = "user, operator or admin"
	operators  = "operator or admin"
)

// readRoutes registers the reads a standby answers from the store too:
// job listings, jobs and quota rules.
func (s *Server) readRoutes() {
	s.route("GET /api/v1/jobs", readsJobs, people, s.listJobs)
	s.route("GET /api/v1/jobs/{id}", readsReceived, jobReader, s.getJob)
	s.route("GET /api/v1/quotas", readsCluster, jobReader, s.listQuotas)
}

// ServeHTTP gives the request its id (tag), authenticates it and routes
// it: the API, or, for other paths, the dashboard (Web). /healthz, the
// sign-in page and the dashboard's static files need no authentication.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	r = s.tag(w, r)
	path := r.URL.Path
	if s.Gateway != nil && strings.HasPrefix(path, "/v1/") {
		s.Gateway.ServeHTTP(w, r) // its own authentication, with OpenAI-style errors
		return
	}
	page := s.Web != nil && !strings.HasPrefix(path, "/api/") && path != "/metrics" && path != "/healthz"
	switch {
	case path == "/healthz":
	case page && (path == LoginPath || strings.HasPrefix(path, StaticPath)):
		s.Web.ServeHTTP(w, r)
		return
	default:
		if r = s.sec.admit(w, r, page); r == nil {
			return
		}
	}
	if page {
		s.Web.ServeHTTP(w, r)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// Status returns the HTTP status for an error code.
func Status(code string) int {
	switch code {
	case berth.ECodeInvalid:
		return http.StatusBadRequest
	case berth.ECodeUnauthorized:
		return http.StatusUnauthorized
	case berth.ECodeForbidden:
		return http.StatusForbidden
	case berth.ECodeNotFound:
		return http.StatusNotFound
	case berth.ECodeConflict, berth.ECodeUnsatisfiable:
		return http.StatusConflict
	case berth.ECodeLocked:
		return http.StatusLocked
	case berth.ECodeTooLarge:
		return http.StatusRequestEntityTooLarge
	case berth.ECodeTooMany:
		return http.StatusTooManyRequests
	case berth.ECodeUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	_ = enc.Encode(v)
}

// readBody reads r's body, at most MaxBody bytes. A larger body is a
// too_large *berth.Error (413) on field body naming the limit, once up to
// MaxDiscard bytes of it are read and thrown away (none when its declared
// length is over MaxDiscard), so that the client, still sending, receives
// the answer rather than a reset connection; a body that fails to arrive
// is invalid.
func readBody(r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxBody+1))
	if err != nil {
		return nil, berth.Invalidf("body", "read").WithCause(err)
	}
	if len(body) > MaxBody {
		if r.ContentLength <= MaxDiscard { // beyond it the connection is closed anyway
			_, _ = io.CopyN(io.Discard, r.Body, MaxDiscard-MaxBody-1)
		}
		return nil, &berth.Error{Code: berth.ECodeTooLarge, Field: "body", Message: fmt.Sprintf("larger than the limit of %d bytes", MaxBody)}
	}
	return body, nil
}

// decode reads one JSON value into v strictly (strict.DecodeJSON: unknown
// fields, trailing data, strings not UTF-8, repeated keys), with an error
// naming the field; the body is readBody's.
func decode(r *http.Request, v any) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	if err := strict.DecodeJSON(body, v); err != nil {
		if e, ok := err.(*berth.Error); ok && e.Field == "" {
			e.Field = "body"
		}
		return err
	}
	return nil
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	if err := s.ctl.Err(); err != nil {
		writeError(w, r, berth.Errorf(berth.ECodeUnavailable, "store unavailable").WithCause(err))
		return
	}
	body := map[string]string{"status": "ok"}
	if s.Leader != "" {
		body["leader"] = s.Leader
	}
	writeJSON(w, http.StatusOK, body)
}

func (s *Server) submit(w http.ResponseWriter, r *http.Request) {
	req := berth.SubmitRequest{JobSpec: berth.DefaultJobSpec()}
	idsOnly, err := boolQuery(r, "ids_only")
	if err == nil {
		err = decode(r, &req)
	}
	if err == nil {
		err = submitter(identity(r), &req)
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	sub, err := s.ctl.SubmitFull(r.Context(), &req)
	if err != nil {
		writeError(w, r, err)
		return
	}
	jobs, warnings := sub.Jobs, sub.Warnings
	status := http.StatusCreated
	if sub.Replayed {
		status = http.StatusOK // the jobs of an earlier request with this idempotency key
	}
	if idsOnly { // a large array's answer without every job in full
		ids := make([]string, len(jobs))
		for i, j := range jobs {
			ids[i] = j.ID
		}
		writeJSON(w, status, berth.SubmitIDsResponse{IDs: ids, Warnings: warnings})
		return
	}
	writeJSON(w, status, berth.SubmitResponse{Jobs: jobs, Warnings: warnings})
}

// boolQuery returns r's query parameter name as a bool, false when it is
// absent; any value but true or false is an invalid-field error.
func boolQuery(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, berth.Invalidf(name, "must be true or false, not %q", v)
	}
	return b, nil
}

// wholeQuery reads the query parameter name, a whole number ≥ 0, or def
// when it is absent; hint explains the numbers in the error a bad value
// gets.
func wholeQuery(r *http.Request, name string, def int, hint string) (int, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, berth.Invalidf(name, "must be a whole number ≥ 0 (%s)", hint)
	}
	return n, nil
}

// setHosts sets the Host of each job of jobs that has had an attempt.
func (s *Server) setHosts(ctx context.Context, jobs []*berth.Job) error {
	var ids []string
	for _, j := range jobs {
		if j.Attempts > 0 {
			ids = append(ids, j.ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	hosts, err := s.reads.JobHosts(ctx, ids)
	for _, j := range jobs {
		j.Host = hosts[j.ID]
	}
	return err
}

func (s *Server) listJobs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	before, err := berth.ParseCursor(q.Get("cursor"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	f := store.JobFilter{Queue: q.Get("queue"), User: q.Get("user"), Parent: q.Get("parent"), Name: q.Get("name"), Before: before, Limit: 100}
	if who := identity(r); !who.SeesAllJobs() {
		if f.User != "" && f.User != who.Name {
			writeError(w, r, berth.Errorf(berth.ECodeForbidden, "%s (role %s) may only list its own jobs", who.Name, who.Role))
			return
		}
		f.User = who.Name
	}
	if v := q.Get("state"); v != "" {
		for _, name := range strings.Split(v, ",") {
			st, err := berth.ParseJobState(name)
			if err != nil {
				writeError(w, r, err)
				return
			}
			f.States = append(f.States, st)
		}
	}
	if f.Limit, err = wholeQuery(r, "limit", f.Limit, "0 for all"); err != nil {
		writeError(w, r, err)
		return
	}
	want := f.Limit
	if want > 0 {
		f.Limit++ // one more tells whether there is a next page
	}
	jobs, err := s.reads.Jobs(r.Context(), f)
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := berth.JobList{Jobs: jobs}
	if want > 0 && len(jobs) > want {
		out.Jobs = jobs[:want]
		out.NextCursor = jobs[want-1].ID
	}
	if err := s.setHosts(r.Context(), out.Jobs); err != nil {
		writeError(w, r, err)
		return
	}
	if out.Jobs == nil {
		out.Jobs = []*berth.Job{}
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getJob(w http.ResponseWriter, r *http.Request) {
	j, err := s.ownJob(r, r.PathValue("id"), false)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, j)
}

func (s *Server) cancel(w http.ResponseWriter, r *http.Request) {
	if _, err := s.ownJob(r, r.PathValue("id"), true); err != nil {
		writeError(w, r, err)
		return
	}
	j, err := s.ctl.Cancel(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, j)
}

func (s *Server) cancelMatching(w http.ResponseWriter, r *http.Request) {
	var req berth.CancelRequest
	err := decode(r, &req)
	if err == nil {
		err = req.Validate() // before a user's own name is added as a filter
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	if who := identity(r); !who.ActsOnAllJobs() {
		if req.User != "" && req.User != who.Name {
			writeError(w, r, berth.Errorf(berth.ECodeForbidden, "%s (role %s) may only cancel its own jobs", who.Name, who.Role))
			return
		}
		req.User = who.Name
	}
	jobs, err := s.ctl.CancelMatching(r.Context(), req)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, berth.JobList{Jobs: jobs})
}

func (s *Server) wait(w http.ResponseWriter, r *http.Request) {
	var req berth.WaitRequest
	if err := decode(r, &req); err != nil {
		writeError(w, r, err)
		return
	}
	if len(req.IDs) == 0 && !req.All {
		writeError(w, r, berth.Invalidf("ids", "name at least one job id, or set all"))
		return
	}
	var user string // whose jobs all covers: every user's, or the caller's own
	if who := identity(r); !who.SeesAllJobs() {
		user = who.Name
		for _, id := range req.IDs {
			if _, err := s.ownJob(r, id, false); err != nil && berth.ErrorCode(err) != berth.ECodeNotFound {
				writeError(w, r, err)
				return
			}
		}
	}
	timeout := time.Duration(req.Timeout)
	if timeout <= 0 || timeout > time.Minute {
		timeout = time.Minute
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	res, err := s.ctl.Wait(ctx, req.IDs, req.All, user)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (s *Server) workers(w http.ResponseWriter, r *http.Request) {
	list, err := s.ctl.Workers(r.Context())
	if err != nil {
		writeError(w, r, err)
		return
	}
	if list == nil {
		list = []*berth.Worker{}
	}
	writeJSON(w, http.StatusOK, berth.WorkerList{Workers: list})
}

// wsConn adapts a WebSocket to controller.Conn.
type wsConn struct {
	c     *websocket.Conn
	frame *wire.FrameBuffer
}

// Read returns the next frame, valid until the next Read.
func (w wsConn) Read(ctx context.Context) ([]byte, error) {
	_, r, err := w.c.Reader(ctx)
	if err != nil {
		return nil, err
	}
	return w.frame.Read(r)
}

func (w wsConn) Write(ctx context.Context, frame []byte) error {
	return w.c.Write(ctx, websocket.MessageText, frame)
}

// Close tells the peer why and waits for its close reply, at most the
// library's bound (coder/websocket: 5 s to write, 5 s for the reply) before
// it drops the connection. The controller calls it from the session's
// writer goroutine, never from its loop, so a frozen peer delays only its
// own session.
func (w wsConn) Close(reason string) error {
	if len(reason) > 120 {
		reason = reason[:120]
	}
	return w.c.Close(websocket.StatusPolicyViolation, reason)
}

func (s *Server) agent(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return // Accept wrote the error response
	}
	c.SetReadLimit(4 << 20)
	err = s.ctl.ServeAgent(r.Context(), wsConn{c: c, frame: &wire.FrameBuffer{}}, identity(r).Worker)
	requestLog(r).Info("agent session ended", "remote", r.RemoteAddr, "err", err)
}
