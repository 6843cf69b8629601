package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// ReplicaHeader is the response header naming the replica (its attempt
// id) that answered a request the gateway routed.
const ReplicaHeader = "X-Berth-Replica"

// Reply is a replica's whole answer to a request the gateway sent for a
// caller inside the server (ChatCompletion): its status, headers and body,
// and the replica (attempt id) that gave it.
type Reply struct {
	Status  int
	Header  http.Header
	Body    []byte
	Replica string
}

// Completer sends one chat completion request for a model to a ready
// replica and returns its answer. *Gateway is one; the extraction
// contracts call models through it.
type Completer interface {
	// ChatCompletion posts body (an OpenAI chat completion request whose
	// "model" is model; "stream" must be false) to a ready replica of model
	// for caller (nil: none; its name labels the usage), with the
	// gateway's routing, retry, cooldown and metrics (caller's allow-list
	// is not checked here). A replica's answer, whatever its status, is a
	// *Reply; no answer is an *Error: 404 an unknown model, 503 one not
	// ready (its Phase), 502 no replica reachable, and, once ctx ends, one
	// whose cause is ctx's error (errors.Is(err, context.DeadlineExceeded)
	// for a timeout).
	ChatCompletion(ctx context.Context, caller *Caller, model string, body []byte) (*Reply, error)
}

var _ Completer = (*Gateway)(nil)

// ChatCompletion implements Completer.
func (g *Gateway) ChatCompletion(ctx context.Context, caller *Caller, model string, body []byte) (*Reply, error) {
	start := g.cfg.Now()
	resp, r, err := g.send(ctx, "/v1/chat/completions", model, body, http.Header{"Content-Type": {"application/json"}})
	if err != nil {
		e := asError(err)
		g.metrics.request("/v1/chat/completions", model, e.Status)
		return nil, e
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	g.pool.release(r, (err != nil && ctx.Err() == nil) || resp.StatusCode >= 500)
	if err != nil {
		g.metrics.request("/v1/chat/completions", model, http.StatusBadGateway)
		return nil, upstreamError(ctx, r, err)
	}
	user := ""
	if caller != nil {
		user = caller.Name
	}
	g.metrics.done("/v1/chat/completions", model, user, resp.StatusCode, g.cfg.Now().Sub(start), findUsage(out))
	return &Reply{Status: resp.StatusCode, Header: resp.Header, Body: out, Replica: r.id}, nil
}

// request is what the gateway reads of a request body: the rest passes
// through unread.
type request struct {
	Model  string `json:"model"`
	Stream bool   `json:"stream"`
}

// forward routes an OpenAI request to a replica of its model and passes
// the answer back.
func (g *Gateway) forward(w http.ResponseWriter, r *http.Request) {
	start, route, caller := g.cfg.Now(), r.URL.Path, CallerOf(r)
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, g.cfg.MaxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			g.refuse(w, route, "", &Error{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error", Code: "request_too_large",
				Message: fmt.Sprintf("The request body is over %d bytes", g.cfg.MaxBody)})
			return
		}
		g.refuse(w, route, "", &Error{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "invalid_body",
			Message: "cannot read the request body: " + err.Error()})
		return
	}
	var req request
	if err := json.Unmarshal(body, &req); err != nil {
		g.refuse(w, route, "", &Error{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "invalid_json",
			Message: "The request body is not a JSON object: " + err.Error()})
		return
	}
	if req.Model == "" {
		g.refuse(w, route, "", &Error{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "missing_model", Param: "model",
			Message: "The request has no `model`: name one that GET /v1/models lists"})
		return
	}
	if !caller.Allows(req.Model) {
		g.refuse(w, route, req.Model, &Error{Status: http.StatusForbidden, Type: "permission_error", Code: "model_not_allowed", Param: "model",
			Message: fmt.Sprintf("Your API key may not use the model `%s`; it may use: %s", req.Model, strings.Join(caller.Models, ", "))})
		return
	}
	resp, rep, err := g.send(r.Context(), route, req.Model, body, r.Header)
	if err != nil {
		g.refuse(w, route, req.Model, asError(err))
		return
	}
	defer resp.Body.Close()
	copyHeader(w.Header(), resp.Header)
	w.Header().Set(ReplicaHeader, rep.id)
	w.WriteHeader(resp.StatusCode)
	var u *usage
	if req.Stream && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		u, err = copyEvents(w, resp.Body)
	} else {
		u, err = copyBody(w, resp.Body)
	}
	// A replica that fails mid-answer is cooled down; the client saw the
	// bytes already sent, so there is no retry.
	g.pool.release(rep, resp.StatusCode >= 500 || (err != nil && r.Context().Err() == nil))
	g.metrics.done(route, req.Model, caller.Name, resp.StatusCode, g.cfg.Now().Sub(start), u)
}

// refuse answers e for route and counts it.
func (g *Gateway) refuse(w http.ResponseWriter, route, model string, e *Error) {
	g.metrics.request(route, model, e.Status)
	writeError(w, e)
}

