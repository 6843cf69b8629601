// Package sim replays a workload through the real scheduler in virtual
// time: a discrete-event simulation of a Berth cluster with no sleeps,
// goroutines or processes. Its events are job arrivals and completions
// (and wake-ups at the instants where the scheduler's decisions depend on
// time); after each instant's events it builds a scheduler.Snapshot, runs
// scheduler.RunPass and applies the plan, exactly as the controller does.
// Run returns the metrics that compare policies; the loaders in trace.go
// and yaml.go read real traces (Alibaba GPU v2023, Tiresias) and Berth's
// own small YAML format. docs/scheduling.md describes it all.
package sim

import (
	"cmp"
	"container/heap"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/scheduler"
)

// epoch is virtual time zero: a job's Submit offset is added to it.
var epoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// freeSlots is every simulated worker's slot count: large, so that only
// GPUs, CPUs and memory limit placement.
const freeSlots = 1 << 20

// maxPassesPerInstant bounds the passes at one virtual instant; more means
// the scheduler keeps preempting or dropping without end.
const maxPassesPerInstant = 10_000

// Cluster is the machines a replay runs on.
type Cluster struct {
	Workers []Worker
}

// Worker is one simulated machine.
type Worker struct {
	ID     string
	GPUs   []berth.GPU
	CPUs   float64
	Memory berth.Bytes
}

// GPUs returns the number of GPUs in c.
func (c *Cluster) GPUs() int {
	n := 0
	for _, w := range c.Workers {
		n += len(w.GPUs)
	}
	return n
}

// Job is one job of a workload.
type Job struct {
	ID          string
	User        string
	Queue       string // "" is berth.DefaultQueue
	Priority    int
	Submit      time.Duration // after virtual time zero
	Nodes       int           // gang size; 0 means 1
	Resources   berth.Resources
	Duration    time.Duration // how long it runs once started
	MaxRuntime  time.Duration // 0: none; the job is stopped when it is reached
	Preemptible bool
}

// Workload is the jobs a replay submits. Skipped counts the records of the
// source trace that were left out (see the loader's documentation).
type Workload struct {
	Jobs    []Job
	Skipped int
}

// ScaleArrivals divides every submission time by factor, keeping the
// durations: the same jobs arrive factor times faster, raising the load.
// It errors (naming the field "speedup") unless factor is positive.
func (w *Workload) ScaleArrivals(factor float64) error {
	if !(factor > 0) || math.IsInf(factor, 0) {
		return berth.Invalidf("speedup", "must be a positive number")
	}
	for i := range w.Jobs {
		w.Jobs[i].Submit = time.Duration(float64(w.Jobs[i].Submit) / factor)
	}
	return nil
}

// Run replays w on c under the scheduling policy cfg and returns the
// metrics. It errors, naming the job or worker and the field, when the
// input is invalid; when the scheduler breaks its contract (a gang placed
// in part, a placement on a worker that does not exist or on a GPU in use,
// or a pass loop that does not end); and with ctx's error when ctx ends
// first.
func Run(ctx context.Context, c *Cluster, w *Workload, cfg scheduler.Config) (Result, error) {
	start := time.Now()
	e, err := newEngine(c, w, cfg)
	if err != nil {
		return Result{}, err
	}
	if err := e.run(ctx); err != nil {
		return Result{}, err
	}
	res := e.result()
	res.WallSeconds = time.Since(start).Seconds()
	return res, nil
}

// state is where a job is in the replay.
type state int

const (
	notArrived state = iota
	pending
	running
	finished
	dropped
)

// job is a job during the replay.
type job struct {
	spec    *Job
	task    *scheduler.Task
	run     time.Duration // Duration, cut to MaxRuntime
	state   state
	attempt int // bumped at each start, so a stale completion is ignored
	members []member
	since   time.Time // pending since
	waited  time.Duration
	started time.Time // of the latest attempt
	ended   time.Time
	preempt int
	reason  string // why it was dropped
}

// member is one running rank of a job.
type member struct {
	worker int
	run    *scheduler.Running
}

