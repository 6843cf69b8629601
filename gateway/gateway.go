// Package gateway is the server's OpenAI-compatible front door to the
// models the cluster serves (docs/gateway.md): GET /v1/models lists the
// models of ready endpoints and, while one warms up or is swapped in, its
// phase; POST /v1/chat/completions, /v1/completions and /v1/embeddings
// are routed by their "model" to a ready replica (least outstanding
// requests; a replica that fails is cooled down), the request body passed
// through unchanged and the answer, SSE streams included, passed back
// byte for byte, flushed per event. A model with no ready replica answers
// 503 with an OpenAI-style error naming its phase and a Retry-After; a
// failure of the replica before any byte reached the client is retried
// once on another replica. Callers authenticate with Berth tokens as API
// keys; a token may carry a model allow-list and a rate limit. Usage
// (from the replies' "usage") and latencies are counted for /metrics.
package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth"
)

// Cluster is what the gateway reads of the cluster: the endpoints of
// ready services, and the services with their phases (for the models
// not ready yet). *controller.Controller is one.
type Cluster interface {
	Endpoints(ctx context.Context) ([]*berth.Endpoint, error)
	Services(ctx context.Context) ([]*berth.Service, error)
}

// Caller is who makes a gateway request, as Config.Authenticate
// established it: a Berth identity and, when it came with a token, the
// token's model allow-list and rate limit.
type Caller struct {
	Name    string   // the identity's name (a token's subject): the user label of the metrics
	TokenID string   // the token's id; empty for a caller trusted by address
	Models  []string // the models it may use; empty: every model
	RPM     int      // requests per minute it may make; 0: no limit
}

// Allows reports whether c may use model.
func (c *Caller) Allows(model string) bool {
	return len(c.Models) == 0 || slices.Contains(c.Models, model)
}

// Config configures a Gateway.
type Config struct {
	// Cluster gives the endpoints and services; required.
	Cluster Cluster
	// Authenticate returns who makes r, or an error: a *berth.Error of
	// code ECodeUnauthorized (401) or ECodeForbidden (403); required.
	Authenticate func(r *http.Request) (*Caller, error)
	// Transport reaches the replicas; nil: a transport of the gateway's
	// own (keep-alives, no compression, so bytes pass unchanged).
	Transport http.RoundTripper
	// Refresh is how long a snapshot of the endpoints and services is
	// used before it is read again; 0: DefaultRefresh.
	Refresh time.Duration
	// Cooldown is how long a replica that failed is passed over while
	// another is ready; 0: DefaultCooldown.
	Cooldown time.Duration
	// MaxBody bounds a request body; 0: DefaultMaxBody.
	MaxBody int64
	// Now is the clock; nil: time.Now.
	Now func() time.Time
	// Log gets the replicas' failures; nil: discarded.
	Log *slog.Logger
}

// Defaults of Config.
const (
	DefaultRefresh  = 250 * time.Millisecond
	DefaultCooldown = 10 * time.Second
	DefaultMaxBody  = 64 << 20 // images as data URLs make big bodies
)

// Gateway serves the OpenAI-compatible routes. It is safe for concurrent
// use.
type Gateway struct {
	cfg     Config
	client  *http.Client
	mux     *http.ServeMux
	pool    *pool
	limits  *limiter
	metrics *metrics
}

// New returns a gateway for cfg.
func New(cfg Config) *Gateway {
	if cfg.Refresh <= 0 {
		cfg.Refresh = DefaultRefresh
	}
	if cfg.Cooldown <= 0 {
		cfg.Cooldown = DefaultCooldown
	}
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Transport == nil {
		cfg.Transport = &http.Transport{
			DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConnsPerHost:   256,
			IdleConnTimeout:       90 * time.Second,
			ResponseHeaderTimeout: 0, // a long completion takes its time; the client's context bounds it
			DisableCompression:    true,
		}
	}
	g := &Gateway{cfg: cfg, client: &http.Client{Transport: cfg.Transport}, mux: http.NewServeMux(),
		pool: newPool(cfg.Cluster, cfg.Refresh, cfg.Cooldown, cfg.Now), limits: newLimiter(cfg.Now), metrics: newMetrics()}
	g.Handle("GET /v1/models", g.models)
	g.Handle("GET /v1/models/{model...}", g.model)
	for _, route := range []string{"/v1/chat/completions", "/v1/completions", "/v1/embeddings"} {
		g.Handle("POST "+route, g.forward)
	}
	g.mux.HandleFunc("/v1/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &Error{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "unknown_url",
			Message: fmt.Sprintf("Unknown request URL: %s %s", r.Method, r.URL.Path)})
	})
	return g
}

type callerKey struct{}

