package controller

import (
	"context"
	"fmt"
	"iter"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/scheduler"
	"github.com/berth-dev/berth/store"
)

// Backend is an execution substrate behind the controller's one job
// namespace: where the attempts the lifecycle decides on run. The
// controller places attempts on a backend's workers, tells it to launch
// and stop them, and hears back of their ends; the backend owns how an
// attempt reaches a process. The agent pool (the WebSocket sessions of
// berth agent, agentPool) is built in; others (Kubernetes clusters) are
// added at run time by AddBackend, from the factory of their kind
// (Config.BackendKinds), and report through a BackendHost. Every
// backend's workers are in the controller's one worker table: the
// scheduler places a job on any worker of any backend, or, when the job
// names a backend (JobSpec.Backend), on that backend's only.
//
// A federation peer is not a backend: a peer receives whole jobs (seed
// 002, Model D) and runs its own controller, scheduler and backends over
// them, so it sits in front of a controller, not behind its lifecycle.
//
// Launch and Stop run on the controller's loop and must not block: what
// they send goes out once the loop's batch is durable (the agent pool), or
// is queued for the backend's own goroutines. Status and Close may be
// called from any goroutine.
type Backend interface {
	// Launch starts attempt a of job j, with env added to the job's
	// environment, once the batch that created a is durable. It cannot
	// fail: an attempt that does not start is reported ended (or times
	// out unaccepted).
	Launch(j *berth.Job, a *berth.Attempt, env map[string]string)
	// Stop asks for attempt a to be stopped (SIGTERM, grace, SIGKILL),
	// with reason and cause (a berth.Cause*, or "") for its record; its end
	// is reported as any end is. A stop for an attempt out of reach is
	// dropped: reconciling stops it once it is back.
	Stop(a *berth.Attempt, reason, cause string)
	// Status says how the backend is: its state, nodes, GPUs, pods and
	// when it last heard from its substrate.
	Status() berth.BackendStatus
	// Close stops the backend's goroutines; the attempts it runs are left
	// running, for a controller that adds it again to adopt.
	Close()
}

// SubmitChecker is a Backend that refuses, at submit, a job naming it that
// it could never run (a Kubernetes backend: no image and no default). It
// may be called from any goroutine; its error is an ECodeInvalid
// berth.Error naming the field.
type SubmitChecker interface {
	CheckSubmit(spec *berth.JobSpec) error
}

// BackendFactory builds a backend of one kind from its spec; host is how
// it reports into the controller. It may start goroutines (informers);
// the controller calls Close when the backend is removed or the
// controller stops.
type BackendFactory func(spec berth.BackendSpec, host BackendHost) (Backend, error)

// BackendHost is what a backend added by AddBackend reports through, from
// any goroutine: each call queues its change for the controller's loop
// and returns without waiting for it (it waits only while the loop's
// inbox is full). Attempts are named by id; a report of an attempt the
// controller no longer holds on the backend is ignored (fenced).
type BackendHost interface {
	// SetWorkers replaces the backend's workers, as it sees them now:
	// each one's capacity (GPUs, CPUs, memory, slots) less what others
	// than this controller's attempts hold, labels and queues; a worker
	// in State WorkerParked takes no new work (a cordoned node). Ids are
	// "BACKEND/NAME". A worker no longer listed is lost, with its
	// attempts.
	SetWorkers(workers []*berth.Worker)
	// Started reports that an attempt's process started.
	Started(attempt string)
	// Pending reports why a launched attempt has not started yet (""
	// once it has no reason): it becomes its job's reason.
	Pending(attempt, reason string)
	// Ended reports an attempt's end.
	Ended(attempt string, end AttemptEnd)
	// Log appends data to an attempt's log (stream berth.StreamStderr or
	// stdout's, ""), as an agent's log messages do.
	Log(attempt, stream string, data []byte)
	// Reconcile settles the attempts the backend runs (running) and has
	// seen end (finished), after its first sync or a resync, against
	// those the controller holds on its workers: a held attempt the
	// backend runs starts; a held attempt it neither runs nor has seen end
	// is relaunched when it never started and lost when it had; done gets
	// the running attempts that the controller no longer wants, for the
	// backend to stop. done runs on the loop and must not block.
	Reconcile(running, finished []string, done func(kill []string))
	// Logger is the controller's logger.
	Logger() *slog.Logger
	// Secrets returns the values of the secrets j references, by name
	// (nil when it references none). Loop only: from Launch.
	Secrets(j *berth.Job) map[string]string
	// Grace is how long a stopped attempt has between SIGTERM and
	// SIGKILL.
	Grace() time.Duration
	// Durable runs fn, off the loop, once everything the loop has written
	// so far is durable: Launch and Stop send through it, so that nothing
	// starts or stops on a decision a crash could undo. Loop only.
	Durable(fn func())
}