// eventKind orders nothing; events at one instant are all applied before
// the pass.
type eventKind int

const (
	arrive   eventKind = iota
	complete           // the job's attempt ends
	wakeJob            // a time threshold of the job (reserve, starvation) is reached
	wakeAny            // a running job becomes preemptible, or a preemption leaves the window
)

type event struct {
	at      time.Time
	seq     uint64
	kind    eventKind
	job     *job
	attempt int
}

// events is a min-heap by time, then insertion order.
type events []*event

func (h events) Len() int { return len(h) }
func (h events) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].seq < h[j].seq
}
func (h events) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *events) Push(x any)   { *h = append(*h, x.(*event)) }
func (h *events) Pop() any {
	old := *h
	ev := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return ev
}

// engine is the state of one replay.
type engine struct {
	cfg       scheduler.Config
	q         *scheduler.Queue
	snap      scheduler.Snapshot
	workers   []*scheduler.Worker
	index     map[string]int // worker id → position
	jobs      []*job         // in submission order
	byTask    map[*scheduler.Task]*job
	byAttempt map[string]*job
	pending   []*job // pending jobs, compacted after each pass
	events    events
	seq       uint64
	now       time.Time
	arrivals  int // jobs not yet arrived
	running   int
	preempts  []time.Time // when each preemption happened, oldest first
	meter     *meter
	passes    int
	examined  int
}

func newEngine(c *Cluster, w *Workload, cfg scheduler.Config) (*engine, error) {
	if len(c.Workers) == 0 {
		return nil, berth.Invalidf("workers", "the cluster has no workers")
	}
	e := &engine{cfg: cfg, q: scheduler.NewQueue(cfg), index: map[string]int{}, byTask: map[*scheduler.Task]*job{},
		byAttempt: map[string]*job{}, now: epoch}
	if err := e.addWorkers(c); err != nil {
		return nil, err
	}
	if err := e.addJobs(w); err != nil {
		return nil, err
	}
	e.meter = newMeter(e.workers, e.jobs)
	if len(e.jobs) > 0 {
		e.now = e.jobs[0].task.Submitted
	}
	return e, nil
}

// addWorkers builds the scheduler's workers, sorted by id.
func (e *engine) addWorkers(c *Cluster) error {
	for i, w := range c.Workers {
		field := fmt.Sprintf("workers[%d]", i)
		switch {
		case w.ID == "":
			return berth.Invalidf(field+".id", "must not be empty")
		case w.CPUs < 0 || w.Memory < 0:
			return berth.Invalidf(field, "worker %s: cpus and memory must not be negative", w.ID)
		}
		if _, dup := e.index[w.ID]; dup {
			return berth.Invalidf(field+".id", "worker %s appears twice", w.ID)
		}
		gpus := slices.Clone(w.GPUs)
		for g := range gpus {
			gpus[g].Index = g
		}
		e.index[w.ID] = 0
		e.workers = append(e.workers, &scheduler.Worker{ID: w.ID, Host: w.ID, GPUs: gpus,
			GPUMilliUsed: make([]int, len(gpus)), CPUs: w.CPUs, Memory: w.Memory, FreeCPUs: w.CPUs,
			FreeMemory: w.Memory, FreeSlots: freeSlots})
	}
	slices.SortFunc(e.workers, func(a, b *scheduler.Worker) int { return strings.Compare(a.ID, b.ID) })
	for i, w := range e.workers {
		e.index[w.ID] = i
	}
	e.snap.Workers = e.workers
	return nil
}