// send posts body to route on a replica of model and, when that replica
// fails before answering (no connection, or a 5xx status), once more on
// another. It returns the response, whose replica stays counted
// outstanding until the caller releases it, or an *Error. When no other
// replica is there to try, a replica's 5xx is the answer.
func (g *Gateway) send(ctx context.Context, route, model string, body []byte, h http.Header) (*http.Response, *replica, error) {
	var tried []*replica
	var failure error         // the last replica's failure without an answer
	var failed *http.Response // the last 5xx answer, from tried's last
	for try := range 2 {
		r, err := g.pool.acquire(ctx, model, tried)
		if err != nil {
			if try == 0 {
				return nil, nil, err
			}
			break // no other replica
		}
		if try > 0 {
			g.metrics.retry(model)
		}
		resp, err := g.post(ctx, r, route, body, h)
		if failed != nil { // superseded by this try's outcome
			failed.Body.Close()
			g.pool.release(tried[len(tried)-1], true)
			failed = nil
		}
		tried = append(tried, r)
		switch {
		case err != nil:
			g.pool.release(r, ctx.Err() == nil)
			failure = upstreamError(ctx, r, err)
			if ctx.Err() != nil {
				return nil, nil, failure
			}
			g.cfg.Log.Warn("gateway: replica failed", "model", model, "replica", r.id, "host", r.host, "err", err)
		case resp.StatusCode >= 500:
			failed = resp
			g.cfg.Log.Warn("gateway: replica answered an error", "model", model, "replica", r.id, "host", r.host, "status", resp.StatusCode)
		default:
			return resp, r, nil
		}
	}
	if failed != nil {
		return failed, tried[len(tried)-1], nil
	}
	// No replica answered and none is left to try: if the cluster has
	// meanwhile withdrawn them (a service stopped, swapped out, dead),
	// the model's state is the answer, not the dead replica's error.
	g.pool.invalidate()
	r, err := g.pool.acquire(ctx, model, tried)
	if err != nil {
		var e *Error
		if errors.As(err, &e) && e.Code != codeReplicasFailed && e.cause == nil {
			return nil, nil, err
		}
		return nil, nil, failure
	}
	g.pool.release(r, false)
	return nil, nil, failure
}

// post sends body to route on replica r, with h's end-to-end headers.
func (g *Gateway) post(ctx context.Context, r *replica, route string, body []byte, h http.Header) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.url+route, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	copyHeader(req.Header, h)
	if req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	return g.client.Do(req)
}

// upstreamError is the *Error for a replica that gave no (whole) answer.
func upstreamError(ctx context.Context, r *replica, err error) *Error {
	if ctx.Err() != nil {
		return &Error{Status: http.StatusGatewayTimeout, Type: "timeout", Code: "upstream_timeout",
			Message: fmt.Sprintf("The request was cancelled or timed out waiting for replica %s: %v", r.id, ctx.Err()), cause: ctx.Err()}
	}
	return &Error{Status: http.StatusBadGateway, Type: "server_error", Code: "upstream_unreachable",
		Message: fmt.Sprintf("Replica %s (%s) failed: %v", r.id, r.host, err), cause: err}
}

// hopHeaders are the headers that stay on their hop (RFC 9110 §7.6.1),
// and those the gateway keeps to itself: the caller's Berth credentials,
// and the body's length and encoding, which the transport sets.
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade", "Authorization", "Cookie", "Content-Length", "Accept-Encoding", "Host"}

// copyHeader adds src's end-to-end headers to dst.
func copyHeader(dst, src http.Header) {
	for k, vs := range src {
		if isHop(k) {
			continue
		}
		dst[k] = append(dst[k], vs...)
	}
}

func isHop(k string) bool {
	for _, h := range hopHeaders {
		if strings.EqualFold(k, h) {
			return true
		}
	}
	return false
}

// usage is the "usage" object of an OpenAI answer.
type usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
}

// bodyKeep is how much of an answer's body the gateway keeps to read its
// usage; of a longer body, it reads the usage from the tail.
const bodyKeep = 8 << 20

// copyBody writes body to w and returns the usage it holds, if any.
func copyBody(w http.ResponseWriter, body io.Reader) (*usage, error) {
	var kept tailBuffer
	_, err := io.Copy(w, io.TeeReader(body, &kept))
	return findUsage(kept.bytes()), err
}

// tailBuffer keeps what is written to it up to bodyKeep bytes, and then
// the last 64 KiB.
type tailBuffer struct {
	buf       []byte
	truncated bool
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if len(t.buf) > bodyKeep {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-64<<10:]...)
		t.truncated = true
	}
	return len(p), nil
}

func (t *tailBuffer) bytes() []byte {
	if t.truncated {
		if i := bytes.LastIndex(t.buf, []byte(`"usage"`)); i >= 0 {
			return append([]byte("{"), t.buf[i:]...) // {"usage": {...}...: enough for the decoder to reach the usage
		}
		return nil
	}
	return t.buf
}

// findUsage returns the usage of a JSON answer (an OpenAI object, or a
// stream chunk), nil without one.
func findUsage(b []byte) *usage {
	if !bytes.Contains(b, []byte(`"usage"`)) {
		return nil
	}
	var v struct {
		Usage *usage `json:"usage"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&v); err != nil && v.Usage == nil {
		return nil
	}
	return v.Usage
}

// copyEvents passes an SSE stream through to w byte for byte, flushing
// after each event (a blank line), and returns the usage of its last chunk
// that has one (a stream sends it when asked to: stream_options.include_usage).
func copyEvents(w http.ResponseWriter, body io.Reader) (*usage, error) {
	flush := http.NewResponseController(w)
	br := bufio.NewReaderSize(body, 64<<10)
	var u *usage
	partial := false
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			if _, werr := w.Write(line); werr != nil {
				return u, werr
			}
			whole := !partial && err == nil
			partial = errors.Is(err, bufio.ErrBufferFull)
			switch {
			case whole && (len(line) == 1 || (len(line) == 2 && line[0] == '\r')): // the blank line that ends an event
				_ = flush.Flush()
			case whole && bytes.HasPrefix(line, []byte("data:")):
				if got := findUsage(bytes.TrimSpace(line[5:])); got != nil {
					u = got
				}
			}
		}
		switch {
		case err == nil, errors.Is(err, bufio.ErrBufferFull):
		case errors.Is(err, io.EOF):
			_ = flush.Flush()
			return u, nil
		default:
			_ = flush.Flush()
			return u, err
		}
	}
}
