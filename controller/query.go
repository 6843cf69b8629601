package controller

import (
	"context"
	"sort"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/scheduler"
	"github.com/berth-dev/berth/store"
)

// Job returns a job with its attempts; a pending job's Reason says why the
// scheduler has not placed it. Unknown ids return ECodeNotFound.
func (c *Controller) Job(ctx context.Context, id string) (*berth.JobDetail, error) {
	d, err := store.JobDetail(ctx, c.store, id)
	if err != nil {
		return nil, err
	}
	if err := c.explainPending(ctx, []*berth.Job{d.Job}); err != nil {
		return nil, err
	}
	return d, nil
}

// Jobs lists jobs from the store, newest first; as in Job, a pending job's
// Reason says why it waits.
func (c *Controller) Jobs(ctx context.Context, f store.JobFilter) ([]*berth.Job, error) {
	jobs, err := c.store.Jobs(ctx, f)
	if err != nil {
		return nil, err
	}
	return jobs, c.explainPending(ctx, jobs)
}

// JobHosts returns where each job of ids runs or ran, from the store
// (store.JobReader.JobHosts).
func (c *Controller) JobHosts(ctx context.Context, ids []string) (map[string]string, error) {
	return c.store.JobHosts(ctx, ids)
}

// explainPending sets the Reason of each queued job of jobs to why the
// scheduler has not placed it, in one round of the controller loop.
func (c *Controller) explainPending(ctx context.Context, jobs []*berth.Job) error {
	var pending []*berth.Job
	for _, j := range jobs {
		if j.State == berth.JobPending {
			pending = append(pending, j)
		}
	}
	if len(pending) == 0 {
		return nil
	}
	return c.do(ctx, func() { c.explain(pending) })
}

// explain sets the Reason of each job of pending, copies of queued jobs,
// to why the scheduler has not placed it. Loop only.
func (c *Controller) explain(pending []*berth.Job) {
	var tasks []*scheduler.Task
	var queued []*berth.Job // the job of pending whose task is tasks[i]
	for _, j := range pending {
		js := c.jobs[j.ID]
		if js == nil || js.task == nil || js.placed() {
			continue
		}
		// What the controller adds, e.g. a retry's backoff; a job
		// waiting one out is not queued, and the backoff is why.
		j.Reason = js.view().Reason
		if _, backingOff := c.restarting[js]; !backingOff {
			tasks, queued = append(tasks, js.task), append(queued, j)
		}
	}
	if len(tasks) == 0 {
		return
	}
	for i, r := range c.queue.Reasons(tasks, c.snapshot()) {
		if j := queued[i]; j.Reason != "" {
			j.Reason = r.Message + "; " + j.Reason
		} else {
			j.Reason = r.Message
		}
	}
}

// Workers returns every known worker with its observed state, the desired
// state of its host's queues and its faulty GPUs, by host.
func (c *Controller) Workers(ctx context.Context) ([]*berth.Worker, error) {
	var out []*berth.Worker
	err := c.do(ctx, func() {
		for _, ws := range c.workers {
			w := c.workerCopy(ws)
			w.ReservedFor = c.reserved[w.ID]
			w.FaultyGPUs, w.Models = ws.faulty, ws.sched.Models
			if len(c.controls[w.Host]) > 0 {
				w.Controls = c.hostControls(w.Host)
			}
			out = append(out, w)
		}
	})
	sort.Slice(out, func(i, k int) bool {
		if out[i].Host != out[k].Host {
			return out[i].Host < out[k].Host
		}
		return out[i].ID < out[k].ID
	})
	return out, err
}