// addJobs validates the jobs, makes their tasks and schedules their
// arrivals; jobs are ordered by submission, then by their place in w.
func (e *engine) addJobs(w *Workload) error {
	ids := make(map[string]bool, len(w.Jobs))
	order := make([]int, len(w.Jobs))
	for i := range w.Jobs {
		if err := validJob(&w.Jobs[i], i); err != nil {
			return err
		}
		if ids[w.Jobs[i].ID] {
			return berth.Invalidf(fmt.Sprintf("jobs[%d].id", i), "job %s appears twice", w.Jobs[i].ID)
		}
		ids[w.Jobs[i].ID] = true
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(w.Jobs[a].Submit, w.Jobs[b].Submit) })
	for seq, i := range order {
		spec := &w.Jobs[i]
		run := spec.Duration
		if spec.MaxRuntime > 0 {
			run = min(run, spec.MaxRuntime)
		}
		t := newTask(spec, uint64(seq))
		j := &job{spec: spec, task: t, run: run}
		e.jobs = append(e.jobs, j)
		e.byTask[t] = j
		e.push(t.Submitted, arrive, j)
	}
	e.arrivals = len(e.jobs)
	return nil
}

// newTask returns the scheduler's task for spec.
func newTask(spec *Job, seq uint64) *scheduler.Task {
	queue := spec.Queue
	if queue == "" {
		queue = berth.DefaultQueue
	}
	return &scheduler.Task{JobID: spec.ID, Priority: spec.Priority, Seq: seq, TaskSpec: &scheduler.TaskSpec{Nodes: max(spec.Nodes, 1), Queue: queue, User: spec.User, MaxRuntime: spec.MaxRuntime, Submitted: epoch.Add(spec.Submit), Resources: spec.Resources}}
}

// validJob checks what Run relies on; the loaders give the same rules
// with file and line.
func validJob(j *Job, i int) error {
	field := func(name string) string { return fmt.Sprintf("jobs[%d].%s", i, name) }
	r := &j.Resources
	switch {
	case j.ID == "":
		return berth.Invalidf(field("id"), "must not be empty")
	case j.Submit < 0:
		return berth.Invalidf(field("submit"), "job %s: must not be negative", j.ID)
	case j.Duration <= 0:
		return berth.Invalidf(field("duration"), "job %s: must be positive", j.ID)
	case j.MaxRuntime < 0:
		return berth.Invalidf(field("max_runtime"), "job %s: must not be negative", j.ID)
	case j.Nodes < 0 || j.Nodes > berth.MaxNodes:
		return berth.Invalidf(field("nodes"), "job %s: must be between 1 and %d", j.ID, berth.MaxNodes)
	case j.Priority < 0 || j.Priority > berth.MaxPriority:
		return berth.Invalidf(field("priority"), "job %s: must be between 0 and %d", j.ID, berth.MaxPriority)
	case r.GPUs < 0 || r.CPUs < 0 || r.Memory < 0 || r.GPUMemory < 0:
		return berth.Invalidf(field("resources"), "job %s: gpus, cpus and memory must not be negative", j.ID)
	}
	return nil
}

func (e *engine) push(at time.Time, kind eventKind, j *job) {
	e.seq++
	ev := &event{at: at, seq: e.seq, kind: kind, job: j}
	if j != nil {
		ev.attempt = j.attempt
	}
	heap.Push(&e.events, ev)
}

// run processes events instant by instant until every job has finished
// or been dropped.
func (e *engine) run(ctx context.Context) error {
	for n := 0; len(e.events) > 0 && !e.done(); n++ {
		if n%1024 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		at := e.events[0].at
		e.meter.advance(at.Sub(e.now))
		e.now = at
		pass := false
		for len(e.events) > 0 && e.events[0].at.Equal(at) {
			if e.handle(heap.Pop(&e.events).(*event)) {
				pass = true
			}
		}
		if pass && e.q.Len() > 0 {
			if err := e.runPasses(); err != nil {
				return err
			}
		}
	}
	// Nothing runs and nothing will arrive: what is left would never start.
	for _, j := range e.pending {
		if j.state == pending {
			e.drop(j, "never placed on an idle cluster: "+j.task.Reason.Message)
		}
	}
	return nil
}

func (e *engine) done() bool { return e.arrivals == 0 && e.running == 0 && e.q.Len() == 0 }

// handle applies one event and reports whether a pass should follow.
func (e *engine) handle(ev *event) bool {
	j := ev.job
	switch ev.kind {
	case arrive:
		e.arrivals--
		e.enqueue(j)
		return true
	case complete:
		if j.state != running || ev.attempt != j.attempt {
			return false // preempted since
		}
		e.stop(j)
		j.state, j.ended = finished, e.now
		return true
	case wakeJob:
		return j.state == pending
	}
	return true
}

