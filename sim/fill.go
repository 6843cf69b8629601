package sim

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/scheduler"
)

// FillOptions set up a fill experiment (see Fill).
type FillOptions struct {
	Seed uint64 // of the draws: the same seed draws the same tasks
	// Points are the arrived loads, as shares of the cluster's GPU
	// capacity, at which to report the unallocated share (the table);
	// the experiment runs until the largest of them and the first
	// failure.
	Points []float64
	// Curve adds a point every Curve of arrived load (0.01: every 1 %),
	// for a plot; 0 adds none.
	Curve float64
}

// FillPoint is the cluster at one arrived load.
type FillPoint struct {
	Arrived     float64 `json:"arrived"`               // requested GPU capacity of the tasks arrived so far ÷ the cluster's
	Unallocated float64 `json:"unallocated_gpu_share"` // GPU capacity not given to a task ÷ the cluster's
}

// FillResult is what Fill measured under one policy.
type FillResult struct {
	Policy string `json:"policy"`
	Seed   uint64 `json:"seed"`
	GPUs   int    `json:"gpus"`
	Tasks  int    `json:"tasks_arrived"`
	Placed int    `json:"tasks_placed"`
	Failed int    `json:"tasks_failed"` // could not be placed when they arrived
	Unfit  int    `json:"tasks_unfit"`  // no worker could take them even idle: left out of the arrived load
	// ArrivedAtFull is the arrived load when the first task failed;
	// UnallocatedAtFull the share of GPU capacity unallocated then.
	ArrivedAtFull     float64     `json:"arrived_at_full"`
	UnallocatedAtFull float64     `json:"unallocated_gpu_share_at_full"`
	Points            []FillPoint `json:"points"`
	Curve             []FillPoint `json:"curve,omitempty"`
	WallSeconds       float64     `json:"wall_s"`
}

// forever is the duration of a fill task: it never leaves.
const forever = 1 << 62

// maxFillLoad bounds the arrived load of a fill experiment whose first
// failure has not come (a workload of tasks that always fit).
const maxFillLoad = 4

// Fill runs the experiment of Weng et al., "Beware of Fragmentation"
// (USENIX ATC '23, §6): tasks drawn at random (with replacement, seeded)
// from pool arrive one at a time and never leave; each is placed by one
// scheduler pass under cfg on c, or fails and is dropped (later ones still
// arrive). A task no worker could take even idle is counted apart and
// left out of the arrived load. As the arrived load (the GPU capacity the arrived tasks asked
// for ÷ the cluster's) grows, it records the share of the cluster's GPU
// capacity left unallocated: ideally 1 − arrived until the cluster is
// full; fragmentation leaves more. It stops once the arrived load passes
// every point and the first task has failed. Same inputs, same result.
func Fill(ctx context.Context, c *Cluster, pool []Job, cfg scheduler.Config, opt FillOptions) (FillResult, error) {
	start := time.Now()
	if len(pool) == 0 {
		return FillResult{}, berth.Invalidf("tasks", "the pool of tasks is empty")
	}
	upto := 0.0
	for _, p := range opt.Points {
		if !(p > 0) || p > maxFillLoad {
			return FillResult{}, berth.Invalidf("points", "%g is not a load between 0 and %d", p, maxFillLoad)
		}
		upto = max(upto, p)
	}
	for i := range pool {
		if err := validJob(&pool[i], i); err != nil {
			return FillResult{}, err
		}
		if pool[i].Nodes > 1 {
			return FillResult{}, berth.Invalidf(fmt.Sprintf("jobs[%d].nodes", i), "job %s: a fill experiment takes single-node tasks", pool[i].ID)
		}
	}
	e, err := newEngine(c, &Workload{}, cfg)
	if err != nil {
		return FillResult{}, err
	}
	capacity := 0
	for _, w := range e.workers {
		capacity += berth.WholeGPU * len(w.GPUs)
	}
	if capacity == 0 {
		return FillResult{}, berth.Invalidf("workers", "the cluster has no GPUs")
	}
	res := FillResult{Seed: opt.Seed, GPUs: capacity / berth.WholeGPU, Points: make([]FillPoint, 0, len(opt.Points))}
	rng := rand.New(rand.NewPCG(opt.Seed, opt.Seed^0x9e3779b97f4a7c15))
	arrived, allocated := 0, 0
	share := func(n int) float64 { return float64(n) / float64(capacity) }
	next := 0.0 // the next curve point
	unfitKinds := map[int]bool{}
	for failed := false; share(arrived) < upto || !failed; {
		if res.Tasks%256 == 0 && ctx.Err() != nil {
			return FillResult{}, ctx.Err()
		}
		if share(arrived) >= maxFillLoad {
			break
		}
		k := rng.IntN(len(pool))
		spec := pool[k]
		spec.ID = fmt.Sprintf("%s#%d", spec.ID, res.Tasks)
		spec.Submit, spec.Duration, spec.MaxRuntime = 0, forever, 0
		placed, unfit, err := e.place(&spec, uint64(res.Tasks))
		if err != nil {
			return FillResult{}, err
		}
		res.Tasks++
		if unfit {
			res.Unfit++
			if unfitKinds[k] = true; len(unfitKinds) == len(pool) {
				return FillResult{}, berth.Invalidf("tasks", "no task of the pool fits any worker of the cluster, even idle")
			}
			continue
		}
		milli := spec.Resources.GPUsMilli()
		before := arrived
		arrived += milli
		if placed {
			res.Placed++
			allocated += milli
		} else {
			res.Failed++
			if !failed {
				failed = true
				res.ArrivedAtFull, res.UnallocatedAtFull = share(arrived), 1-share(allocated)
			}
		}
		now := FillPoint{Arrived: share(arrived), Unallocated: 1 - share(allocated)}
		for _, p := range opt.Points {
			if share(before) < p && now.Arrived >= p {
				res.Points = append(res.Points, FillPoint{Arrived: p, Unallocated: now.Unallocated})
			}
		}
		for opt.Curve > 0 && now.Arrived >= next && next <= upto {
			res.Curve = append(res.Curve, FillPoint{Arrived: next, Unallocated: now.Unallocated})
			next = math.Round((next+opt.Curve)*1e9) / 1e9
		}
	}
	res.WallSeconds = time.Since(start).Seconds()
	return res, nil
}

// place submits spec and runs one pass: it reports whether the pass
// placed it; if not, the task is dropped, and unfit says it would not fit
// even an idle cluster.
func (e *engine) place(spec *Job, seq uint64) (placed, unfit bool, err error) {
	t := newTask(spec, seq)
	j := &job{spec: spec, task: t, run: spec.Duration, state: pending, since: e.now}
	e.byTask[t] = j
	defer delete(e.byTask, t)
	e.q.Push(t)
	e.snap.Now = e.now
	plan := scheduler.RunPass(e.q, &e.snap)
	e.passes++
	if err := e.assign(plan.Assignments); err != nil {
		return false, false, err
	}
	if j.state != running {
		e.q.Remove(t)
		return false, t.Reason.Code == scheduler.ReasonUnfit, nil
	}
	return true, false, nil
}
