// Package controller is Berth's state machine. One goroutine (the loop)
// owns every job, attempt and worker in memory; API calls and agent messages
// reach it as closures. The lifecycle (lifecycle.go) makes the transitions
// and gathers their effects; the loop applies them: each pass's rows are
// written through the store's group committer, and nobody outside is told
// of them (an API reply, an agent message, an event) until they are
// durable. Attempts run on a Backend, the agent pool. On start the
// controller rebuilds its memory from the store.
package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/scheduler"
	"github.com/berth-dev/berth/store"
)

// Store is what the controller needs of durable storage: the batches of
// its lifecycle and the reads it rebuilds and answers from, the worker
// controls others may write, and the federation's reads; store.Store is
// one.
type Store interface {
	store.JobStore
	store.ControlReader
	store.FederationStore
}

// Config configures a Controller. Zero durations take the defaults.
type Config struct {
	Store     Store
	Log       *slog.Logger
	Now       func() time.Time
	Scheduler *scheduler.Config // nil: scheduler.DefaultConfig
	// Lease is how long an agent may go unheard before it self-fences, and
	// its attempts check invalid (AttemptValidity); the server declares the
	// worker lost, and gives its attempts' jobs to other workers, after
	// Lease + FenceMargin.
	Lease time.Duration
	// FenceMargin is the time after the lease before a worker is lost: 2 ×
	// Heartbeat by default, and never less than one Heartbeat, so that an
	// attempt that checked valid has at least a heartbeat before another
	// attempt of its job can start.
	FenceMargin   time.Duration
	Heartbeat     time.Duration // agent heartbeat interval
	AcceptTimeout time.Duration // assignment → job_accepted
	Grace         time.Duration // SIGTERM → SIGKILL on cancel
	Housekeeping  time.Duration // lease and timeout checks
	// ControlPoll is how often worker controls are read back from the
	// store, to apply those written there directly (plain SQL).
	ControlPoll time.Duration
	// StoreEvents stores every event with the change it describes, so that
	// the event stream survives a restart or a change of leader; without
	// it events live in memory only (about 12% more no-op throughput on
	// SQLite).
	StoreEvents bool
	// Audit, when set, gets every event before the change it describes is
	// committed; an error stops the controller (see Failed), as a store
	// error does: no change goes unrecorded.
	Audit Auditor
	// Expand, when set, fills a submitted spec from its template and
	// checks its variables before it is validated; its error (ECodeInvalid)
	// refuses the submission.
	Expand func(*berth.JobSpec) error
	// Services, when set, says how agents run service jobs (ports,
	// readiness); without it a service runs like a batch job that is
	// restarted.
	Services ServiceResolver
	// Secrets, when set, resolves the {{SECRET:NAME}} references of a job
	// as it is assigned; the values travel in the assignment only.
	Secrets SecretResolver
	// PeerTokens, when set, seals federation peers' tokens (PutPeer);
	// without it a peer with a token cannot be stored.
	PeerTokens PeerSealer
	// PeerUsers maps a federation origin's name to the user the jobs it
	// hands to this cluster run as; an origin not in it: its own name.
	PeerUsers map[string]string
	// ChangelogRetention is how long a changelog row of a received job
	// is kept while its origin has not acknowledged it, and a tombstone
	// even once it has (federation.Prunable); 0: no row goes by age (a
	// row goes once acknowledged, a tombstone never).
	ChangelogRetention time.Duration
	// BackendKinds builds the backends AddBackend adds, by kind
	// (berth.BackendSpec.Kind): cmd/berth names "kubernetes" kube.New.
	BackendKinds map[string]BackendFactory
}

// Auditor appends events to a durable audit log (the audit package's Log).
type Auditor interface {
	// RecordEvents appends events and returns once they are durable.
	RecordEvents(events []*berth.Event) error
	// Head returns the seq and line hash of the log's last durable
	// record.
	Head() (seq uint64, hash string)
}

// SecretResolver looks up secret values for a job's assignment.
type SecretResolver interface {
	// Resolve returns the values of owner's secrets that s references as
	// {{SECRET:NAME}}, by name; names with no secret are left out (the
	// agent fails the attempt, naming them). It returns nil when s
	// references none.
	Resolve(owner string, s ...string) map[string]string
	// Missing returns the names texts reference that owner has no secret
	// for.
	Missing(owner string, texts ...string) []string
}

func (c *Config) setDefaults() {
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Scheduler == nil {
		def := scheduler.DefaultConfig()
		c.Scheduler = &def
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.Lease, 30*time.Second)
	def(&c.Heartbeat, 5*time.Second)
	def(&c.FenceMargin, 2*c.Heartbeat)
	c.FenceMargin = max(c.FenceMargin, c.Heartbeat)
	def(&c.AcceptTimeout, 30*time.Second)
	def(&c.Grace, 10*time.Second)
	def(&c.Housekeeping, time.Second)
	def(&c.ControlPoll, 5*time.Second)
}

