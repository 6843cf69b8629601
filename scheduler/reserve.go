package scheduler

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/berth-dev/berth"
)

// reservation holds workers for a task during a pass.
type reservation struct {
	task    *Task
	start   time.Time // zero: unknown
	workers []*worker
}

// backfills reports whether t may use a worker held by res: only if t's
// max_runtime ends before the reservation's expected start.
func (p *pass) backfills(t *Task, res *reservation) bool {
	return t.MaxRuntime > 0 && !res.start.IsZero() && !p.s.Now.Add(t.MaxRuntime).After(res.start)
}

// backfillMask has bit i set when t may backfill into reservation i.
func (p *pass) backfillMask(t *Task) uint64 {
	var m uint64
	if t.MaxRuntime == 0 {
		return 0
	}
	for i, r := range p.reservations {
		if p.backfills(t, r) {
			m |= 1 << i
		}
	}
	return m
}

func (p *pass) maxReservations() int {
	if p.cfg.MaxReservations > 0 {
		return min(p.cfg.MaxReservations, 64)
	}
	return 8
}

// candidates returns the workers, on and not held for another task, that
// could ever run a member of t.
func (p *pass) candidates(t *Task) []*worker {
	var out []*worker
	for _, c := range p.eligibleClasses(t) {
		for _, wk := range c.workers {
			if !wk.w.Off && (wk.res == nil || wk.res.task == t) && (t.shape.host == "" || wk.w.Host == t.shape.host) {
				out = append(out, wk)
			}
		}
	}
	return out
}

// avail is what a worker would have free once some attempts have gone.
type avail struct {
	gpus  int // untouched GPUs that match the task's needs
	cpus  float64
	mem   float64
	slots int
	// used is, for a fraction or where fractions share GPUs, the milli in
	// use of each of gpuList (a copy); nil where every GPU is whole.
	used    []int
	gpuList []berth.GPU
}

func (a *avail) fits(t *Task) bool {
	r := &t.Resources
	if a.slots <= 0 || a.cpus < r.CPUs || a.mem < float64(r.Memory) {
		return false
	}
	if r.GPUMilli > 0 {
		return fractionFit(a.gpuList, a.used, r, false) >= 0
	}
	return a.gpus >= r.GPUs
}

// freeFor returns what wk has free now that matches t's GPU needs.
func (wk *worker) freeFor(t *Task) avail {
	a := avail{cpus: wk.cpus, mem: float64(wk.mem), slots: wk.slots}
	if t.Resources.GPUMilli > 0 || wk.shared > 0 || wk.sharing {
		a.used, a.gpuList = slices.Clone(wk.gpuUsed), wk.w.GPUs
	}
	if wk.cls.homogeneous {
		a.gpus = wk.freeGPUs // the class fits t, so every GPU matches
		return a
	}
	for i, g := range wk.w.GPUs {
		if wk.gpuUsed[i] == 0 && gpuMatches(g, &t.Resources) {
			a.gpus++
		}
	}
	return a
}

// release adds what r holds (GPUs matching t's needs) to a.
func (wk *worker) release(a *avail, r *Running, t *Task) {
	a.cpus += r.CPUs
	a.mem += float64(r.Memory)
	a.slots++
	share := berth.WholeGPU
	if r.GPUMilli > 0 {
		share = r.GPUMilli
	}
	for _, idx := range r.GPUs {
		i := wk.gpuAt(idx)
		if i < 0 {
			continue
		}
		freed := true
		if a.used != nil {
			a.used[i] -= share
			freed = a.used[i] == 0
		}
		if freed && (wk.cls.homogeneous || gpuMatches(wk.w.GPUs[i], &t.Resources)) {
			a.gpus++
		}
	}
}

func (p *pass) isStopping(r *Running) bool { return r.Stopping || p.stopping[r] }

// reserve holds, for t, the workers that will fit its members soonest,
// judging by when the attempts on them end (start + max_runtime).
func (p *pass) reserve(t *Task) {
	if len(p.reservations) >= p.maxReservations() {
		return
	}
	type estimate struct {
		wk    *worker
		at    time.Time
		known bool
		free  int
	}
	now := p.s.Now
	var ests []estimate
	for _, wk := range p.candidates(t) {
		a := wk.freeFor(t)
		e := estimate{wk: wk, at: now, known: true, free: a.gpus}
		if !a.fits(t) {
			e.known = false
			runs := make([]*Running, len(wk.w.Running))
			copy(runs, wk.w.Running)
			ends := make(map[*Running]time.Time, len(runs))
			for _, r := range runs {
				end, ok := r.end(now)
				if p.isStopping(r) {
					end, ok = now, true
				}
				if ok {
					ends[r] = end
				}
			}
			sort.SliceStable(runs, func(i, j int) bool {
				ei, oki := ends[runs[i]]
				ej, okj := ends[runs[j]]
				if oki != okj {
					return oki
				}
				return ei.Before(ej)
			})
			for _, r := range runs {
				end, ok := ends[r]
				if !ok {
					break
				}
				wk.release(&a, r, t)
				if a.fits(t) {
					e.at, e.known = maxTime(end, now), true
					break
				}
			}
		}
		ests = append(ests, e)
	}
	need := t.nodes()
	if len(ests) < need {
		return
	}
	ests = smallest(ests, need, func(a, b estimate) bool {
		if a.known != b.known {
			return a.known
		}
		if !a.at.Equal(b.at) {
			return a.at.Before(b.at)
		}
		return a.free > b.free
	})
	res := &reservation{task: t, start: now}
	for _, e := range ests[:need] {
		if !e.known {
			res.start = time.Time{}
		} else if !res.start.IsZero() {
			res.start = maxTime(res.start, e.at)
		}
	}
	workers := make([]*worker, need)
	for i, e := range ests[:need] {
		workers[i] = e.wk
	}
	p.hold(res, workers)
	start := "unknown (running jobs have no max_runtime)"
	if !res.start.IsZero() {
		start = res.start.Format(time.RFC3339)
	}
	t.Reason = Reason{ReasonReservation, fmt.Sprintf("reserved %s; expected start %s", workerList(res.workers), start)}
}

