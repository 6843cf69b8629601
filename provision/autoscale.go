package provision

import (
	"context"
	"fmt"
	"iter"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/controller"
	"github.com/berth-dev/berth/scheduler"
	"github.com/berth-dev/berth/store"
)

// Renter rents one instance of a pool through every phase and gives
// instances back (the provisioner).
type Renter interface {
	// Provision rents one instance of pool and returns it once ready, or
	// the error that ended it. It stores the instance's record, with the
	// offer's price, before it sends the create, and rents no offer that
	// costs more than the pool's MaxPrice less what its live instances
	// cost; the autoscaler starts the next rental of a pool only once the
	// record of the one before is stored, so that this check sees it.
	Provision(ctx context.Context, pool *berth.Pool) (*berth.Instance, error)
	// Destroy gives inst back, recording reason on it.
	Destroy(ctx context.Context, inst *berth.Instance, reason string) error
}

// View is what the autoscaler reads from the controller and tells it;
// *controller.Controller is one.
type View interface {
	PendingDemand(ctx context.Context, waitedBefore time.Time) (*controller.PoolView, error)
	RecordPoolEvent(ctx context.Context, e berth.Event) error
}

// Pools is the store the autoscaler reads pools and instances from.
type Pools interface {
	Pools(ctx context.Context) ([]*berth.Pool, error)
	Instances(ctx context.Context, f store.InstanceFilter) ([]*berth.Instance, error)
}

// DefaultScaleAfter is how long jobs wait before a pool rents for them.
const DefaultScaleAfter = 30 * time.Second

// RetryLimit bounds how long a pool waits to rent again after rentals
// failed in a row: 1 s after the first, doubling (berth.DoublingDelay).
const RetryLimit = 10 * time.Minute

// Decision is what a pool's autoscaler does in one tick.
type Decision struct {
	// Rent is how many instances to rent now: 0 or 1, one create at a
	// time per pool, so that each rental's price check sees the instances
	// rented before it.
	Rent int
	// Headroom is the $/h the pool's cap leaves for a rental (0: the pool
	// has no price cap).
	Headroom float64
	// Wanted is how many more instances the waiting jobs want, counting
	// those starting and idle; Reason says which jobs.
	Wanted int
	Reason string
	// Cap names the cap that holds instances back ("max_instances" or
	// "max_price"), "" when none does; Capped says so in words.
	Cap, Capped string
	// Destroy lists the instances to give back, idle past the pool's
	// timeout.
	Destroy []Release
}

// Release is an instance to give back and why.
type Release struct {
	Instance *berth.Instance
	Reason   string
}

// Worker is the largest machine pool p can rent, as the scheduler sees
// it: p.GPUs GPUs of p.GPUType (their memory unknown, so 0), serving p's
// queues with p's labels; its CPUs and memory, unknown until rented, do
// not limit.
func Worker(p *berth.Pool) *scheduler.Worker {
	w := &scheduler.Worker{ID: "pool/" + p.Name, Host: "pool/" + p.Name, Queues: p.Queues, Labels: p.Labels,
		CPUs: math.MaxInt32, Memory: math.MaxInt64}
	for i := range p.GPUs {
		w.GPUs = append(w.GPUs, berth.GPU{Index: i, Model: p.GPUType})
	}
	return w
}

// runsJobs reports whether p's instances run jobs: their agents join the
// queue. A vLLM pool's nodes run none: the autoscaler neither rents them
// for waiting jobs nor gives them back for idleness, and admission does
// not count them (they are rented and given back by hand).
func runsJobs(p *berth.Pool) bool { return p.Workload != berth.WorkloadVLLM }

// rentsFor reports whether pools rent for jobs asking r with c: they ask
// for GPUs and are pinned to no host.
func rentsFor(r *berth.Resources, c *berth.Constraints) bool { return r.WantsGPUs() && c.Host == "" }

