package scheduler

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// reservation holds nodes for a task during a pass.
type reservation struct {
	task  *Task
	start time.Time // zero: unknown
	nodes []*node
}

// backfills reports whether t may use a node held by res: only if t's
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

// candidates returns the nodes, on and not held for another task, that
// could ever run a member of t.
func (p *pass) candidates(t *Task) []*node {
	var out []*node
	for _, c := range p.eligibleClasses(t) {
		for _, n := range c.nodes {
			if !n.w.Off && (n.res == nil || n.res.task == t) && (t.shape.host == "" || n.w.Host == t.shape.host) {
				out = append(out, n)
			}
		}
	}
	return out
}

// avail is what a node would have free once some attempts have gone.
type avail struct {
	gpus  int
	cpus  float64
	mem   float64
	slots int
}

func (a *avail) fits(t *Task) bool {
	r := &t.Resources
	return a.slots > 0 && a.gpus >= r.GPUs && a.cpus >= r.CPUs && a.mem >= float64(r.Memory)
}

// freeFor returns what n has free now that matches t's GPU needs.
func (n *node) freeFor(t *Task) avail {
	a := avail{cpus: n.cpus, mem: float64(n.mem), slots: n.slots}
	if n.cls.homogeneous {
		a.gpus = n.freeGPUs // the class fits t, so every GPU matches
		return a
	}
	for i, g := range n.w.GPUs {
		if !n.gpuUsed[i] && (n.cls.homogeneous || gpuMatches(g, &t.Resources)) {
			a.gpus++
		}
	}
	return a
}

// release adds what r holds (GPUs matching t's needs) to a.
func (n *node) release(a *avail, r *Running, t *Task) {
	a.cpus += r.CPUs
	a.mem += float64(r.Memory)
	a.slots++
	for _, idx := range r.GPUs {
		for _, g := range n.w.GPUs {
			if g.Index == idx && (n.cls.homogeneous || gpuMatches(g, &t.Resources)) {
				a.gpus++
			}
		}
	}
}

func (p *pass) isStopping(r *Running) bool { return r.Stopping || p.stopping[r] }

// reserve holds, for t, the nodes that will fit its members soonest,
// judging by when the attempts on them end (start + max_runtime).
func (p *pass) reserve(t *Task) {
	if len(p.reservations) >= p.maxReservations() {
		return
	}
	type estimate struct {
		n     *node
		at    time.Time
		known bool
		free  int
	}
	now := p.s.Now
	var ests []estimate
	for _, n := range p.candidates(t) {
		a := n.freeFor(t)
		e := estimate{n: n, at: now, known: true, free: a.gpus}
		if !a.fits(t) {
			e.known = false
			runs := make([]*Running, len(n.w.Running))
			copy(runs, n.w.Running)
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
				n.release(&a, r, t)
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
	nodes := make([]*node, need)
	for i, e := range ests[:need] {
		nodes[i] = e.n
	}
	p.hold(res, nodes)
	start := "unknown (running jobs have no max_runtime)"
	if !res.start.IsZero() {
		start = res.start.Format(time.RFC3339)
	}
	t.Reason = Reason{ReasonReservation, fmt.Sprintf("reserved %s; expected start %s", workerList(res.nodes), start)}
}

// hold records res on nodes and in the plan.
func (p *pass) hold(res *reservation, nodes []*node) {
	res.nodes = nodes
	ids := make([]string, len(nodes))
	for i, n := range nodes {
		n.res = res
		ids[i] = n.w.ID
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

func workerList(nodes []*node) string {
	ids := make([]string, len(nodes))
	for i, n := range nodes {
		ids[i] = n.w.ID
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
// holds their nodes for t. Attempts already stopping count as free.
func (p *pass) preempt(t *Task) bool {
	if !p.canPreempt() || p.noPreempt[t.shape] {
		return false
	}
	type option struct {
		n       *node
		victims []*Running
		cost    int // summed victim priority
	}
	var opts []option
	for _, n := range p.candidates(t) {
		a := n.freeFor(t)
		var cands []*Running
		for _, r := range n.w.Running {
			if p.isStopping(r) {
				n.release(&a, r, t)
			} else if p.victim(r, t.Priority) {
				cands = append(cands, r)
			}
		}
		o := option{n: n}
		if !a.fits(t) {
			sort.SliceStable(cands, func(i, j int) bool {
				if cands[i].Priority != cands[j].Priority {
					return cands[i].Priority < cands[j].Priority
				}
				return cands[i].Started.After(cands[j].Started)
			})
			for _, r := range cands {
				n.release(&a, r, t)
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
				WorkerID: o.n.w.ID, For: t.JobID})
		}
	}
	p.budget -= total
	res := &reservation{task: t, start: p.s.Now}
	nodes := make([]*node, need)
	for i, o := range chosen {
		nodes[i] = o.n
	}
	p.hold(res, nodes)
	msg := fmt.Sprintf("preempted %d attempts; waiting for them to stop on %s", total, workerList(res.nodes))
	if total == 0 {
		msg = "waiting for preempted attempts to stop on " + workerList(res.nodes)
	}
	t.Reason = Reason{ReasonPreempting, msg}
	return true
}
