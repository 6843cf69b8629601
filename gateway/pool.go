package gateway

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth"
)

// The phases of a model, as GET /v1/models and a 503 name them: ready, or
// where its most advanced service is on the way there (the warming
// phases come from the readiness markers the service printed last).
const (
	PhaseReady          = "ready"              // a replica serves it
	PhasePending        = "pending"            // its service waits for a worker, or for its restart
	PhaseStarting       = "starting"           // its process started, its port is not bound yet
	PhaseLoadingWeights = "loading_weights"    // warming: loading the weights
	PhaseKVCache        = "kv_cache"           // warming: profiling memory and allocating the KV cache
	PhaseCUDAGraphs     = "cuda_graph_capture" // warming: capturing CUDA graphs
	PhaseWarming        = "warming"            // warming, no finer phase known (starting its API server)
	PhaseUnready        = "unready"            // it was ready; its liveness probe fails
	PhaseFailed         = "failed"             // its attempt failed its readiness check; it is restarted
	PhaseStopping       = "stopping"           // its service is being stopped (cancelled, swapped out)
)

// markerPhase is the warming phase that a service whose last startup
// marker is marker is in: what it does after printing it.
func markerPhase(marker string) string {
	m := strings.ToLower(marker)
	switch {
	case m == "":
		return PhaseWarming
	case strings.Contains(m, "graph capturing finished"), strings.Contains(m, "init engine"),
		strings.Contains(m, "starting vllm api server"), strings.Contains(m, "application startup complete"):
		return PhaseWarming
	case strings.Contains(m, "cuda graph"):
		return PhaseCUDAGraphs
	case strings.Contains(m, "kv cache"), strings.Contains(m, "loading weights took"), strings.Contains(m, "model loading took"):
		return PhaseKVCache
	}
	return PhaseLoadingWeights
}

// phaseRank orders the phases: a model served by several services is in
// the most advanced one's phase.
var phaseRank = []string{PhaseStopping, PhaseFailed, PhasePending, PhaseStarting, PhaseLoadingWeights, PhaseKVCache, PhaseCUDAGraphs,
	PhaseWarming, PhaseUnready, PhaseReady}

// retryAfter is how long a client is told to wait for a model in phase.
func retryAfter(phase string) time.Duration {
	switch phase {
	case PhaseCUDAGraphs, PhaseWarming, PhaseUnready:
		return 2 * time.Second
	case PhaseKVCache:
		return 5 * time.Second
	}
	return 10 * time.Second
}

// replica is one ready endpoint of a model, kept across snapshots by its
// attempt: its outstanding requests and when a failure cools it down
// until.
type replica struct {
	id, url, host string
	outstanding   int
	cooledUntil   time.Time
}

// model is what the gateway knows of one model at a snapshot.
type model struct {
	id       string
	replicas []*replica
	phase    string // PhaseReady when it has replicas
	swapping bool   // not ready, and the arbiter's service (a swap) brings it up
	since    time.Time
}

// pool keeps a snapshot of the cluster's models, read again once it is
// older than refresh, and the replicas' load and cooldowns.
type pool struct {
	cluster  Cluster
	refresh  time.Duration
	cooldown time.Duration
	now      func() time.Time

	mu       sync.Mutex
	read     time.Time
	models   map[string]*model
	replicas map[string]*replica // by attempt id
	turn     int                 // rotates ties among equally loaded replicas
	loading  chan struct{}       // closed when the read in flight ends; nil: none
	err      error
}

func newPool(c Cluster, refresh, cooldown time.Duration, now func() time.Time) *pool {
	return &pool{cluster: c, refresh: refresh, cooldown: cooldown, now: now, replicas: map[string]*replica{}}
}

