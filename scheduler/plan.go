package scheduler

import (
	"fmt"
	"time"

	"github.com/berth-dev/berth"
)

// Worker is a worker as the scheduler sees it: capacity, what is free now
// and what runs on it.
type Worker struct {
	ID     string
	Host   string
	Queues []string // empty: every queue
	Labels map[string]string
	GPUs   []berth.GPU
	// GPUMilliUsed is, aligned with GPUs, the share of each GPU in use in
	// milli-GPUs: 0 untouched, berth.WholeGPU given whole, between them
	// shared by fractions (never also given whole).
	GPUMilliUsed []int
	CPUs         float64 // total
	Memory       berth.Bytes
	FreeCPUs     float64
	FreeMemory   berth.Bytes
	FreeSlots    int
	Off          bool     // takes no new work (disconnected, parked, off)
	OffQueues    []string // queues it serves but takes no new work from (turned off)
	Models       []string // models loaded and warm
	Running      []*Running
}

func (w *Worker) serves(queue string) bool {
	if len(w.Queues) == 0 {
		return true
	}
	for _, q := range w.Queues {
		if q == queue {
			return true
		}
	}
	return false
}

// offFor reports whether the worker's queue is turned off.
func (w *Worker) offFor(queue string) bool {
	for _, q := range w.OffQueues {
		if q == queue {
			return true
		}
	}
	return false
}

// Running is one attempt holding resources on a worker.
type Running struct {
	AttemptID   string
	JobID       string
	Rank        int // member of the job; rank 0 counts the job once
	Queue       string
	User        string
	Template    string
	Priority    int
	Preemptible bool
	Gang        bool   // member of a multi-node job: never a preemption victim
	Spread      string // the replica set it belongs to (Task.Spread)
	Started     time.Time
	MaxRuntime  time.Duration // 0: unknown
	GPUs        []int
	GPUMilli    int // the share of its one GPU it holds when a fraction (1..999, Resources.MilliOn); 0: GPUs whole
	CPUs        float64
	Memory      berth.Bytes
	Stopping    bool // being stopped; its resources free soon
}

// milli returns the GPU share r holds in all, in milli-GPUs.
func (r *Running) milli() int {
	if r.GPUMilli > 0 {
		return r.GPUMilli * len(r.GPUs)
	}
	return berth.WholeGPU * len(r.GPUs)
}

// end returns when the attempt ends at the latest, and false if unknown.
func (r *Running) end(now time.Time) (time.Time, bool) {
	switch {
	case r.Stopping:
		return now, true
	case r.MaxRuntime > 0:
		return r.Started.Add(r.MaxRuntime), true
	}
	return time.Time{}, false
}

// Snapshot is the cluster a pass plans over.
type Snapshot struct {
	Now     time.Time
	Workers []*Worker // in a stable order (e.g. by id) for deterministic plans
	Quotas  []berth.QuotaRule
	// RecentPreemptions is how many preemptions the caller carried out in
	// the last Config.PreemptWindow.
	RecentPreemptions int
}

// Assignment places member Rank of a task on a worker with the listed GPU
// indexes: whole GPUs, or for a fraction one GPU, of which it takes
// GPUMilli.
type Assignment struct {
	Task     *Task
	Rank     int
	WorkerID string
	GPUs     []int
	GPUMilli int // the share of GPUs[0] a fraction takes (Resources.MilliOn); 0: GPUs whole
	// Why says how the placement chose the worker, for policies that
	// explain it (fgd, bestfit); empty for Berth's default best fit.
	Why string
}

// Preemption stops a running attempt so that job For can start.
type Preemption struct {
	AttemptID string
	JobID     string
	WorkerID  string
	For       string
}

// Reservation holds workers for a waiting job as they free up. Only
// backfill (a job whose max_runtime ends before Start) may use them
// meanwhile.
type Reservation struct {
	JobID   string
	Workers []string
	Start   time.Time // expected start; zero when unknown (no backfill)
}

// QuotaExceeded reports a task newly held back by a quota rule.
type QuotaExceeded struct {
	JobID     string
	User      string
	Rule      string // "user:alice"
	Resource  string // "gpus", "gpu_milli" (GPUs counted in milli-GPUs, where a fraction is involved) or "jobs"
	Requested int
	InUse     int
	Limit     int
}

// Plan is what one pass decided.
type Plan struct {
	Assignments   []Assignment
	Preemptions   []Preemption
	Reservations  []Reservation
	QuotaExceeded []QuotaExceeded
	Examined      int // pending tasks looked at
	// Skipped counts the pending tasks left out because an earlier pass
	// found that none could run on these workers (see RunPass).
	Skipped int
}