// AttemptEnd is how an attempt ended, as a backend reports it.
type AttemptEnd struct {
	State    berth.AttemptState // succeeded, failed or cancelled
	ExitCode *int
	Class    string // berth.Failure*, or ""
	Reason   string
}

// AgentPoolBackend is the name of the agent pool backend, the default.
const AgentPoolBackend = berth.BackendAgents

// BackendLabel is the scheduler label that every worker carries with its
// backend's name (AgentPoolBackend for an agent's): a job that names a
// backend is placed only on workers labelled with it.
const BackendLabel = "berth.dev/backend"

// hostedBackend is a backend added at run time, with what it was made
// from.
type hostedBackend struct {
	spec  berth.BackendSpec
	be    Backend  // nil while AddBackend builds it
	early []func() // reports made while it was built, for the loop once it is added
}

// backendSet holds the backends added at run time, by name; safe from any
// goroutine (submit checks names off the loop).
type backendSet struct {
	mu     sync.Mutex
	byName map[string]*hostedBackend
}

func (s *backendSet) get(name string) *hostedBackend {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byName[name]
}

func (s *backendSet) all() []*hostedBackend {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := slices.Collect(maps.Values(s.byName))
	slices.SortFunc(out, func(a, b *hostedBackend) int { return strings.Compare(a.spec.Name, b.spec.Name) })
	return out
}

// AddBackend builds spec's backend with the factory of its kind and adds
// it: its workers take work once it reports them. A name already used is
// an ECodeConflict error, an unknown kind or a spec the factory refuses
// an ECodeInvalid one; nothing is added then.
func (c *Controller) AddBackend(ctx context.Context, spec berth.BackendSpec) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	if spec.Name == AgentPoolBackend {
		return &berth.Error{Code: berth.ECodeConflict, Field: "name", Message: fmt.Sprintf("backend %q is the agent pool's", spec.Name)}
	}
	factory := c.cfg.BackendKinds[spec.Kind]
	if factory == nil {
		return berth.Invalidf("kind", "no backend kind %q on this server (kinds: %s)", spec.Kind,
			strings.Join(slices.Sorted(maps.Keys(c.cfg.BackendKinds)), ", "))
	}
	c.hosted.mu.Lock()
	if c.hosted.byName[spec.Name] != nil {
		c.hosted.mu.Unlock()
		return &berth.Error{Code: berth.ECodeConflict, Field: "name", Message: fmt.Sprintf("backend %q exists", spec.Name)}
	}
	hb := &hostedBackend{spec: spec}
	c.hosted.byName[spec.Name] = hb // reserved while it is built
	c.hosted.mu.Unlock()
	be, err := factory(spec, &backendHost{c: c, hb: hb})
	if err == nil {
		err = c.do(ctx, func() {
			hb.be = be
			c.bindWorkers(hb)
			for _, fn := range hb.early {
				fn()
			}
			hb.early = nil
		})
		if err != nil {
			be.Close()
		}
	}
	if err != nil {
		c.hosted.mu.Lock()
		delete(c.hosted.byName, spec.Name)
		c.hosted.mu.Unlock()
		return fmt.Errorf("backend %s: %w", spec.Name, err)
	}
	return nil
}

// RemoveBackend closes the backend name and removes it: its workers are
// lost, and the attempts that ran there with them (their jobs retried
// elsewhere per their retries). An unknown name is ECodeNotFound.
func (c *Controller) RemoveBackend(ctx context.Context, name string) error {
	hb := c.hosted.get(name)
	if hb == nil || hb.be == nil {
		return &berth.Error{Code: berth.ECodeNotFound, Field: "name", Message: fmt.Sprintf("no backend %q", name)}
	}
	err := c.do(ctx, func() {
		now := c.now().UTC()
		for _, ws := range c.order {
			if ws.hosted == hb && ws.w.State != berth.WorkerLost {
				c.workerLost(ws, now)
				ws.hosted = nil
			}
		}
	})
	if err != nil {
		return err
	}
	c.hosted.mu.Lock()
	delete(c.hosted.byName, name)
	c.hosted.mu.Unlock()
	if r, ok := hb.be.(Remover); ok {
		if err := r.Remove(ctx); err != nil {
			c.log.Warn("backend removed; what it made is left", "backend", name, "err", err)
		}
	}
	hb.be.Close()
	return nil
}

// Remover is a Backend that deletes what it made (a cluster's pods) when
// it is removed: the attempts there are lost to the controller, and are
// not to run on beside their retries.
type Remover interface {
	Remove(ctx context.Context) error
}

