package controller

import (
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/scheduler"
	"github.com/berth-dev/berth/store"
	"github.com/berth-dev/berth/wire"
)

// schedule runs one scheduling pass and applies its plan: each assignment
// becomes a durable attempt, then a job_assign to the worker's agent.
func (c *Controller) schedule() {
	c.dirty = false
	start := time.Now()
	now := c.now().UTC()
	workers := make([]*scheduler.Worker, 0, len(c.workers))
	for _, ws := range c.workers {
		ws.got = false
		if ws.sess != nil {
			workers = append(workers, ws.sched)
		}
	}
	plan := scheduler.Schedule(c.queue, workers, now)
	if n := len(plan.Assignments); n > 0 {
		b := &store.Batch{Attempts: make([]*berth.Attempt, 0, n), JobUpdates: make([]store.JobUpdate, 0, n)}
		for _, pa := range plan.Assignments {
			c.assign(pa, now, b)
		}
		c.write(b)
	}
	for _, ws := range c.workers {
		if ws.asked && ws.sess != nil {
			ws.asked = false
			if !ws.got {
				s := ws.sess
				c.afterCommit(func() { s.send(wire.TypeNoWork, &wire.NoWork{}) })
			}
		}
	}
	c.stats.passes.observe(time.Since(start))
}

func (c *Controller) assign(pa scheduler.Assignment, now time.Time, b *store.Batch) {
	js, ws := c.jobs[pa.Task.JobID], c.workers[pa.WorkerID]
	c.queue.Remove(pa.Task)
	j := js.job
	a := &berth.Attempt{ID: c.ids.New(now), JobID: j.ID, TaskIndex: pa.Task.Index, WorkerID: ws.w.ID,
		Host: ws.w.Host, GPUs: pa.GPUs, State: berth.AttemptAssigned, CreatedAt: now}
	as := &attemptState{a: a, job: js, worker: ws}
	js.attempt = as
	c.attempts[a.ID] = as
	ws.attempts[a.ID] = as
	ws.take(as)
	ws.w.Running = len(ws.attempts)
	ws.got = true
	j.Attempts++
	b.Attempts = append(b.Attempts, as.copy())
	b.JobUpdates = append(b.JobUpdates, js.update())
	c.stats.placed.observe(now.Sub(j.CreatedAt))
	msg := &wire.JobAssign{AttemptID: a.ID, JobID: j.ID, TaskIndex: a.TaskIndex, ArrayIndex: j.ArrayIndex,
		Command: j.Command, Env: j.Env, Workdir: j.Workdir, GPUs: a.GPUs,
		MaxRuntime: time.Duration(j.MaxRuntime), Grace: c.cfg.Grace}
	s := ws.sess
	c.afterCommit(func() { s.send(wire.TypeJobAssign, msg) })
}
