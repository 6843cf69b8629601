package arbiter

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/webhook"
)

// Cluster is what a swap needs of the controller.
type Cluster interface {
	Submit(ctx context.Context, req *berth.SubmitRequest) ([]*berth.Job, error)
	Cancel(ctx context.Context, id string) (*berth.Job, error)
	Services(ctx context.Context) ([]*berth.Service, error)
	Workers(ctx context.Context) ([]*berth.Worker, error)
	Job(ctx context.Context, id string) (*berth.JobDetail, error)
}

// Swapper runs model swaps (seed 000's POST /api/swap): stop what a pool
// serves, start the new model's service there, wait for it to be ready.
// One swap at a time per pool; swaps are kept in memory. It is safe for
// concurrent use.
type Swapper struct {
	Catalog *Catalog
	Cluster Cluster
	// Lock gates real swaps: held by another, a swap without its token is
	// refused (423).
	Lock *Lock
	// Webhook gets swap_complete or swap_failed after every real swap,
	// fire-and-forget; nil: none.
	Webhook *webhook.Sender
	Log     *slog.Logger
	Now     func() time.Time
	// Poll is how often a running swap looks at the pool (default 250 ms);
	// Timeout bounds the whole swap (default 30 min).
	Poll, Timeout time.Duration

	mu    sync.Mutex
	swaps map[string]*berth.Swap
	busy  map[string]string // pool → the swap running there

	ready, failed atomic.Uint64 // real swaps ended so, since the Swapper was made (Outcomes)
}

// Outcomes counts the real swaps ended since the Swapper was made, by
// final state (ready, failed), for /metrics.
func (s *Swapper) Outcomes() map[string]uint64 {
	return map[string]uint64{berth.SwapStateReady: s.ready.Load(), berth.SwapStateFailed: s.failed.Load()}
}

// poolService is the name of the service a pool's swaps run.
func poolService(pool string) string { return "arbiter-" + pool }

func (s *Swapper) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// Validate says whether a swap to key could start now: the key is in the
// catalog and its pool has workers taking work. It touches nothing.
func (s *Swapper) Validate(ctx context.Context, key string) (*berth.SwapValidation, error) {
	v := &berth.SwapValidation{ModelKey: key}
	m, pool, err := s.Catalog.Model(key)
	if err != nil {
		return nil, err
	}
	v.Pool = m.Pool
	workers, err := s.Cluster.Workers(ctx)
	if err != nil {
		return nil, err
	}
	for _, w := range workers {
		if poolHas(pool, w) && (w.State == berth.WorkerReady || w.State == berth.WorkerBusy) {
			v.Workers = append(v.Workers, w.Host)
		}
	}
	sort.Strings(v.Workers)
	if len(v.Workers) == 0 {
		v.Problems = append(v.Problems, fmt.Sprintf("pool %s has no worker taking work", m.Pool))
	}
	s.mu.Lock()
	if id := s.busy[m.Pool]; id != "" {
		v.Problems = append(v.Problems, fmt.Sprintf("swap %s is running on pool %s", id, m.Pool))
	}
	s.mu.Unlock()
	v.OK = len(v.Problems) == 0
	return v, nil
}

func poolHas(p Pool, w *berth.Worker) bool {
	for k, want := range p.Labels {
		if w.Labels[k] != want {
			return false
		}
	}
	return true
}