// CallerOf returns the caller of a request the gateway admitted (a
// handler registered with Handle gets one); nil otherwise.
func CallerOf(r *http.Request) *Caller {
	c, _ := r.Context().Value(callerKey{}).(*Caller)
	return c
}

// Handle registers h for pattern (http.ServeMux's syntax) behind the
// gateway's authentication and rate limit: h runs only for an admitted
// caller (CallerOf), and refusals are OpenAI-style errors. The extraction
// contracts' routes (/v1/contracts/...) are registered this way.
func (g *Gateway) Handle(pattern string, h http.HandlerFunc) {
	route := pattern // the metrics' route: the pattern's path, not the request's (no model names in labels)
	if _, path, ok := strings.Cut(pattern, " "); ok {
		route = path
	}
	g.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		c, err := g.cfg.Authenticate(r)
		if err != nil {
			writeError(w, authError(err))
			return
		}
		if ok, after := g.limits.allow(c); !ok {
			g.metrics.request(route, "", http.StatusTooManyRequests)
			writeError(w, &Error{Status: http.StatusTooManyRequests, Type: "requests", Code: "rate_limit_exceeded", RetryAfter: after,
				Message: fmt.Sprintf("Rate limit reached for %s: %d requests per minute; retry in %s", c.Name, c.RPM, after.Round(time.Second))})
			return
		}
		h(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, c)))
	})
}

// ServeHTTP serves the /v1/ routes.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) { g.mux.ServeHTTP(w, r) }

// Error is an answer of the gateway that is no replica's: an
// OpenAI-style error ({"error": {"message", "type", "code", "param"}}),
// with Berth's phase of the model when it is not ready. It is also the
// error ChatCompletion returns when no replica answered.
type Error struct {
	Status     int           // the HTTP status
	Type       string        // OpenAI's error type: invalid_request_error, authentication_error, ...
	Code       string        // a machine-readable code: model_not_found, model_not_ready, rate_limit_exceeded, ...
	Message    string        // what happened, for a person
	Param      string        // the request field at fault, if one is
	Phase      string        // a model not ready: its phase (Phase*)
	RetryAfter time.Duration // > 0: sent as Retry-After
	cause      error
}

func (e *Error) Error() string { return e.Message }

// Unwrap returns the cause: a replica's transport error, a context's.
func (e *Error) Unwrap() error { return e.cause }

// errorBody is the JSON of an Error, as OpenAI's API writes its errors.
type errorBody struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    string  `json:"code"`
		Phase   string  `json:"phase,omitempty"`
	} `json:"error"`
}

func writeError(w http.ResponseWriter, e *Error) {
	var b errorBody
	b.Error.Message, b.Error.Type, b.Error.Code, b.Error.Phase = e.Message, e.Type, e.Code, e.Phase
	if e.Param != "" {
		b.Error.Param = &e.Param
	}
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(max(1, int((e.RetryAfter+time.Second-1)/time.Second))))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Status)
	_ = json.NewEncoder(w).Encode(b)
}

// authError is the OpenAI-style form of Authenticate's error.
func authError(err error) *Error {
	switch berth.ErrorCode(err) {
	case berth.ECodeUnauthorized:
		return &Error{Status: http.StatusUnauthorized, Type: "authentication_error", Code: "invalid_api_key",
			Message: "Incorrect API key provided: " + err.Error() + " (send a Berth token: Authorization: Bearer TOKEN)", cause: err}
	case berth.ECodeForbidden:
		return &Error{Status: http.StatusForbidden, Type: "permission_error", Code: "forbidden", Message: err.Error(), cause: err}
	}
	return &Error{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "unavailable", Message: err.Error(),
		RetryAfter: time.Second, cause: err}
}

// asError is err as an *Error, or a 500 holding it.
func asError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Status: http.StatusInternalServerError, Type: "server_error", Code: "internal_error", Message: err.Error(), cause: err}
}

// limiter is the per-token rate limits: a token bucket per token id that
// holds a minute's requests and refills continuously.
type limiter struct {
	now     func() time.Time
	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
	rpm    int
}

func newLimiter(now func() time.Time) *limiter {
	return &limiter{now: now, buckets: map[string]*bucket{}}
}

// allow takes one request from c's bucket; when it is empty it returns
// false and how long until it holds one.
func (l *limiter) allow(c *Caller) (bool, time.Duration) {
	if c.RPM <= 0 {
		return true, 0
	}
	key := c.TokenID
	if key == "" {
		key = "name:" + c.Name
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[key]
	if b == nil || b.rpm != c.RPM {
		b = &bucket{tokens: float64(c.RPM), at: now, rpm: c.RPM}
		l.buckets[key] = b
	}
	perSec := float64(c.RPM) / 60
	b.tokens = min(float64(c.RPM), b.tokens+now.Sub(b.at).Seconds()*perSec)
	b.at = now
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) / perSec * float64(time.Second))
}