// Reason codes of a pending task.
const (
	ReasonUnfit       = "unfit"       // no worker could ever take it
	ReasonOff         = "off"         // the workers that could are off or disconnected
	ReasonCapacity    = "capacity"    // waiting for free resources
	ReasonQuota       = "quota"       // a quota rule holds it back
	ReasonReserved    = "reserved"    // what it could use is reserved for another job
	ReasonReservation = "reservation" // holds a reservation, waiting for it to free up
	ReasonPreempting  = "preempting"  // waiting for the attempts it preempted to stop
	ReasonOrder       = "order"       // behind the head of its queue (head-of-line policy)
)

// Reason says why a task is pending.
type Reason struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// RunPass runs one pass: it walks the queue in order (effective priority
// less fair share), places each task on the feasible workers it fits best
// (fewest GPUs left free), all members of a gang or none, within quotas, and
// never overcommits GPUs, CPUs, memory or slots. A task that does not fit
// may preempt lower-priority preemptible attempts or, once it has waited
// Config.ReserveAfter, reserve workers. RunPass records on each task it
// examines why it is still pending; it changes nothing else of q or s.
//
// A pass costs time in proportion to the tasks that may run, not to the
// backlog. The tasks of one shape in one (queue, user) list that a pass
// found, before it placed anything, could not run whatever it did, and
// examined all of, are left out of later passes, unexamined, for as long
// as the shape gets the same reason at the start of the pass: a static
// one (no worker serves the queue, has the GPU type, …, or those that do
// are off) with no quota rule applying to the list, or being over the
// same quota rule with the same use. A static reason with no quota rule
// applying is the shape's: the pass that first finds it gives it to each
// task of the shape without examining them (a start's backlog, a queue
// whose last worker left). A worker joining, leaving or turning
// a queue on or off, quota use or rules changing makes the next pass
// examine them again. A list left out whole costs nothing; in one that
// is walked, the pass steps over them in its shape index. Such tasks take
// nothing from other tasks (no preemption, reservation or quota use), so
// leaving them out changes no placement, and their reasons stay those a
// walk would give (Reasons).
func RunPass(q *Queue, s *Snapshot) Plan {
	q.pass++
	p := newPass(q, s)
	if p.open == 0 && !p.canPreempt() {
		return p.plan
	}
	var penalty func(listKey) float64
	if q.cfg.FairShare > 0 {
		penalty = p.fairPenalty
	}
	var skip func(*list) (bool, []*shape)
	if !q.cfg.HeadOfLine { // a blocked task there blocks its queue
		skip = p.skipBlocked
	}
	m := q.merger(s.Now, penalty, skip)
	for t := m.next(); t != nil; t = m.next() {
		if p.open == 0 && !p.canPreempt() {
			break
		}
		p.plan.Examined++
		p.consider(t)
	}
	if skip != nil {
		p.markBlocked()
	}
	return p.plan
}

// skipBlocked says which tasks of l the pass may leave out: those of each
// shape blocked now (blockedNow) by what an earlier pass that examined
// them all found; all when that is every shape. Tasks pushed since into a
// shape left out get its reason (and, if over quota, an entry in
// Plan.QuotaExceeded, as a walk would give them).
func (p *pass) skipBlocked(l *list) (all bool, shapes []*shape) {
	pass := p.q.pass
	free := p.quotaFree(l)
	all = true
	for sh, c := range l.shapes {
		if !p.blockedNow(l, c, free) {
			c.blocked, all = false, false
			continue
		}
		c.checked = pass
		if free && (!c.blocked || c.key != c.now) {
			// A reason that needs no quota is the shape's: the one a
			// walk would give each of its tasks (a start's backlog, a
			// queue whose last worker left), given without the walk.
			l.reasonAll(sh, c.now, pass)
			c.blocked, c.key, c.blockedAt = true, c.now, pass
		}
		if !c.blocked || c.key != c.now {
			c.blocked, all = false, false
			continue
		}
		c.skipped = pass
		shapes = append(shapes, sh)
		p.plan.Skipped += c.n
	}
	for _, t := range l.unreasoned {
		c := l.shapes[t.shape]
		if t.removed || c.skipped != pass {
			continue // the pass examines it, or it is gone
		}
		if c.qe != nil && t.Reason.Code != ReasonQuota {
			qe := *c.qe
			qe.JobID, qe.User = t.JobID, t.User
			p.plan.QuotaExceeded = append(p.plan.QuotaExceeded, qe)
		}
		t.Reason, t.reasonPass = c.now, pass
	}
	l.unreasoned = nil
	return all && len(shapes) > 0, shapes
}

// blockedNow reports whether, before the pass places anything, no task of
// c's shape in l can run whatever the pass does: no quota rule applies to
// l (free) and the shape has a static reason, or it is over a quota rule
// already (use only grows within a pass, so it stays over; the reason's
// message counts the use at the start of the pass). Template rules are
// per task, not per shape: in a list with tasks that name a template,
// where such rules exist, no shape is blocked by quota. It sets c.now and
// c.qe.
func (p *pass) blockedNow(l *list, c *shapeCount, free bool) bool {
	if free {
		r := p.staticFor(c.rep)
		c.now, c.qe = r, nil
		return r.Code != ""
	}
	if l.templated > 0 && p.templates {
		return false
	}
	rep, spec := *c.rep, *c.rep.TaskSpec
	spec.Template = "" // no template rule applies to l's tasks
	rep.TaskSpec = &spec
	qe := p.overQuota(&rep)
	if qe == nil {
		return false
	}
	c.now, c.qe = Reason{ReasonQuota, p.quotaMessage(qe)}, qe
	return true
}

