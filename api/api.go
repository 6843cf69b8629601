// Package api serves Berth's HTTP interface: JSON REST under /api/v1, the
// agent WebSocket, server-sent events, /healthz and /metrics. It is the only
// place error codes become HTTP statuses.
package api

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/controller"
	"github.com/berth-dev/berth/store"
)

// MaxBody is the largest request body accepted.
const MaxBody = 1 << 20

// Server is the HTTP front of a controller.
type Server struct {
	// Leader, when set, is this server's URL, reported by /healthz: it
	// leads the servers sharing its store.
	Leader string

	ctl   *controller.Controller
	reads reader // the controller; a standby's store
	token string
	log   *slog.Logger
	mux   *http.ServeMux
}

// New returns a server for ctl. A non-empty token is required of every
// request but /healthz, as "Authorization: Bearer TOKEN".
func New(ctl *controller.Controller, token string, log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{ctl: ctl, reads: ctl, token: token, log: log, mux: http.NewServeMux()}
	s.mux.HandleFunc("GET /healthz", s.healthz)
	s.mux.HandleFunc("GET /metrics", s.metrics)
	s.mux.HandleFunc("POST /api/v1/jobs", s.submit)
	s.mux.HandleFunc("GET /api/v1/jobs", s.listJobs)
	s.mux.HandleFunc("GET /api/v1/jobs/{id}", s.getJob)
	s.mux.HandleFunc("POST /api/v1/jobs/{id}/cancel", s.cancel)
	s.mux.HandleFunc("GET /api/v1/jobs/{id}/logs", s.logs)
	s.mux.HandleFunc("POST /api/v1/wait", s.wait)
	s.mux.HandleFunc("GET /api/v1/workers", s.workers)
	s.mux.HandleFunc("GET /api/v1/workers/{host}/control", s.getControl)
	s.mux.HandleFunc("PUT /api/v1/workers/{host}/control", s.putControl)
	s.mux.HandleFunc("GET /api/v1/quotas", s.listQuotas)
	s.mux.HandleFunc("PUT /api/v1/quotas/{id}", s.putQuota)
	s.mux.HandleFunc("DELETE /api/v1/quotas/{id}", s.deleteQuota)
	s.mux.HandleFunc("GET /api/v1/events", s.events)
	s.mux.HandleFunc("GET /api/v1/agent", s.agent)
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, berth.Errorf(berth.ECodeNotFound, "no such endpoint: %s %s", r.Method, r.URL.Path))
	})
	return s
}

// ServeHTTP authenticates and routes the request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.token != "" && r.URL.Path != "/healthz" {
		got := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		if subtle.ConstantTimeCompare([]byte(got), []byte(s.token)) != 1 {
			writeError(w, berth.Errorf(berth.ECodeUnauthorized, "missing or wrong token (set BERTH_TOKEN)"))
			return
		}
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
	case berth.ECodeConflict:
		return http.StatusConflict
	case berth.ECodeLocked:
		return http.StatusLocked
	case berth.ECodeTooMany:
		return http.StatusTooManyRequests
	case berth.ECodeUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

func writeError(w http.ResponseWriter, err error) {
	var e *berth.Error
	if !errors.As(err, &e) {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			e = berth.Errorf(berth.ECodeUnavailable, "request cancelled")
		} else {
			e = berth.Errorf(berth.ECodeInternal, "internal error: %v", err)
		}
	}
	writeJSON(w, Status(e.Code), berth.ErrorBody{Error: e})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	_ = enc.Encode(v)
}

// decode reads one JSON object into v, rejecting unknown fields, trailing
// data and bodies over MaxBody, with an error naming the field.
func decode(r *http.Request, v any) error {
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxBody+1))
	if err != nil {
		return berth.Invalidf("body", "read: %v", err)
	}
	if len(body) > MaxBody {
		return berth.Invalidf("body", "larger than %d bytes", MaxBody)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if dec.More() {
		return berth.Invalidf("body", "trailing data after the JSON object")
	}
	return nil
}

func jsonError(err error) error {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		field := jsonPath(typeErr.Field)
		if field == "" {
			field = "body" // the whole body has the wrong type, e.g. an array
		}
		return berth.Invalidf(field, "must be %s", typeErr.Type)
	case errors.As(err, &syntaxErr):
		return berth.Invalidf("body", "malformed JSON at byte %d: %v", syntaxErr.Offset, err)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return berth.Invalidf(field, "unknown field")
	case errors.Is(err, io.EOF):
		return berth.Invalidf("body", "empty; want a JSON object")
	}
	return berth.Invalidf("body", "%v", err)
}