// hold records res on workers and in the plan.
func (p *pass) hold(res *reservation, workers []*worker) {
	res.workers = workers
	ids := make([]string, len(workers))
	for i, wk := range workers {
		wk.res = res
		ids[i] = wk.w.ID
	}
	p.reservations = append(p.reservations, res)
	p.plan.Reservations = append(p.plan.Reservations, Reservation{JobID: res.task.JobID, Workers: ids, Start: res.start})
}

// smallest returns the k least items of list by less, in order; among
// equals the earlier item comes first. It costs O(len(list) × k), for the
// small k of a gang.
func smallest[T any](list []T, k int, less func(a, b T) bool) []T {
	best := make([]T, 0, k+1)
	for _, v := range list {
		i := len(best)
		for i > 0 && less(v, best[i-1]) {
			i--
		}
		if i >= k {
			continue
		}
		best = append(best, v)
		copy(best[i+1:], best[i:])
		best[i] = v
		if len(best) > k {
			best = best[:k]
		}
	}
	return best
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func workerList(workers []*worker) string {
	ids := make([]string, len(workers))
	for i, wk := range workers {
		ids[i] = wk.w.ID
	}
	if len(ids) > 4 {
		return fmt.Sprintf("workers %s and %d more", strings.Join(ids[:4], ", "), len(ids)-4)
	}
	if len(ids) == 1 {
		return "worker " + ids[0]
	}
	return "workers " + strings.Join(ids, ", ")
}

// victim reports whether r may be preempted by a task of priority prio.
func (p *pass) victim(r *Running, prio int) bool {
	return p.cfg.Preempt && r.Preemptible && !r.Gang && r.Priority < prio && !p.isStopping(r) &&
		p.s.Now.Sub(r.Started) >= p.cfg.PreemptMinRuntime
}

func (p *pass) canPreempt() bool { return p.cfg.Preempt && p.budget > 0 && p.victims }

// preempt stops the fewest, lowest-priority preemptible attempts that let
// every member of t fit (all or none), within the preemption budget, and
// holds their workers for t. Attempts already stopping count as free.
func (p *pass) preempt(t *Task) bool {
	if !p.canPreempt() || p.noPreempt[t.shape] {
		return false
	}
	type option struct {
		wk      *worker
		victims []*Running
		cost    int // summed victim priority
	}
	var opts []option
	for _, wk := range p.candidates(t) {
		a := wk.freeFor(t)
		var cands []*Running
		for _, r := range wk.w.Running {
			if p.isStopping(r) {
				wk.release(&a, r, t)
			} else if p.victim(r, t.Priority) {
				cands = append(cands, r)
			}
		}
		o := option{wk: wk}
		if !a.fits(t) {
			sort.SliceStable(cands, func(i, j int) bool {
				if cands[i].Priority != cands[j].Priority {
					return cands[i].Priority < cands[j].Priority
				}
				return cands[i].Started.After(cands[j].Started)
			})
			for _, r := range cands {
				wk.release(&a, r, t)
				o.victims = append(o.victims, r)
				o.cost += r.Priority
				if a.fits(t) {
					break
				}
			}
			if !a.fits(t) {
				continue
			}
		}
		opts = append(opts, o)
	}
	need := t.nodes()
	if len(opts) < need {
		p.noPreempt[t.shape] = true
		return false
	}
	chosen := smallest(opts, need, func(a, b option) bool {
		if len(a.victims) != len(b.victims) {
			return len(a.victims) < len(b.victims)
		}
		return a.cost < b.cost
	})
	total := 0
	for _, o := range chosen {
		total += len(o.victims)
	}
	if total > p.budget {
		return false
	}
	for _, o := range chosen {
		for _, r := range o.victims {
			p.stopping[r] = true
			p.plan.Preemptions = append(p.plan.Preemptions, Preemption{AttemptID: r.AttemptID, JobID: r.JobID,
				WorkerID: o.wk.w.ID, For: t.JobID})
		}
	}
	p.budget -= total
	res := &reservation{task: t, start: p.s.Now}
	workers := make([]*worker, need)
	for i, o := range chosen {
		workers[i] = o.wk
	}
	p.hold(res, workers)
	msg := fmt.Sprintf("preempted %d attempts; waiting for them to stop on %s", total, workerList(res.workers))
	if total == 0 {
		msg = "waiting for preempted attempts to stop on " + workerList(res.workers)
	}
	t.Reason = Reason{ReasonPreempting, msg}
	return true
}
