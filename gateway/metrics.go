package gateway

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"
)

// latencyBounds are the buckets of the gateway's latency histograms, in
// seconds: from a fast embedding to a long completion.
var latencyBounds = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}

type requestKey struct{ route, model, code string }

type tokenKey struct{ model, user, kind string }

// metrics are the gateway's counters and histograms since the server
// started.
type metrics struct {
	mu       sync.Mutex
	requests map[requestKey]uint64
	tokens   map[tokenKey]uint64
	retries  map[string]uint64          // by model
	latency  map[string]*latencyBuckets // by route
}

type latencyBuckets struct {
	counts []uint64 // per bound, not cumulative; the last for +Inf
	sum    float64
	n      uint64
}

func newMetrics() *metrics {
	return &metrics{requests: map[requestKey]uint64{}, tokens: map[tokenKey]uint64{}, retries: map[string]uint64{},
		latency: map[string]*latencyBuckets{}}
}

// request counts a request answered with status.
func (m *metrics) request(route, model string, status int) {
	m.mu.Lock()
	m.requests[requestKey{route, model, strconv.Itoa(status)}]++
	m.mu.Unlock()
}

// retry counts a request sent again to another replica.
func (m *metrics) retry(model string) {
	m.mu.Lock()
	m.retries[model]++
	m.mu.Unlock()
}

// done counts a request a replica answered: its status, how long it took
// end to end, and the tokens of its usage.
func (m *metrics) done(route, model, user string, status int, took time.Duration, u *usage) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.requests[requestKey{route, model, strconv.Itoa(status)}]++
	h := m.latency[route]
	if h == nil {
		h = &latencyBuckets{counts: make([]uint64, len(latencyBounds)+1)}
		m.latency[route] = h
	}
	s := took.Seconds()
	i, _ := slices.BinarySearch(latencyBounds, s)
	h.counts[i]++
	h.sum += s
	h.n++
	if u != nil {
		m.tokens[tokenKey{model, user, "prompt"}] += uint64(max(0, u.PromptTokens))
		m.tokens[tokenKey{model, user, "completion"}] += uint64(max(0, u.CompletionTokens))
	}
}

// WriteMetrics writes the gateway's series in Prometheus' text format:
// berth_gateway_requests_total{route,model,code},
// berth_gateway_tokens_total{model,user,kind} (kind prompt or completion,
// from the answers' usage), berth_gateway_retries_total{model} and the
// histogram berth_gateway_request_duration_seconds{route}.
func (g *Gateway) WriteMetrics(w io.Writer) {
	m := g.metrics
	m.mu.Lock()
	defer m.mu.Unlock()
	fmt.Fprintln(w, "# HELP berth_gateway_requests_total Requests to the inference gateway since the server started, by route, model and status.")
	fmt.Fprintln(w, "# TYPE berth_gateway_requests_total counter")
	for _, k := range sortedKeys(m.requests, func(k requestKey) string { return k.route + "\x00" + k.model + "\x00" + k.code }) {
		fmt.Fprintf(w, "berth_gateway_requests_total{route=%q,model=%q,code=%q} %d\n", k.route, k.model, k.code, m.requests[k])
	}
	fmt.Fprintln(w, "# HELP berth_gateway_tokens_total Tokens of the gateway's answers since the server started, from their usage, by model, user and kind (prompt, completion).")
	fmt.Fprintln(w, "# TYPE berth_gateway_tokens_total counter")
	for _, k := range sortedKeys(m.tokens, func(k tokenKey) string { return k.model + "\x00" + k.user + "\x00" + k.kind }) {
		fmt.Fprintf(w, "berth_gateway_tokens_total{model=%q,user=%q,kind=%q} %d\n", k.model, k.user, k.kind, m.tokens[k])
	}
	fmt.Fprintln(w, "# HELP berth_gateway_retries_total Requests the gateway sent again to another replica after one failed, since the server started, by model.")
	fmt.Fprintln(w, "# TYPE berth_gateway_retries_total counter")
	for _, model := range slices.Sorted(maps.Keys(m.retries)) {
		fmt.Fprintf(w, "berth_gateway_retries_total{model=%q} %d\n", model, m.retries[model])
	}
	fmt.Fprintln(w, "# HELP berth_gateway_request_duration_seconds Time from a request's arrival to the end of its answer (a stream's last byte), by route.")
	fmt.Fprintln(w, "# TYPE berth_gateway_request_duration_seconds histogram")
	for _, route := range slices.Sorted(maps.Keys(m.latency)) {
		h := m.latency[route]
		var cum uint64
		for i, b := range latencyBounds {
			cum += h.counts[i]
			fmt.Fprintf(w, "berth_gateway_request_duration_seconds_bucket{route=%q,le=%q} %d\n", route, strconv.FormatFloat(b, 'g', -1, 64), cum)
		}
		fmt.Fprintf(w, "berth_gateway_request_duration_seconds_bucket{route=%q,le=\"+Inf\"} %d\n", route, h.n)
		fmt.Fprintf(w, "berth_gateway_request_duration_seconds_sum{route=%q} %g\n", route, h.sum)
		fmt.Fprintf(w, "berth_gateway_request_duration_seconds_count{route=%q} %d\n", route, h.n)
	}
}

// sortedKeys returns m's keys in the order of their text.
func sortedKeys[K comparable, V any](m map[K]V, text func(K) string) []K {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b K) int {
		ta, tb := text(a), text(b)
		switch {
		case ta < tb:
			return -1
		case ta > tb:
			return 1
		}
		return 0
	})
	return keys
}
