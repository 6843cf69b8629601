package controller

import (
	"context"
	"sort"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/store"
)

// Store returns the store the controller writes to, for reads.
func (c *Controller) Store() store.Store { return c.store }

// Job returns a job with its attempts; a pending job's Reason says why the
// scheduler has not placed it. Unknown ids return ECodeNotFound.
func (c *Controller) Job(ctx context.Context, id string) (*berth.JobDetail, error) {
	d, err := store.JobDetail(ctx, c.store, id)
	if err != nil {
		return nil, err
	}
	if j := d.Job; j.State == berth.JobPending {
		var reason string
		if err := c.do(ctx, func() { reason = c.explain(id) }); err != nil {
			return nil, err
		}
		if reason != "" {
			j.Reason = reason
		}
	}
	return d, nil
}

// explain says why a queued job waits; "" when it is not queued.
func (c *Controller) explain(id string) string {
	js := c.jobs[id]
	if js == nil || js.task == nil || js.placed() {
		return ""
	}
	reason := c.queue.Reason(js.task, c.snapshot()).Message
	if js.job.Reason != "" {
		reason += "; " + js.job.Reason
	}
	return reason
}

// Jobs lists jobs from the store, newest first.
func (c *Controller) Jobs(ctx context.Context, f store.JobFilter) ([]*berth.Job, error) {
	return c.store.Jobs(ctx, f)
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