// Start starts a swap to key by who, gated by the lock (token is the
// caller's lock token, "" for none): ECodeNotFound for an unknown key,
// ECodeLocked (423) when the lock is held by another, ECodeConflict when
// a swap runs on the pool already. A dry run only validates and returns
// the swap it would start, ended (ready, or failed with the problems as
// its reason), with the services it would stop, touching nothing.
func (s *Swapper) Start(ctx context.Context, key, token, who string, dryRun bool) (*berth.Swap, error) {
	v, err := s.Validate(ctx, key)
	if err != nil {
		return nil, err
	}
	sw := &berth.Swap{ID: newSwapID(), ModelKey: key, Pool: v.Pool, State: berth.SwapStatePending,
		StartedAt: berth.FormatSparkTime(s.now()), DryRun: dryRun, RequestedBy: who}
	if dryRun {
		current, err := s.poolServices(ctx, poolService(v.Pool))
		if err != nil {
			return nil, err
		}
		for _, svc := range current {
			sw.Stopped = append(sw.Stopped, svc.ID)
		}
		code := 0
		sw.State, sw.FinishedAt, sw.Returncode = berth.SwapStateReady, sw.StartedAt, &code
		if !v.OK {
			code = 1
			sw.State, sw.Reason = berth.SwapStateFailed, strings.Join(v.Problems, "; ")
		}
		return sw, nil
	}
	if err := s.Lock.Check(ctx, token); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.swaps == nil {
		s.swaps, s.busy = map[string]*berth.Swap{}, map[string]string{}
	}
	if id := s.busy[sw.Pool]; id != "" {
		return nil, berth.Errorf(berth.ECodeConflict, "swap %s is running on pool %s; poll GET /api/swap/%s", id, sw.Pool, id)
	}
	s.swaps[sw.ID], s.busy[sw.Pool] = sw, sw.ID
	c := *sw
	go s.run(sw.ID)
	return &c, nil
}

// Get returns swap id; an unknown id is ECodeNotFound.
func (s *Swapper) Get(id string) (*berth.Swap, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sw := s.swaps[id]
	if sw == nil {
		return nil, berth.Errorf(berth.ECodeNotFound, "no swap %s", id)
	}
	c := *sw
	return &c, nil
}

// update changes swap id under the lock.
func (s *Swapper) update(id string, fn func(*berth.Swap)) berth.Swap {
	s.mu.Lock()
	defer s.mu.Unlock()
	fn(s.swaps[id])
	return *s.swaps[id]
}

// run carries out swap id: stop the pool's services, start the model's,
// wait until it is ready, then fire the webhook, outside the swap's state.
func (s *Swapper) run(id string) {
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Minute
	}
	ctx, cancel := context.WithTimeout(berth.WithActor(context.Background(), "swap/"+id), timeout)
	defer cancel()
	sw := s.update(id, func(sw *berth.Swap) { sw.State = berth.SwapStateStopping })
	service, err := s.swap(ctx, id, sw)
	code, state, event, reason := 0, berth.SwapStateReady, berth.SwapComplete, ""
	if err != nil {
		code, state, event, reason = 1, berth.SwapStateFailed, berth.SwapFailed, err.Error()
		s.failed.Add(1)
	} else {
		s.ready.Add(1)
	}
	final := s.update(id, func(sw *berth.Swap) {
		sw.State, sw.Returncode, sw.Reason, sw.FinishedAt = state, &code, reason, berth.FormatSparkTime(s.now())
		if service != "" {
			sw.Service = service
		}
	})
	s.mu.Lock()
	delete(s.busy, final.Pool)
	s.mu.Unlock()
	s.Webhook.Fire(event, berth.SwapEvent{Event: event, JobID: final.ID, ModelKey: final.ModelKey, State: final.State,
		Returncode: final.Returncode, StartedAt: final.StartedAt, FinishedAt: final.FinishedAt})
}