// supplies reports whether an instance of pool p (its Worker w) can run
// the jobs of demand d: they ask for GPUs, of a type it has and no more
// than it has, in a queue it serves, with labels it carries, pinned to
// no host.
func supplies(p *berth.Pool, w *scheduler.Worker, d *controller.Demand) bool {
	if !rentsFor(&d.Resources, &d.Constraints) {
		return false
	}
	if len(p.Queues) > 0 && !contains(p.Queues, d.Queue) {
		return false
	}
	for k, v := range d.Constraints.Labels {
		if got, ok := p.Labels[k]; !ok || got != v {
			return false
		}
	}
	one := func(yield func(*scheduler.Worker) bool) { yield(w) }
	return scheduler.NeverFits(one, &d.Resources, 1) == nil
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// starting reports whether inst is on its way to ready.
func starting(inst *berth.Instance) bool {
	switch inst.Phase {
	case berth.InstanceReady, berth.InstanceDraining, berth.InstanceFailed, berth.InstanceDestroyed:
		return false
	}
	return true
}

// Decide is the autoscaler's decision for pool p at now: demand is the
// jobs that have waited past the scale-up threshold (by shape), instances
// the pool's live instances (a rental under way whose record is not
// stored yet among them, as an instance creating with no ID), and idle
// the hosts whose workers hold no attempt, with since when.
//
// The waiting jobs the pool can supply want as many instances as they
// need (a gang's members one each, other jobs as many to an instance as
// its GPUs allow), less those starting and those ready and idle. It rents
// one of them, unless a rental's record is not stored yet, MaxInstances
// are live, or, when MaxPrice is set, the live instances leave no
// headroom under it or less than the cheapest of them costs (Capped
// says which). It gives back the ready instances idle past IdleTimeout
// (0: never). A pool whose instances run no jobs (runsJobs: a vLLM pool)
// decides nothing.
func Decide(p *berth.Pool, demand []controller.Demand, instances []*berth.Instance, idle map[string]time.Time, now time.Time) Decision {
	var d Decision
	if !runsJobs(p) {
		return d
	}
	idleTimeout := time.Duration(p.IdleTimeout)
	live, spend, cheapest, start, ready, unstored := 0, 0.0, 0.0, 0, 0, false
	for _, inst := range instances {
		if !inst.Live() {
			continue
		}
		live++
		spend += inst.PricePerH
		unstored = unstored || inst.ID == ""
		if inst.PricePerH > 0 && (cheapest == 0 || inst.PricePerH < cheapest) {
			cheapest = inst.PricePerH
		}
		switch {
		case starting(inst):
			start++
		case inst.Phase == berth.InstanceReady:
			since, ok := idle[inst.WorkerHost]
			if !ok || inst.WorkerHost == "" {
				continue
			}
			if inst.ReadyAt.After(since) {
				since = inst.ReadyAt
			}
			if idleFor := now.Sub(since); idleTimeout > 0 && idleFor >= idleTimeout {
				d.Destroy = append(d.Destroy, Release{inst, fmt.Sprintf("idle for %s (idle timeout %s)", idleFor.Round(time.Second), idleTimeout)})
				continue
			}
			ready++
		}
	}
	w := Worker(p)
	need, jobs := 0, 0
	var what []string
	for i := range demand {
		dm := &demand[i]
		if !supplies(p, w, dm) {
			continue
		}
		jobs += dm.Jobs
		if dm.Nodes > 1 {
			need += dm.Jobs * dm.Nodes
		} else if m := dm.Resources.GPUMilli; m > 0 { // fractions: as many as fit each GPU
			per := max(p.GPUs*(berth.WholeGPU/m), 1)
			need += (dm.Jobs + per - 1) / per
		} else {
			per := max(p.GPUs/dm.Resources.GPUs, 1)
			need += (dm.Jobs + per - 1) / per
		}
		what = append(what, fmt.Sprintf("%d × %s (queue %s, waiting since %s)", dm.Jobs, shapeText(dm), dm.Queue, dm.Since.UTC().Format(time.RFC3339)))
	}
	if d.Wanted = need - start - ready; d.Wanted <= 0 {
		d.Wanted = 0
		return d
	}
	d.Reason = fmt.Sprintf("%d waiting jobs want %d instances (%d starting, %d ready and idle): %s", jobs, need, start, ready, strings.Join(what, "; "))
	if p.MaxPrice > 0 {
		d.Headroom = max(p.MaxPrice-spend, 0)
	}
	switch {
	case live >= p.MaxInstances:
		d.Cap = "max_instances"
		d.Capped = fmt.Sprintf("%d more instances wanted: max instances %d reached (%d live)", d.Wanted, p.MaxInstances, live)
	case p.MaxPrice > 0 && (d.Headroom <= 0 || d.Headroom < cheapest):
		d.Cap = "max_price"
		d.Capped = fmt.Sprintf("%d more instances wanted: max $%.2f/h reached (live instances cost $%.2f/h)", d.Wanted, p.MaxPrice, spend)
	case !unstored:
		d.Rent = 1
	}
	return d
}

// shapeText is a demand's resources as an event says them.
func shapeText(d *controller.Demand) string {
	s := berth.FormatGPUs(d.Resources.GPUsMilli()) + " GPU"
	if d.Resources.GPUType != "" {
		s += " " + d.Resources.GPUType
	}
	if d.Nodes > 1 {
		s += fmt.Sprintf(" on %d nodes", d.Nodes)
	}
	return s
}

// Config configures an Autoscaler.
type Config struct {
	Pools Pools
	View  View
	// Renter rents and gives back the instances of every pool.
	Renter Renter
	// ScaleAfter is how long jobs wait before a pool rents for them
	// (DefaultScaleAfter when 0).
	ScaleAfter time.Duration
	// Tick is how often every pool is looked at (5s when 0).
	Tick time.Duration
	// DryRun emits what would be rented, and given back, without renting
	// or destroying anything.
	DryRun bool
	Log    *slog.Logger
	Now    func() time.Time
}

// Autoscaler runs Decide for every pool each tick and carries it out:
// rentals run in the background, each decision is an event with its
// reason (pool.scale_up, pool.scale_down, pool.capped). It also tells the
// controller what the pools could rent (Reach, for SetRentable).
type Autoscaler struct {
	cfg   Config
	reach atomic.Pointer[[]*scheduler.Worker]

	// Loop only.
	idleSince map[string]time.Time // host → since when it was seen idle
	said      map[string]string    // what the last capped and dry-run events of a pool (or instance) said, not to repeat it
	orphans   map[string]int       // pool → instances found part way at start (Adopt), for the next tick to resume

	mu         sync.Mutex
	renting    map[string]int  // pool → rentals in flight
	destroying map[string]bool // instance ids being given back
	// failed counts a pool's rentals that failed in a row; the pool rents
	// again only from retryAt (RetryLimit).
	failed  map[string]int
	retryAt map[string]time.Time
	wg      sync.WaitGroup
}

// New returns an autoscaler; it does nothing until Run or Tick.
func New(cfg Config) *Autoscaler {
	if cfg.ScaleAfter <= 0 {
		cfg.ScaleAfter = DefaultScaleAfter
	}
	if cfg.Tick <= 0 {
		cfg.Tick = 5 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	a := &Autoscaler{cfg: cfg, idleSince: map[string]time.Time{}, said: map[string]string{},
		renting: map[string]int{}, destroying: map[string]bool{}, failed: map[string]int{}, retryAt: map[string]time.Time{}}
	a.reach.Store(&[]*scheduler.Worker{})
	return a
}

// Reach yields, for a spec the pools rent for (rentsFor), each pool's
// Worker, as last read, once for each instance it may have
// (controller.Rentable); nothing for another spec. Safe for concurrent
// use.
func (a *Autoscaler) Reach(spec *berth.JobSpec) iter.Seq[*scheduler.Worker] {
	ws := *a.reach.Load()
	if !rentsFor(&spec.Resources, &spec.Constraints) {
		ws = nil
	}
	return func(yield func(*scheduler.Worker) bool) {
		for _, w := range ws {
			if !yield(w) {
				return
			}
		}
	}
}

// Load reads the pools and refreshes what Reach yields.
func (a *Autoscaler) Load(ctx context.Context) ([]*berth.Pool, error) {
	pools, err := a.cfg.Pools.Pools(ctx)
	if err != nil {
		return nil, fmt.Errorf("autoscaler: read pools: %w", err)
	}
	var ws []*scheduler.Worker
	for _, p := range pools {
		if !runsJobs(p) {
			continue
		}
		w := Worker(p)
		for range max(p.MaxInstances, 1) {
			ws = append(ws, w)
		}
	}
	a.reach.Store(&ws)
	return pools, nil
}

// Run ticks until ctx is done, then waits for the rentals and releases
// under way (which end with ctx).
func (a *Autoscaler) Run(ctx context.Context) {
	t := time.NewTicker(a.cfg.Tick)
	defer t.Stop()
	for {
		if err := a.Tick(ctx); err != nil && ctx.Err() == nil {
			a.cfg.Log.Warn("autoscaler tick", "err", err)
		}
		select {
		case <-ctx.Done():
			a.Wait()
			return
		case <-t.C:
		}
	}
}

// Wait waits for the rentals and releases under way.
func (a *Autoscaler) Wait() { a.wg.Wait() }

// Tick decides once for every pool and starts what it decides.
func (a *Autoscaler) Tick(ctx context.Context) error {
	pools, err := a.Load(ctx)
	if err != nil || len(pools) == 0 {
		return err
	}
	now := a.cfg.Now()
	view, err := a.cfg.View.PendingDemand(ctx, now.Add(-a.cfg.ScaleAfter))
	if err != nil {
		return fmt.Errorf("autoscaler: pending demand: %w", err)
	}
	live, err := a.cfg.Pools.Instances(ctx, store.InstanceFilter{Live: true})
	if err != nil {
		return fmt.Errorf("autoscaler: read instances: %w", err)
	}
	idle := a.idle(view, live, now)
	byPool := map[string][]*berth.Instance{}
	for _, inst := range live {
		byPool[inst.Pool] = append(byPool[inst.Pool], inst)
	}
	a.resume(ctx, pools)
	for _, p := range pools {
		insts := a.withRentals(p.Name, byPool[p.Name])
		d := Decide(p, view.Demand, insts, idle, now)
		if err := a.apply(ctx, p, d); err != nil {
			return err
		}
	}
	return nil
}

// Adopt notes the instances part way to ready now, before this process
// rents anything (at start, after a restart mid-provisioning), for the
// next tick to resume: one rental each, which the renter makes resume
// such an instance before it rents another, so that it is neither left
// billed nor rented twice.
func (a *Autoscaler) Adopt(ctx context.Context) error {
	live, err := a.cfg.Pools.Instances(ctx, store.InstanceFilter{Live: true})
	if err != nil {
		return fmt.Errorf("autoscaler: read instances: %w", err)
	}
	a.orphans = map[string]int{}
	for _, inst := range live {
		if starting(inst) {
			a.orphans[inst.Pool]++
		}
	}
	return nil
}

// resume starts the rentals that resume what Adopt found, for the pools
// that still exist; a dry run resumes nothing.
func (a *Autoscaler) resume(ctx context.Context, pools []*berth.Pool) {
	if a.cfg.DryRun {
		return
	}
	for _, p := range pools {
		n := a.orphans[p.Name]
		if n == 0 {
			continue
		}
		a.cfg.Log.Info("autoscaler: resuming instances part way", "pool", p.Name, "count", n)
		for range n {
			a.rent(ctx, p)
		}
	}
	a.orphans = nil
}

// idle returns the hosts with no attempt, and those of ready instances
// that have no worker (lost), with since when the autoscaler has seen
// them so; a host it sees busy forgets its time.
func (a *Autoscaler) idle(view *controller.PoolView, live []*berth.Instance, now time.Time) map[string]time.Time {
	seen, known := map[string]bool{}, map[string]bool{}
	for _, h := range view.Hosts {
		known[h.Host] = true
		if h.Running == 0 {
			seen[h.Host] = true
		}
	}
	for _, inst := range live {
		if inst.Phase == berth.InstanceReady && inst.WorkerHost != "" && !known[inst.WorkerHost] {
			seen[inst.WorkerHost] = true
		}
	}
	for h := range seen {
		if _, ok := a.idleSince[h]; !ok {
			a.idleSince[h] = now
		}
	}
	for h := range a.idleSince {
		if !seen[h] {
			delete(a.idleSince, h)
		}
	}
	out := make(map[string]time.Time, len(a.idleSince))
	for h, t := range a.idleSince {
		out[h] = t
	}
	return out
}

// withRentals adds to a pool's stored live instances the rentals in
// flight beyond its stored starting instances, as instances creating with
// no ID (a rental whose record is not stored yet), and marks those being
// given back draining.
func (a *Autoscaler) withRentals(pool string, stored []*berth.Instance) []*berth.Instance {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]*berth.Instance, 0, len(stored))
	storedStarting := 0
	for _, inst := range stored {
		if a.destroying[inst.ID] {
			c := *inst
			c.Phase = berth.InstanceDraining // counted, billed, not idle supply
			inst = &c
		}
		if starting(inst) {
			storedStarting++
		}
		out = append(out, inst)
	}
	for range a.renting[pool] - storedStarting {
		out = append(out, &berth.Instance{Pool: pool, Phase: berth.InstanceCreating})
	}
	return out
}