// markBlocked blocks each shape of a list that this pass found blocked at
// its start and whose every task it examined.
func (p *pass) markBlocked() {
	pass := p.q.pass
	for _, l := range p.q.lists {
		for _, c := range l.shapes {
			if c.checked == pass && !c.blocked && c.seenPass == pass && c.seen == c.n {
				c.blocked, c.key, c.blockedAt = true, c.now, pass
			}
		}
	}
}

// consider tries to place t, and otherwise records why it waits and tries
// preemption and reservation for it.
func (p *pass) consider(t *Task) {
	q := p.q
	t.reasonPass = q.pass
	if c := t.list.shapes[t.shape]; c.seenPass != q.pass {
		c.seen, c.seenPass = 1, q.pass
	} else {
		c.seen++
	}
	if head := p.blocked[t.Queue]; head != nil {
		p.setReason(t, ReasonOrder, fmt.Sprintf("behind job %s, first in queue %s", head.JobID, t.Queue))
		return
	}
	if qe := p.overQuota(t); qe != nil {
		if t.Reason.Code != ReasonQuota {
			p.plan.QuotaExceeded = append(p.plan.QuotaExceeded, *qe)
		}
		p.setReason(t, ReasonQuota, p.quotaMessage(qe))
		return
	}
	mk := memoKey{t.shape, p.backfillMask(t)}
	why, failed := p.failed[mk]
	if !failed {
		if p.place(t) {
			return
		}
		why = p.whyNot(t)
		p.failed[mk] = why
	}
	t.Reason = why
	if q.cfg.HeadOfLine {
		p.blocked[t.Queue] = t
	}
	if why.Code == ReasonUnfit || why.Code == ReasonOff {
		return
	}
	if p.preempt(t) {
		return
	}
	if q.cfg.ReserveAfter > 0 && p.s.Now.Sub(t.Submitted) >= q.cfg.ReserveAfter {
		p.reserve(t)
	}
}

func (p *pass) setReason(t *Task, code, msg string) {
	if t.Reason.Code != code || t.Reason.Message != msg {
		t.Reason = Reason{code, msg}
	}
}

// place puts every member of t on a distinct worker, or none.
func (p *pass) place(t *Task) bool {
	n := t.nodes()
	p.stamp++
	p.sawRes = nil
	chosen := make([]*worker, 0, n)
	gpus := make([][]int, 0, n)
	whys := make([]string, 0, n)
	for range n {
		wk, g := p.find(t)
		if wk == nil {
			for i, undo := range chosen {
				undo.give(p, t, gpus[i])
				p.addReplica(t.Spread, undo.w.Host, -1)
				undo.stamp = 0
			}
			return false
		}
		wk.take(p, t, g)
		p.addReplica(t.Spread, wk.w.Host, 1)
		wk.stamp = p.stamp
		chosen = append(chosen, wk)
		gpus = append(gpus, g)
		whys = append(whys, p.why)
	}
	for rank, wk := range chosen {
		wk.stamp = 0
		as := Assignment{Task: t, Rank: rank, WorkerID: wk.w.ID, GPUs: gpus[rank], Why: whys[rank]}
		if t.Resources.GPUMilli > 0 {
			as.GPUMilli = wk.milliFor(t, as.GPUs)
		}
		p.plan.Assignments = append(p.plan.Assignments, as)
	}
	p.charge(t)
	t.Reason = Reason{}
	return true
}

// Reasons returns why each of ts is pending: what the last pass that
// examined it found (or, if the last pass left it out as blocked, the
// reason it was left out for), or, if the last pass stopped before it
// (the cluster was full), what ExplainAll finds now.
func (q *Queue) Reasons(ts []*Task, s *Snapshot) []Reason {
	out := make([]Reason, len(ts))
	var unexamined []*Task
	for i, t := range ts {
		if t.Reason.Code != "" && t.reasonPass == q.pass {
			out[i] = t.Reason
		} else if c := t.shapeCount(); c != nil && c.blocked && c.skipped == q.pass && t.reasonPass >= c.blockedAt {
			out[i] = c.now
		} else {
			unexamined = append(unexamined, t)
		}
	}
	if len(unexamined) == 0 {
		return out
	}
	explained := ExplainAll(q, unexamined, s)
	for i := range out {
		if out[i].Code == "" {
			out[i], explained = explained[0], explained[1:]
		}
	}
	return out
}