// Controller runs the state machine. Create it with New, then Start.
type Controller struct {
	cfg       Config
	store     Store
	committer *store.Committer
	bus       *Bus

	inbox     chan func()
	stop      chan struct{}
	done      chan struct{}
	stopPolls context.CancelFunc

	failOnce sync.Once
	failed   chan struct{}
	failErr  error

	// Owned by the loop.
	lifecycle
	pool     *agentPool                  // the agent pool, the built-in Backend
	hosted   backendSet                  // the Backends added at run time
	quotas   map[string]*berth.QuotaRule // by ID()
	reserved map[string]string           // worker id → job holding it, from the last full pass
	hinted   map[string]time.Time        // model → when a worker was last asked to prewarm it
	waiters  map[*waiter]struct{}
	origin   originState // the federation, as an origin (federation.go)
	peers    peerSet     // federation peers (peers.go)
	rentable Rentable    // what cloud pools could rent (pools.go); nil: none
	prune    pruning     // of the federation changelog

	logMu     sync.Mutex
	logNotify chan struct{}

	metrics atomic.Pointer[Metrics] // what Metrics returns, published by the loop
}

// newCommitter returns the store's committer, which, when cfg.Audit is
// set, appends each batch's audit records while the store makes the
// batch's changes, and lets it commit them only after, with the log's new
// head (store.AuditHead): a log cut short below it shows.
func newCommitter(cfg Config) *store.Committer {
	c := store.NewCommitter(cfg.Store)
	if cfg.Audit != nil {
		c.Prepare = func(b *store.Batch) (*store.AuditHead, error) {
			if len(b.Audit) == 0 {
				return nil, nil
			}
			if err := cfg.Audit.RecordEvents(b.Audit); err != nil {
				return nil, fmt.Errorf("audit log: %w", err)
			}
			seq, hash := cfg.Audit.Head()
			return &store.AuditHead{Seq: seq, Hash: hash}, nil
		}
	}
	return c
}

// New returns a controller over cfg.Store. It does nothing until Start.
func New(cfg Config) *Controller {
	cfg.setDefaults()
	c := &Controller{
		cfg: cfg, store: cfg.Store,
		committer: newCommitter(cfg),
		bus:       NewBus(store.KeptEvents),
		inbox:     make(chan func(), 4096),
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
		failed:    make(chan struct{}),
		lifecycle: newLifecycle(&cfg),
		quotas:    map[string]*berth.QuotaRule{},
		hinted:    map[string]time.Time{},
		waiters:   map[*waiter]struct{}{},
		logNotify: make(chan struct{}),
	}
	c.pool = &agentPool{l: &c.lifecycle, cfg: &c.cfg}
	c.agents = c.pool
	c.hosted.byName = map[string]*hostedBackend{}
	c.hooks = hooks{jobEnded: c.jobEnded, notifyLogs: c.notifyLogs, prewarm: c.prewarm, stopFederated: c.stopFederated}
	return c
}

// Bus returns the event bus.
func (c *Controller) Bus() *Bus { return c.bus }

// Failed is closed when the controller stopped because the store failed;
// Err then says why. The server should exit: on restart nothing
// acknowledged is lost.
func (c *Controller) Failed() <-chan struct{} { return c.failed }

// Err returns the store failure that stopped the controller, if any.
func (c *Controller) Err() error {
	select {
	case <-c.failed:
		return c.failErr
	default:
		return nil
	}
}

// storeFailedError is what callers get once the store has failed.
func (c *Controller) storeFailedError() error {
	return berth.Errorf(berth.ECodeUnavailable, "store failed").WithCause(c.failErr)
}

func (c *Controller) fail(err error) {
	c.failOnce.Do(func() {
		c.failErr = err
		c.log.Error("controller stopped: store write failed", "err", err)
		close(c.failed)
	})
}

// Start loads active state from the store and starts the loop. It returns
// the store's error if loading fails.
func (c *Controller) Start(ctx context.Context) error {
	ld := &jobLoader{c: c}
	active, err := c.store.LoadActive(ctx, ld.add)
	if err != nil {
		return fmt.Errorf("load state: %w", err)
	}
	c.rebuild(active, ld)
	c.publishMetrics() // before the loop runs: Metrics answers from the start
	c.committer.Start()
	go c.loop()
	pollCtx, cancel := context.WithCancel(context.Background())
	c.stopPolls = cancel
	go c.pollControls(pollCtx, c.cfg.ControlPoll)
	return nil
}

