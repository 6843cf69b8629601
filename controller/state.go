package controller

import (
	"sort"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/scheduler"
	"github.com/berth-dev/berth/store"
)

// ReasonCancelRequested marks a running job whose cancel is on its way to
// the agent; it survives a restart so the cancel is carried out.
const ReasonCancelRequested = "cancel requested"

type jobState struct {
	job     *berth.Job // the loop's copy; batches get copies
	task    *scheduler.Task
	attempt *attemptState // current attempt, nil while queued
}

func (js *jobState) cancelRequested() bool { return js.job.Reason == ReasonCancelRequested }

func (js *jobState) update() store.JobUpdate {
	j := js.job
	return store.JobUpdate{ID: j.ID, State: j.State, Reason: j.Reason, ExitCode: j.ExitCode,
		Attempts: j.Attempts, StartedAt: j.StartedAt, FinishedAt: j.FinishedAt}
}

type attemptState struct {
	a       *berth.Attempt
	job     *jobState
	worker  *workerState
	logSize int64
}

func (as *attemptState) copy() *berth.Attempt {
	a := *as.a
	return &a
}

type workerState struct {
	w        *berth.Worker
	sched    *scheduler.Worker
	sess     *session // nil while disconnected
	lastSeen int64    // unix nanos of the last message, or of disconnect/start
	attempts map[string]*attemptState
	asked    bool // sent ready_for_work; owed no_work if nothing is placed
	got      bool // placed something this pass
}

func newWorkerState(w *berth.Worker) *workerState {
	ws := &workerState{w: w, attempts: map[string]*attemptState{}, sched: &scheduler.Worker{ID: w.ID}}
	ws.recompute()
	return ws
}

// recompute sets the scheduler's view of free capacity from the worker's
// declared capacity and its active attempts.
func (ws *workerState) recompute() {
	w, s := ws.w, ws.sched
	s.Host, s.Queues, s.Labels, s.GPUs = w.Host, w.Queues, w.Labels, w.GPUs
	s.CPUs, s.Memory = w.CPUs, w.Memory
	s.GPUUsed = make([]bool, len(w.GPUs))
	s.FreeCPUs, s.FreeMemory, s.FreeSlots = w.CPUs, w.Memory, w.Slots
	for _, as := range ws.attempts {
		ws.take(as)
	}
	s.Off = ws.sess == nil
	w.Running = len(ws.attempts)
}

func (ws *workerState) take(as *attemptState) {
	s := ws.sched
	for _, idx := range as.a.GPUs {
		for i, g := range s.GPUs {
			if g.Index == idx {
				s.GPUUsed[i] = true
			}
		}
	}
	r := as.job.job.Resources
	s.FreeCPUs -= r.CPUs
	s.FreeMemory -= r.Memory
	s.FreeSlots--
}

func (ws *workerState) release(as *attemptState) {
	delete(ws.attempts, as.a.ID)
	s := ws.sched
	for _, idx := range as.a.GPUs {
		for i, g := range s.GPUs {
			if g.Index == idx {
				s.GPUUsed[i] = false
			}
		}
	}
	r := as.job.job.Resources
	s.FreeCPUs += r.CPUs
	s.FreeMemory += r.Memory
	s.FreeSlots++
	ws.w.Running = len(ws.attempts)
}

func (ws *workerState) observedState() berth.WorkerState {
	switch {
	case ws.w.State == berth.WorkerLost:
		return berth.WorkerLost
	case ws.sess == nil:
		return berth.WorkerParked
	case ws.sched.FreeSlots <= 0:
		return berth.WorkerBusy
	}
	return berth.WorkerReady
}

// rebuild restores memory from what the store holds: queued jobs go back in
// the queue, active attempts back on their workers, which count as
// disconnected until their agents register again.
func (c *Controller) rebuild(a *store.Active) {
	now := c.now()
	for _, w := range a.Workers {
		ws := newWorkerState(w)
		ws.lastSeen = now.UnixNano()
		c.workers[w.ID] = ws
	}
	for _, j := range a.Jobs {
		js := &jobState{job: j}
		c.jobs[j.ID] = js
		if j.IdempotencyKey != "" {
			c.idem[j.IdempotencyKey] = append(c.idem[j.IdempotencyKey], j.ID)
		}
	}
	for _, at := range a.Attempts {
		js := c.jobs[at.JobID]
		if js == nil {
			continue // its job ended; the attempt row is stale
		}
		ws := c.workers[at.WorkerID]
		if ws == nil {
			ws = newWorkerState(&berth.Worker{ID: at.WorkerID, Host: at.Host, State: berth.WorkerParked})
			ws.lastSeen = now.UnixNano()
			c.workers[at.WorkerID] = ws
		}
		as := &attemptState{a: at, job: js, worker: ws, logSize: a.LogSizes[at.ID]}
		js.attempt = as
		c.attempts[at.ID] = as
		ws.attempts[at.ID] = as
	}
	for _, ws := range c.workers {
		ws.recompute()
		if ws.w.State != berth.WorkerLost {
			ws.w.State = berth.WorkerParked
		}
	}
	var queued []*jobState
	for _, js := range c.jobs {
		if js.attempt == nil {
			queued = append(queued, js)
		}
	}
	sort.Slice(queued, func(i, k int) bool { return queued[i].job.ID < queued[k].job.ID })
	for _, js := range queued {
		c.enqueue(js)
	}
	c.stats.loadCounts(a.Counts)
	c.dirty = true
}

// enqueue puts a job's task in the scheduler queue.
func (c *Controller) enqueue(js *jobState) {
	if js.task == nil {
		c.seq++
		j := js.job
		js.task = &scheduler.Task{JobID: j.ID, Queue: j.Queue, Priority: j.Priority, Submitted: j.CreatedAt,
			Seq: c.seq, Resources: j.Resources, Constraints: j.Constraints}
	}
	c.queue.Push(js.task)
}