// enqueue makes j pending and schedules wake-ups at the instants its
// waiting time crosses a threshold of the policy.
func (e *engine) enqueue(j *job) {
	j.state, j.since = pending, e.now
	e.q.Push(j.task)
	e.pending = append(e.pending, j)
	sub := j.task.Submitted
	if e.cfg.ReserveAfter > 0 {
		e.wake(sub.Add(e.cfg.ReserveAfter), j) // reserves once wait >= ReserveAfter
	}
	if e.cfg.StarvationAfter > 0 && e.cfg.StarvationBoost != 0 {
		e.wake(sub.Add(e.cfg.StarvationAfter+1), j) // boosted once wait > StarvationAfter
	}
}

func (e *engine) wake(at time.Time, j *job) {
	if !at.After(e.now) {
		return
	}
	kind := wakeJob
	if j == nil {
		kind = wakeAny
	}
	e.push(at, kind, j)
}

// runPasses runs passes at this instant until one neither preempts nor
// drops: a preemption frees resources for the job that asked for it, and a
// dropped job may have blocked a queue (head-of-line policy).
func (e *engine) runPasses() error {
	for range maxPassesPerInstant {
		e.snap.Now = e.now
		e.snap.RecentPreemptions = e.recentPreemptions()
		plan := scheduler.RunPass(e.q, &e.snap)
		e.passes++
		e.examined += plan.Examined
		if err := e.assign(plan.Assignments); err != nil {
			return err
		}
		preempted, err := e.preempt(plan.Preemptions)
		if err != nil {
			return err
		}
		dropped := e.dropUnfit()
		if (!preempted && !dropped) || e.q.Len() == 0 {
			return nil
		}
	}
	return fmt.Errorf("sim: at %s the scheduler still preempted or dropped jobs after %d passes", e.now.Sub(epoch), maxPassesPerInstant)
}

// recentPreemptions counts the preemptions in the last PreemptWindow.
func (e *engine) recentPreemptions() int {
	cut := e.now.Add(-e.cfg.PreemptWindow)
	i := 0
	for i < len(e.preempts) && !e.preempts[i].After(cut) {
		i++
	}
	e.preempts = e.preempts[i:]
	return len(e.preempts)
}

// assign starts every job of the plan; all members of a gang arrive in one
// plan.
func (e *engine) assign(as []scheduler.Assignment) error {
	for i := 0; i < len(as); {
		t := as[i].Task
		j := e.byTask[t]
		n := t.Nodes
		if j == nil || j.state != pending {
			return fmt.Errorf("sim: the plan assigns job %s, which is not pending", t.JobID)
		}
		if i+n > len(as) {
			return fmt.Errorf("sim: the plan places %d of the %d members of job %s", len(as)-i, n, t.JobID)
		}
		for k, a := range as[i : i+n] {
			if a.Task != t || a.Rank != k {
				return fmt.Errorf("sim: the plan places job %s rank %d where rank %d of job %s was due", a.Task.JobID, a.Rank, k, t.JobID)
			}
		}
		if err := e.start(j, as[i:i+n]); err != nil {
			return err
		}
		i += n
	}
	return nil
}