// Stop ends the loop and waits for queued writes to be durable.
func (c *Controller) Stop(ctx context.Context) error {
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	if c.stopPolls != nil {
		c.stopPolls()
	}
	select {
	case <-c.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	c.prune.done.Wait() // the loop, stopped, starts no more
	c.closeBackends()
	c.committer.Stop()
	return nil
}

var errStopped = berth.Errorf(berth.ECodeUnavailable, "server is shutting down")

// do runs fn on the loop and waits for it to return.
func (c *Controller) do(ctx context.Context, fn func()) error {
	ran := make(chan struct{})
	if err := c.post(ctx, func() { fn(); close(ran) }); err != nil {
		return err
	}
	select {
	case <-ran:
		return nil
	case <-c.done:
		select {
		case <-c.failed: // the loop ended because the store failed: say so
			return c.storeFailedError()
		default:
			return errStopped
		}
	}
}

// post queues fn for the loop without waiting for it to run.
func (c *Controller) post(ctx context.Context, fn func()) error {
	select {
	case c.inbox <- fn:
		return nil
	case <-c.stop:
		return errStopped
	case <-c.failed:
		return c.storeFailedError()
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *Controller) loop() {
	defer close(c.done)
	tick := time.NewTicker(c.cfg.Housekeeping)
	defer tick.Stop()
	for {
		select {
		case fn := <-c.inbox:
			fn()
			for i := 0; i < 1024; i++ { // take what else is waiting: fewer, larger commits
				select {
				case fn = <-c.inbox:
					fn()
					continue
				default:
				}
				break
			}
		case <-tick.C:
			c.housekeep()
		case <-c.stop:
			c.flush()
			return
		case <-c.failed:
			return
		}
		passed := c.dirty
		if passed {
			c.runPass()
		}
		if passed || c.fx.batch != nil || len(c.fx.after) > 0 {
			c.publishMetrics() // before the changes are durable, and so before anyone is told of them
		}
		c.flush()
	}
}

// durable returns a channel closed once every write made so far on the
// loop is in the store, so that a store read sees what the loop decided.
// Loop only.
func (c *Controller) durable() <-chan struct{} {
	ch := make(chan struct{})
	c.afterCommit(func() { close(ch) })
	return ch
}

// awaitDurable waits for a channel from durable.
func (c *Controller) awaitDurable(ctx context.Context, ch <-chan struct{}) error {
	select {
	case <-ch:
		return nil
	case <-c.failed:
		return c.storeFailedError()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// housekeep, on the loop's timer, ends what ran out of time: workers
// their backend has lost, backoffs, and assignments not accepted in time.
func (c *Controller) housekeep() {
	now := c.now().UTC()
	for _, id := range c.pool.Expire(now.Add(-(c.cfg.Lease + c.cfg.FenceMargin))) {
		c.workerLost(c.workers[id], now)
	}
	c.requeueDue(now)
	acceptBy := now.Add(-c.cfg.AcceptTimeout)
	for _, as := range c.attempts {
		if as.a.State == berth.AttemptAssigned && as.a.CreatedAt.Before(acceptBy) && as.worker.sess != nil {
			c.sendCancel(as, reasonWithdrawn)
			c.endAttempt(as, berth.AttemptCancelled, nil, reasonWithdrawn, now)
		}
	}
	c.housekeepReceived(now)
}

// flush carries out the effects of the loop's pass: it commits the batch
// and, once it is durable, sends, publishes and answers in order.
func (c *Controller) flush() {
	b, after := c.fx.take()
	if b == nil && len(after) == 0 {
		return
	}
	if b == nil {
		b = &store.Batch{}
	}
	c.committer.Commit(b, func(err error) {
		if err != nil {
			c.fail(err)
			return
		}
		for i := range after {
			c.apply(&after[i])
		}
	})
}

// apply carries out one effect of a durable batch.
func (c *Controller) apply(e *effect) {
	switch {
	case e.to != nil:
		e.to.send(e.typ, e.msg)
	case e.events != nil:
		c.bus.Publish(e.events...)
	default:
		e.fn()
	}
}

// notifyLogs wakes log followers.
func (c *Controller) notifyLogs() {
	c.logMu.Lock()
	close(c.logNotify)
	c.logNotify = make(chan struct{})
	c.logMu.Unlock()
}

// LogNotify returns a channel closed the next time logs are stored or a job
// ends.
func (c *Controller) LogNotify() <-chan struct{} {
	c.logMu.Lock()
	defer c.logMu.Unlock()
	return c.logNotify
}

// notFound is the error for an unknown job id.
func notFound(id string) error {
	return &berth.Error{Code: berth.ECodeNotFound, Field: "id", Message: fmt.Sprintf("no job %q", id)}
}

// isNotFound reports whether err is a not-found error.
func isNotFound(err error) bool {
	var e *berth.Error
	return errors.As(err, &e) && e.Code == berth.ECodeNotFound
}