// BackendStatuses returns every backend's status, the agent pool's
// ("agents") first, then the others' by name.
func (c *Controller) BackendStatuses() []berth.BackendStatus {
	out := []berth.BackendStatus{c.pool.Status()}
	for _, hb := range c.hosted.all() {
		if hb.be != nil {
			out = append(out, hb.be.Status())
		}
	}
	return out
}

// BackendAttempts returns how many active attempts the controller holds
// on the workers of backend name (placed there, starting or running),
// whatever the backend itself reports; 0 for a name it has no backend of.
func (c *Controller) BackendAttempts(ctx context.Context, name string) (int, error) {
	n := 0
	err := c.do(ctx, func() {
		for _, ws := range c.order {
			if ws.hosted != nil && ws.hosted.spec.Name == name {
				n += len(ws.attempts)
			}
		}
	})
	return n, err
}

// closeBackends closes every added backend, as the controller stops.
func (c *Controller) closeBackends() {
	for _, hb := range c.hosted.all() {
		if hb.be != nil {
			hb.be.Close()
		}
	}
}

// checkBackend refuses, with an ECodeInvalid error on backend, a job spec
// naming a backend this server does not have; on image, one naming a
// Kubernetes backend without an image when the backend has no default;
// and what else that backend refuses (SubmitChecker).
func (c *Controller) checkBackend(spec *berth.JobSpec) error {
	switch spec.Backend {
	case "", AgentPoolBackend:
		return nil
	}
	if hb := c.hosted.get(spec.Backend); hb != nil && hb.be != nil {
		if k := hb.spec.Kubernetes; k != nil && spec.Image == "" && k.ImageDefault == "" {
			return berth.Invalidf("image", "is required on backend %s, which runs containers and has no default image (--image IMAGE)", spec.Backend)
		}
		if sc, ok := hb.be.(SubmitChecker); ok {
			return sc.CheckSubmit(spec)
		}
		return nil
	}
	names := []string{AgentPoolBackend}
	for _, hb := range c.hosted.all() {
		names = append(names, hb.spec.Name)
	}
	return berth.Invalidf("backend", "no backend %q on this server (backends: %s)", spec.Backend, strings.Join(names, ", "))
}

// backendOf returns the backend ws's attempts run on.
func (l *lifecycle) backendOf(ws *workerState) Backend {
	if ws.hosted != nil {
		return ws.hosted.be
	}
	return l.agents
}

// reach yields the workers any backend could ever run an attempt on: the
// agent pool's connected now or heard from since since, and every added
// backend's. Loop only.
func (c *Controller) reach(since time.Time) iter.Seq[*scheduler.Worker] {
	return func(yield func(*scheduler.Worker) bool) {
		for _, ws := range c.order {
			if ws.w.State == berth.WorkerLost && ws.hosted != nil {
				continue
			}
			if (ws.hosted != nil || ws.sess != nil || ws.w.LastHeartbeat.After(since)) && !yield(ws.sched) {
				return
			}
		}
	}
}

// bindWorkers gives hb the workers named after it that the store held
// (after a restart, before it reports them): they are its again. Loop
// only.
func (c *Controller) bindWorkers(hb *hostedBackend) {
	prefix := hb.spec.Name + "/"
	for _, ws := range c.order {
		if strings.HasPrefix(ws.w.ID, prefix) && ws.w.State != berth.WorkerLost {
			ws.hosted = hb
			ws.recompute()
		}
	}
}

// backendHost is the BackendHost of one added backend.
type backendHost struct {
	c  *Controller
	hb *hostedBackend
}

func (h *backendHost) Logger() *slog.Logger { return h.c.log.With("backend", h.hb.spec.Name) }

func (h *backendHost) Secrets(j *berth.Job) map[string]string {
	if h.c.cfg.Secrets == nil || !referencesSecrets(j) {
		return nil
	}
	return h.c.cfg.Secrets.Resolve(j.User, jobText(j)...)
}

func (h *backendHost) Grace() time.Duration { return h.c.cfg.Grace }

func (h *backendHost) Durable(fn func()) { h.c.afterCommit(fn) }

// post queues fn for the loop; a report that arrives while AddBackend is
// still building the backend waits for it to be added.
func (h *backendHost) post(fn func()) {
	_ = h.c.post(context.Background(), func() { // stopped: the report is moot
		if h.hb.be == nil {
			h.hb.early = append(h.hb.early, fn)
			return
		}
		fn()
	})
}

// attempt returns the active attempt id held on one of h's workers, or
// nil. Loop only.
func (h *backendHost) attempt(id string) *attemptState {
	if as := h.c.attempts[id]; as != nil && as.worker.hosted == h.hb {
		return as
	}
	return nil
}

func (h *backendHost) SetWorkers(workers []*berth.Worker) {
	h.post(func() { h.c.setWorkers(h.hb, workers) })
}