// apply carries out d for pool p: events, rentals and releases.
func (a *Autoscaler) apply(ctx context.Context, p *berth.Pool, d Decision) error {
	dry := a.cfg.DryRun
	for _, rel := range d.Destroy {
		reason := rel.Reason
		if dry {
			reason = "dry run: would give back: " + reason
			if a.said[p.Name+"/"+rel.Instance.ID] == reason {
				continue
			}
			a.said[p.Name+"/"+rel.Instance.ID] = reason
		}
		if err := a.event(ctx, berth.Event{Type: berth.EventPoolScaleDown, Pool: p.Name, Instance: rel.Instance.ID, Host: rel.Instance.WorkerHost, Reason: reason}); err != nil {
			return err
		}
		if !dry {
			a.release(ctx, p, rel)
		}
	}
	if d.Cap != "" && a.said[p.Name+"/capped"] != d.Cap {
		if err := a.event(ctx, berth.Event{Type: berth.EventPoolCapped, Pool: p.Name, Reason: d.Capped + "; " + d.Reason}); err != nil {
			return err
		}
	}
	a.said[p.Name+"/capped"] = d.Cap
	if d.Rent == 0 {
		delete(a.said, p.Name+"/dry")
		return nil
	}
	a.mu.Lock()
	retryAt := a.retryAt[p.Name]
	a.mu.Unlock()
	if a.cfg.Now().Before(retryAt) {
		return nil // after failed rentals: not yet
	}
	price := "no price cap"
	if p.MaxPrice > 0 {
		price = fmt.Sprintf("at most $%.2f/h", d.Headroom)
	}
	reason := fmt.Sprintf("renting %d × %s ×%d (%s): %s", d.Rent, p.GPUType, p.GPUs, price, d.Reason)
	if dry {
		reason = "dry run: would be " + reason
		if a.said[p.Name+"/dry"] == reason {
			return nil
		}
		a.said[p.Name+"/dry"] = reason
	}
	if err := a.event(ctx, berth.Event{Type: berth.EventPoolScaleUp, Pool: p.Name, Count: d.Rent, Reason: reason}); err != nil {
		return err
	}
	if dry {
		return nil
	}
	for range d.Rent {
		a.rent(ctx, p)
	}
	return nil
}