// snapshot returns the models, read again if the copy is stale; one read
// runs at a time, the others wait for it.
func (p *pool) snapshot(ctx context.Context) (map[string]*model, error) {
	p.mu.Lock()
	for p.models == nil || p.now().Sub(p.read) >= p.refresh {
		if wait := p.loading; wait != nil {
			p.mu.Unlock()
			select {
			case <-wait:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			p.mu.Lock()
			if p.err != nil && p.loading == nil {
				err := p.err
				p.mu.Unlock()
				return nil, err
			}
			continue
		}
		done := make(chan struct{})
		p.loading = done
		p.mu.Unlock()
		// The read serves every waiting request: not cut short by this one's end.
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		models, err := p.load(lctx)
		cancel()
		p.mu.Lock()
		p.loading, p.err = nil, err
		close(done)
		if err != nil {
			p.mu.Unlock()
			return nil, err
		}
		p.install(models)
	}
	m := p.models
	p.mu.Unlock()
	return m, nil
}

// load reads the endpoints and services into models (replicas not yet
// the pool's).
func (p *pool) load(ctx context.Context) (map[string]*model, error) {
	eps, err := p.cluster.Endpoints(ctx)
	if err != nil {
		return nil, fmt.Errorf("read endpoints: %w", err)
	}
	svcs, err := p.cluster.Services(ctx)
	if err != nil {
		return nil, fmt.Errorf("read services: %w", err)
	}
	models := map[string]*model{}
	get := func(id string) *model {
		m := models[id]
		if m == nil {
			m = &model{id: id, phase: PhaseStopping}
			models[id] = m
		}
		return m
	}
	for _, e := range eps {
		if e.Model == "" {
			continue
		}
		m := get(e.Model)
		m.phase = PhaseReady
		m.replicas = append(m.replicas, &replica{id: e.AttemptID, url: e.URL, host: e.Host})
		if m.since.IsZero() || e.ReadySince.Before(m.since) {
			m.since = e.ReadySince
		}
	}
	for _, s := range svcs {
		id := s.Model
		if id == "" {
			id = s.Vars["MODEL_NAME"]
		}
		if id == "" {
			continue
		}
		m := get(id)
		if m.phase == PhaseReady {
			continue
		}
		ph := servicePhase(s)
		if slices.Index(phaseRank, ph) > slices.Index(phaseRank, m.phase) {
			m.phase = ph
		}
		m.swapping = m.swapping || s.User == "arbiter"
		if m.since.IsZero() || s.CreatedAt.Before(m.since) {
			m.since = s.CreatedAt
		}
	}
	return models, nil
}

// servicePhase is the phase of a service not (or no longer) ready.
func servicePhase(s *berth.Service) string {
	if s.Stopping {
		return PhaseStopping
	}
	switch s.Phase {
	case "":
		return PhasePending
	case berth.PhaseStarting:
		return PhaseStarting
	case berth.PhaseWarming:
		return markerPhase(s.Marker)
	case berth.PhaseReady, berth.PhaseUnready: // ready, lease not yet renewed or lapsed
		return PhaseUnready
	}
	return PhaseFailed
}

// invalidate makes the next snapshot read the cluster again.
func (p *pool) invalidate() {
	p.mu.Lock()
	p.read = time.Time{}
	p.mu.Unlock()
}

// install makes models the snapshot, keeping the load and cooldowns of the
// replicas still there. Called with p.mu held.
func (p *pool) install(models map[string]*model) {
	kept := make(map[string]*replica, len(p.replicas))
	for _, m := range models {
		for i, r := range m.replicas {
			if old := p.replicas[r.id]; old != nil {
				old.url, old.host = r.url, r.host
				m.replicas[i] = old
			}
			kept[r.id] = m.replicas[i]
		}
	}
	p.models, p.replicas, p.read = models, kept, p.now()
}

// acquire picks a replica of model id for a request, not one of tried:
// of those not cooled down (of all when every one is), the one with the
// fewest requests outstanding, ties taken in turn. It counts the request
// outstanding until release. A model with no replica left is an *Error:
// 404 when the cluster has never heard of it, else 503 with its phase.
func (p *pool) acquire(ctx context.Context, id string, tried []*replica) (*replica, error) {
	models, err := p.snapshot(ctx)
	if err != nil {
		return nil, &Error{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "unavailable",
			Message: "the gateway cannot read the cluster's endpoints: " + err.Error(), RetryAfter: time.Second, cause: err}
	}
	m := models[id]
	if m == nil {
		return nil, &Error{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "model_not_found", Param: "model",
			Message: fmt.Sprintf("The model `%s` does not exist: no service of this cluster serves it (GET /v1/models lists those that do)", id)}
	}
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	var best *replica
	bestCool := true
	p.turn++
	n := len(m.replicas)
	for k := range n {
		r := m.replicas[(k+p.turn)%n]
		if slices.Contains(tried, r) {
			continue
		}
		cool := now.Before(r.cooledUntil)
		if best == nil || (bestCool && !cool) || (cool == bestCool && r.outstanding < best.outstanding) {
			best, bestCool = r, cool
		}
	}
	if best == nil {
		return nil, notReady(m)
	}
	best.outstanding++
	return best, nil
}

// codeReplicasFailed is the code of acquire's error when every replica of
// a model was tried: send answers with the last one's failure instead.
const codeReplicasFailed = "replicas_failed"

// notReady is the 503 of model m with no replica to try.
func notReady(m *model) *Error {
	phase := m.phase
	what := strings.ReplaceAll(phase, "_", " ")
	var msg string
	switch {
	case phase == PhaseReady: // every replica was tried, and is still listed
		return &Error{Status: http.StatusServiceUnavailable, Type: "server_error", Code: codeReplicasFailed, Param: "model",
			Message: fmt.Sprintf("The model `%s` is not available: its replicas failed this request", m.id), RetryAfter: time.Second}
	case m.swapping:
		msg = fmt.Sprintf("The model `%s` is being swapped in (%s); retry later", m.id, what)
	case phase == PhaseStopping:
		msg = fmt.Sprintf("The model `%s` is being stopped; no replica serves it", m.id)
	case phase == PhaseUnready:
		msg = fmt.Sprintf("The model `%s` is not ready: its service fails its liveness check; retry later", m.id)
	case phase == PhaseFailed || phase == PhasePending:
		msg = fmt.Sprintf("The model `%s` has no ready replica (its service is %s); retry later", m.id, what)
	default:
		msg = fmt.Sprintf("The model `%s` is warming up (%s); retry later", m.id, what)
	}
	return &Error{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "model_not_ready", Param: "model",
		Message: msg, Phase: phase, RetryAfter: retryAfter(phase)}
}

// release ends a request on r; failed cools r down.
func (p *pool) release(r *replica, failed bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r.outstanding--
	if failed {
		r.cooledUntil = p.now().Add(p.cooldown)
	}
}