// swap stops what the pool serves and starts the model's service,
// returning its job id once it is ready.
func (s *Swapper) swap(ctx context.Context, id string, sw berth.Swap) (string, error) {
	m, pool, err := s.Catalog.Model(sw.ModelKey)
	if err != nil {
		return "", err
	}
	name := poolService(sw.Pool)
	current, err := s.poolServices(ctx, name)
	if err != nil {
		return "", err
	}
	for _, svc := range current {
		if _, err := s.Cluster.Cancel(ctx, svc.ID); err != nil && berth.ErrorCode(err) != berth.ECodeConflict {
			return "", fmt.Errorf("stop %s: %w", svc.ID, err)
		}
		s.update(id, func(sw *berth.Swap) { sw.Stopped = append(sw.Stopped, svc.ID) })
	}
	if err := s.until(ctx, "the pool's services to stop", func() (bool, error) {
		left, err := s.poolServices(ctx, name)
		return len(left) == 0, err
	}); err != nil {
		return "", err
	}
	req := &berth.SubmitRequest{JobSpec: berth.DefaultJobSpec()}
	req.Kind, req.Name, req.User = berth.KindService, name, "arbiter"
	req.Template, req.Vars, req.Command, req.Env, req.Resources = m.Template, maps.Clone(m.Vars), m.Command, maps.Clone(m.Env), m.Resources
	req.Constraints.Labels = maps.Clone(pool.Labels)
	jobs, err := s.Cluster.Submit(ctx, req)
	if err != nil {
		return "", fmt.Errorf("start %s: %w", sw.ModelKey, err)
	}
	job := jobs[0].ID
	s.update(id, func(sw *berth.Swap) { sw.State, sw.Service = berth.SwapStateStarting, job })
	err = s.until(ctx, sw.ModelKey+" to be ready", func() (bool, error) {
		list, err := s.Cluster.Services(ctx)
		if err != nil {
			return false, err
		}
		for _, svc := range list {
			if svc.ID != job {
				continue
			}
			if diedBeforeReady(svc) {
				return false, s.stopDead(ctx, job)
			}
			return svc.Phase == berth.PhaseReady, nil
		}
		d, err := s.Cluster.Job(ctx, job)
		if err != nil {
			return false, fmt.Errorf("service %s ended before it was ready: %w", job, err)
		}
		return false, fmt.Errorf("service %s %s before it was ready: %s", job, d.State, d.Reason)
	})
	return job, err
}

// stopDead stops service job, which died before it was ever ready, and
// returns the swap's error: how its attempt ended.
func (s *Swapper) stopDead(ctx context.Context, job string) error {
	if _, err := s.Cluster.Cancel(ctx, job); err != nil && berth.ErrorCode(err) != berth.ECodeConflict {
		return fmt.Errorf("service %s died before it was ready; stopping it: %w", job, err)
	}
	how := "its attempt ended"
	if d, err := s.Cluster.Job(ctx, job); err == nil { // the cancel is durable, and so is the end before it
		for _, a := range d.AttemptList {
			if a.State.Terminal() && a.State != berth.AttemptCancelled {
				how = fmt.Sprintf("attempt %s on %s %s: %s", a.ID, a.Host, a.State, a.Reason)
				break
			}
		}
	}
	return fmt.Errorf("service %s died before it was ready (%s); the swap stopped it", job, how)
}

// diedBeforeReady reports whether svc, a service a swap started and which
// has not been ready yet, has had an attempt end: it waits out a restart
// (its one attempt spent, none running) or runs a restart. Attempts lost
// with their worker, preempted or stopped by an operator spend none, so
// they do not count.
func diedBeforeReady(svc *berth.Service) bool {
	return svc.Attempts > 1 || (svc.Attempts == 1 && svc.AttemptID == "")
}

// poolServices returns the active services named name.
func (s *Swapper) poolServices(ctx context.Context, name string) ([]*berth.Service, error) {
	list, err := s.Cluster.Services(ctx)
	return slices.DeleteFunc(list, func(svc *berth.Service) bool { return svc.Name != name }), err
}

// until polls cond every Poll until it holds, fails, or ctx ends.
func (s *Swapper) until(ctx context.Context, what string, cond func() (bool, error)) error {
	poll := s.Poll
	if poll <= 0 {
		poll = 250 * time.Millisecond
	}
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("timed out waiting for %s", what)
		case <-time.After(poll):
		}
	}
}

// newSwapID returns 8 random hex digits, like the seed's swap ids.
func newSwapID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