// event records e and logs it.
func (a *Autoscaler) event(ctx context.Context, e berth.Event) error {
	a.cfg.Log.Info("autoscaler", "event", e.Type, "pool", e.Pool, "instance", e.Instance, "count", e.Count, "reason", e.Reason)
	if err := a.cfg.View.RecordPoolEvent(ctx, e); err != nil {
		return fmt.Errorf("autoscaler: record %s: %w", e.Type, err)
	}
	return nil
}

// rent starts one rental of p in the background, counted in flight until
// it ends.
func (a *Autoscaler) rent(ctx context.Context, p *berth.Pool) {
	a.mu.Lock()
	a.renting[p.Name]++
	a.mu.Unlock()
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		inst, err := a.cfg.Renter.Provision(ctx, p)
		a.mu.Lock()
		a.renting[p.Name]--
		if err != nil {
			a.failed[p.Name]++
			a.retryAt[p.Name] = a.cfg.Now().Add(berth.DoublingDelay(a.failed[p.Name], RetryLimit))
		} else {
			delete(a.failed, p.Name)
			delete(a.retryAt, p.Name)
		}
		a.mu.Unlock()
		if err != nil {
			a.cfg.Log.Warn("autoscaler: rental failed", "pool", p.Name, "err", err)
			return
		}
		a.cfg.Log.Info("autoscaler: instance ready", "pool", p.Name, "instance", inst.ID, "host", inst.WorkerHost)
	}()
}

// release gives rel's instance back in the background, once.
func (a *Autoscaler) release(ctx context.Context, p *berth.Pool, rel Release) {
	id := rel.Instance.ID
	a.mu.Lock()
	if a.destroying[id] {
		a.mu.Unlock()
		return
	}
	a.destroying[id] = true
	a.mu.Unlock()
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		if err := a.cfg.Renter.Destroy(ctx, rel.Instance, rel.Reason); err != nil {
			a.cfg.Log.Warn("autoscaler: give back failed", "pool", p.Name, "instance", id, "err", err)
		}
		a.mu.Lock()
		delete(a.destroying, id)
		a.mu.Unlock()
	}()
}
