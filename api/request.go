package api

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/berth-dev/berth"
)

// request is what tag attaches to a request: its id and a logger that
// names it.
type request struct {
	id  string
	log *slog.Logger
}

type requestKey struct{}

// tag gives r a new request id (sortable, from berth.IDGen): it is sent in
// the answer's berth.RequestIDHeader and carried in the returned request's
// context, with the server's logger naming it (request_id) for every log
// line about the request. An id the client sent is not reused: ids are the
// server's, unique and in order, and a client cannot forge one into the log.
func (s *Server) tag(w http.ResponseWriter, r *http.Request) *http.Request {
	id := s.ids.New(time.Now())
	w.Header().Set(berth.RequestIDHeader, id)
	ctx := context.WithValue(r.Context(), requestKey{}, request{id: id, log: s.log.With("request_id", id)})
	return r.WithContext(ctx)
}

// requestOf returns what tag attached to r: its id and its logger; for a
// request the Server did not serve, no id and a logger that discards.
func requestOf(r *http.Request) request {
	if req, ok := r.Context().Value(requestKey{}).(request); ok {
		return req
	}
	return request{log: slog.New(slog.DiscardHandler)}
}

// requestLog returns the logger for r, naming its request id.
func requestLog(r *http.Request) *slog.Logger { return requestOf(r).log }

// PublicError returns what the client making r is told of err, and logs
// what it is not told. An error whose status is below 500 is err's
// *berth.Error, its cause's text in the message. An internal error —
// one that is not a *berth.Error, or whose code maps to 500 — is logged
// at error level with r's request id and answered "internal error
// (request ID)", code internal. An unavailable error (503) keeps its
// code, field and message but not its cause, which is logged as a
// warning; so is a request cancelled or past its deadline, answered 503
// "request cancelled". Nothing beyond a 5xx's message — no path, SQL
// state or store error — reaches the client.
func PublicError(r *http.Request, err error) *berth.Error {
	var e *berth.Error
	if !errors.As(err, &e) && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		e = berth.Errorf(berth.ECodeUnavailable, "request cancelled")
	}
	switch {
	case e != nil && Status(e.Code) < http.StatusInternalServerError:
		if e.Err != nil { // the cause's text, the one thing Err's encoding leaves out
			return &berth.Error{Code: e.Code, Message: e.Text(), Field: e.Field}
		}
		return e
	case e != nil && e.Code == berth.ECodeUnavailable:
		requestLog(r).Warn("unavailable", "method", r.Method, "path", r.URL.Path, "err", err)
		return &berth.Error{Code: e.Code, Message: cmp.Or(e.Message, "service unavailable"), Field: e.Field}
	}
	req := requestOf(r)
	req.log.Error("internal error", "method", r.Method, "path", r.URL.Path, "err", err)
	if req.id == "" {
		return berth.Errorf(berth.ECodeInternal, "internal error")
	}
	return berth.Errorf(berth.ECodeInternal, "internal error (request %s)", req.id)
}

// writeError answers r with err as PublicError says, with the status its
// code maps to.
func writeError(w http.ResponseWriter, r *http.Request, err error) {
	e := PublicError(r, err)
	writeJSON(w, Status(e.Code), berth.ErrorBody{Error: e})
}