// start runs j's members where the plan put them.
func (e *engine) start(j *job, as []scheduler.Assignment) error {
	j.attempt++
	for _, a := range as {
		wi, ok := e.index[a.WorkerID]
		if !ok {
			return fmt.Errorf("sim: the plan places job %s on unknown worker %s", j.spec.ID, a.WorkerID)
		}
		w := e.workers[wi]
		share := cmp.Or(a.GPUMilli, berth.WholeGPU)
		for _, g := range a.GPUs {
			if g < 0 || g >= len(w.GPUMilliUsed) || w.GPUMilliUsed[g]+share > berth.WholeGPU {
				return fmt.Errorf("sim: the plan gives job %s GPU %d of worker %s, which is not free", j.spec.ID, g, w.ID)
			}
			w.GPUMilliUsed[g] += share
		}
		r := &j.task.Resources
		w.FreeCPUs -= r.CPUs
		w.FreeMemory -= r.Memory
		if w.FreeCPUs < -1e-9 || w.FreeMemory < 0 {
			return fmt.Errorf("sim: the plan overcommits the CPUs or memory of worker %s with job %s", w.ID, j.spec.ID)
		}
		run := &scheduler.Running{AttemptID: fmt.Sprintf("%s/%d/%d", j.spec.ID, j.attempt, a.Rank), JobID: j.spec.ID,
			Rank: a.Rank, Queue: j.task.Queue, User: j.task.User, Priority: j.task.Priority,
			Preemptible: j.spec.Preemptible, Gang: j.task.Nodes > 1, Started: e.now, MaxRuntime: j.spec.MaxRuntime,
			GPUs: a.GPUs, GPUMilli: a.GPUMilli, CPUs: r.CPUs, Memory: r.Memory}
		w.Running = append(w.Running, run)
		e.byAttempt[run.AttemptID] = j
		j.members = append(j.members, member{worker: wi, run: run})
		e.meter.changed(wi)
	}
	e.q.Remove(j.task)
	j.state, j.started = running, e.now
	j.waited += e.now.Sub(j.since)
	e.running++
	e.meter.busy += j.task.Resources.GPUsMilli() * j.task.Nodes
	e.push(e.now.Add(j.run), complete, j)
	if e.cfg.Preempt && j.spec.Preemptible && j.task.Nodes == 1 && e.cfg.PreemptMinRuntime > 0 {
		e.wake(e.now.Add(e.cfg.PreemptMinRuntime), nil) // becomes a possible victim
	}
	return nil
}

// stop frees what j's members hold.
func (e *engine) stop(j *job) {
	for _, m := range j.members {
		w := e.workers[m.worker]
		for _, g := range m.run.GPUs {
			w.GPUMilliUsed[g] -= cmp.Or(m.run.GPUMilli, berth.WholeGPU)
		}
		w.FreeCPUs += m.run.CPUs
		w.FreeMemory += m.run.Memory
		w.Running = slices.DeleteFunc(w.Running, func(r *scheduler.Running) bool { return r == m.run })
		delete(e.byAttempt, m.run.AttemptID)
		e.meter.changed(m.worker)
	}
	j.members = nil
	e.running--
	e.meter.busy -= j.task.Resources.GPUsMilli() * j.task.Nodes
}

// preempt stops each victim job (all its members) and queues its same
// task again, as the controller does: the job reruns from scratch, keeping
// its submission time and order. It reports whether it stopped any.
func (e *engine) preempt(ps []scheduler.Preemption) (bool, error) {
	stopped := false
	for _, p := range ps {
		j := e.byAttempt[p.AttemptID]
		if j == nil {
			return false, fmt.Errorf("sim: the plan preempts attempt %s of job %s, which is not running", p.AttemptID, p.JobID)
		}
		e.stop(j)
		j.preempt++
		e.preempts = append(e.preempts, e.now)
		e.wake(e.now.Add(e.cfg.PreemptWindow), nil) // the budget grows back
		e.enqueue(j)
		stopped = true
	}
	return stopped, nil
}

// dropUnfit drops the pending jobs the last pass found no worker could
// ever run, compacts the pending list, and reports whether it dropped any.
func (e *engine) dropUnfit() bool {
	kept := e.pending[:0]
	found := false
	for _, j := range e.pending {
		if j.state == pending && j.task.Reason.Code == scheduler.ReasonUnfit {
			e.drop(j, j.task.Reason.Message)
			found = true
		}
		if j.state == pending {
			kept = append(kept, j)
		}
	}
	clear(e.pending[len(kept):])
	e.pending = kept
	return found
}

func (e *engine) drop(j *job, why string) {
	e.q.Remove(j.task)
	j.state, j.reason, j.ended = dropped, why, e.now
}