// jsonPath turns an UnmarshalTypeError's field path into the JSON name of
// the field: encoding/json puts the Go name of an embedded struct first
// ("JobSpec.priority" for SubmitRequest), which users never write. JSON
// field names here are all lower case.
func jsonPath(field string) string {
	for {
		head, rest, ok := strings.Cut(field, ".")
		if !ok || head == "" || head[0] < 'A' || head[0] > 'Z' {
			return field
		}
		field = rest
	}
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	if err := s.ctl.Err(); err != nil {
		writeError(w, berth.Errorf(berth.ECodeUnavailable, "store failed: %v", err))
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
	if err := decode(r, &req); err != nil {
		writeError(w, err)
		return
	}
	jobs, replayed, err := s.ctl.SubmitReplayed(r.Context(), &req)
	if err != nil {
		writeError(w, err)
		return
	}
	status := http.StatusCreated
	if replayed {
		status = http.StatusOK // the jobs of an earlier request with this idempotency key
	}
	writeJSON(w, status, berth.SubmitResponse{Jobs: jobs})
}

func (s *Server) listJobs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := store.JobFilter{Queue: q.Get("queue"), User: q.Get("user"), Before: q.Get("cursor"), Limit: 100}
	if v := q.Get("state"); v != "" {
		for _, name := range strings.Split(v, ",") {
			st, err := berth.ParseJobState(name)
			if err != nil {
				writeError(w, err)
				return
			}
			f.States = append(f.States, st)
		}
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			writeError(w, berth.Invalidf("limit", "must be a whole number ≥ 0 (0 for all)"))
			return
		}
		f.Limit = n
	}
	want := f.Limit
	if want > 0 {
		f.Limit++ // one more tells whether there is a next page
	}
	jobs, err := s.reads.Jobs(r.Context(), f)
	if err != nil {
		writeError(w, err)
		return
	}
	out := berth.JobList{Jobs: jobs}
	if want > 0 && len(jobs) > want {
		out.Jobs = jobs[:want]
		out.NextCursor = jobs[want-1].ID
	}
	if out.Jobs == nil {
		out.Jobs = []*berth.Job{}
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getJob(w http.ResponseWriter, r *http.Request) {
	j, err := s.reads.Job(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, j)
}

func (s *Server) cancel(w http.ResponseWriter, r *http.Request) {
	j, err := s.ctl.Cancel(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, j)
}

func (s *Server) wait(w http.ResponseWriter, r *http.Request) {
	var req berth.WaitRequest
	if err := decode(r, &req); err != nil {
		writeError(w, err)
		return
	}
	if len(req.IDs) == 0 && !req.All {
		writeError(w, berth.Invalidf("ids", "name at least one job id, or set all"))
		return
	}
	timeout := time.Duration(req.Timeout)
	if timeout <= 0 || timeout > time.Minute {
		timeout = time.Minute
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	res, err := s.ctl.Wait(ctx, req.IDs, req.All)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (s *Server) workers(w http.ResponseWriter, r *http.Request) {
	list, err := s.ctl.Workers(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	if list == nil {
		list = []*berth.Worker{}
	}
	writeJSON(w, http.StatusOK, berth.WorkerList{Workers: list})
}

func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		writeError(w, berth.Errorf(berth.ECodeInternal, "streaming unsupported"))
		return
	}
	after := s.ctl.Bus().Last()
	if v := r.URL.Query().Get("after"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			writeError(w, berth.Invalidf("after", "must be an event sequence number"))
			return
		}
		after = n
	} else if v := r.Header.Get("Last-Event-ID"); v != "" {
		if n, err := strconv.ParseUint(v, 10, 64); err == nil {
			after = n
		}
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher.Flush()
	for {
		events, missed, err := s.ctl.Bus().Read(r.Context(), after)
		if err != nil {
			return
		}
		if missed > 0 {
			fmt.Fprintf(w, "event: missed\ndata: {\"missed\":%d}\n\n", missed)
		}
		for _, e := range events {
			data, _ := json.Marshal(e)
			fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", e.Seq, e.Type, data)
			after = e.Seq
		}
		flusher.Flush()
	}
}

// wsConn adapts a WebSocket to controller.Conn.
type wsConn struct{ c *websocket.Conn }

func (w wsConn) Read(ctx context.Context) ([]byte, error) {
	_, data, err := w.c.Read(ctx)
	return data, err
}

func (w wsConn) Write(ctx context.Context, frame []byte) error {
	return w.c.Write(ctx, websocket.MessageText, frame)
}

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
	err = s.ctl.ServeAgent(r.Context(), wsConn{c})
	s.log.Info("agent session ended", "remote", r.RemoteAddr, "err", err)
}