// setWorkers is SetWorkers on the loop.
func (c *Controller) setWorkers(hb *hostedBackend, workers []*berth.Worker) {
	if c.hosted.get(hb.spec.Name) != hb {
		return // removed since
	}
	now := c.now().UTC()
	listed := make(map[string]bool, len(workers))
	var b store.Batch
	for _, w := range workers {
		listed[w.ID] = true
		ws := c.workers[w.ID]
		if ws == nil {
			ws = newWorkerState(&berth.Worker{ID: w.ID, RegisteredAt: now})
			ws.hosted = hb
			c.addWorker(ws)
			c.emit(berth.Event{Time: now, Type: berth.EventWorkerRegistered, WorkerID: w.ID, Host: w.Host})
		}
		ws.hosted = hb
		ws.cordoned = w.State == berth.WorkerParked
		old := *ws.w
		labels := maps.Clone(w.Labels)
		if labels == nil {
			labels = map[string]string{}
		}
		labels[BackendLabel] = hb.spec.Name
		ws.w.Host, ws.w.Queues, ws.w.GPUs, ws.w.CPUs, ws.w.Memory, ws.w.Slots, ws.w.Labels, ws.w.Version =
			w.Host, w.Queues, w.GPUs, w.CPUs, w.Memory, w.Slots, labels, w.Version
		ws.w.State, ws.w.LastHeartbeat, ws.lastSeen = berth.WorkerReady, now, now.UnixNano()
		ws.recompute()
		if old.State != ws.w.State || old.Host != ws.w.Host || !slices.Equal(old.GPUs, ws.w.GPUs) || old.CPUs != ws.w.CPUs ||
			old.Memory != ws.w.Memory || old.Slots != ws.w.Slots || !maps.Equal(old.Labels, ws.w.Labels) ||
			!slices.Equal(old.Queues, ws.w.Queues) {
			b.Workers = append(b.Workers, c.workerCopy(ws))
		}
	}
	for _, ws := range c.order {
		if ws.hosted == hb && !listed[ws.w.ID] && ws.w.State != berth.WorkerLost {
			c.workerLost(ws, now)
		}
	}
	if len(b.Workers) > 0 {
		c.write(&b)
	}
	c.dirty = c.dirty || c.queue.Len() > 0
}

func (h *backendHost) Started(id string) {
	h.post(func() {
		if as := h.attempt(id); as != nil && as.a.State == berth.AttemptAssigned {
			h.c.markRunning(as, h.c.now().UTC())
		}
	})
}

func (h *backendHost) Pending(id, reason string) {
	h.post(func() {
		as := h.attempt(id)
		if as == nil || as.a.State != berth.AttemptAssigned {
			return
		}
		js := as.job
		if js.cancelRequested() || js.view().Reason == reason {
			return
		}
		js.own().Reason = reason
		h.c.writeJob(js)
	})
}

func (h *backendHost) Ended(id string, e AttemptEnd) {
	h.post(func() {
		if as := h.attempt(id); as != nil {
			h.c.attemptEnded(as, e.State, e.ExitCode, e.Class, "", e.Reason)
		}
	})
}

func (h *backendHost) Log(id, stream string, data []byte) {
	h.post(func() {
		if as := h.attempt(id); as != nil {
			h.c.appendLog(as, stream, data)
		}
	})
}

// relaunchEnv returns Berth's environment for an attempt launched again
// (its pod never made before a restart): a gang member's rendezvous, from
// its rank 0's durable worker and port; nil for a single-node job, or
// once rank 0 has ended (the gang is stopping).
func relaunchEnv(as *attemptState) map[string]string {
	js := as.job
	if len(js.members) < 2 || js.members[0] == nil {
		return nil
	}
	return memberEnv(js.members[0], len(js.members), js.view().Resources.GPUs, as.a.TaskIndex)
}

func (h *backendHost) Reconcile(running, finished []string, done func(kill []string)) {
	h.post(func() {
		c := h.c
		now := c.now().UTC()
		runs, ended := map[string]bool{}, map[string]bool{}
		var kill []string
		for _, id := range running {
			runs[id] = true
			if as := h.attempt(id); as == nil || as.stopReason() != "" {
				kill = append(kill, id)
			}
		}
		for _, id := range finished {
			ended[id] = true
		}
		for _, ws := range c.order {
			if ws.hosted != h.hb {
				continue
			}
			for id, as := range ws.attempts {
				switch {
				case runs[id] && as.a.State == berth.AttemptAssigned:
					c.markRunning(as, now)
				case runs[id] || ended[id]: // its end is on its way
				case as.a.State == berth.AttemptAssigned:
					h.hb.be.Launch(as.job.own(), as.a, relaunchEnv(as))
				default:
					c.endAttempt(as, berth.AttemptLost, nil, "its pod is gone", now)
				}
			}
		}
		done(kill)
	})
}
