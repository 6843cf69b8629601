package controller

import (
	"context"
	"fmt"
	"iter"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/scheduler"
)

// What a cloud pool's autoscaler (package provision) reads from the
// controller and gives it: the pending jobs' demand by shape, each host's
// workers' idleness, pool events, and the machines the pools could rent,
// which count when a submission is checked (admit.go).

// Rentable is what cloud pools could rent: Reach yields, like
// Backend.Reach, the largest machine each pool could rent for spec, as
// the scheduler sees it (only its totals count); nothing for a spec no
// pool rents for. It is called on the loop and must not block.
type Rentable interface {
	Reach(spec *berth.JobSpec) iter.Seq[*scheduler.Worker]
}

// SetRentable makes the machines r yields count when a submission is
// checked: a job asking for a GPU type no worker has but a pool can rent
// is not refused. Call it before Start.
func (c *Controller) SetRentable(r Rentable) { c.rentable = r }

// Demand is what pending jobs alike in queue, resources, nodes and
// constraints ask for, and for how long the longest waiting of them has
// waited.
type Demand struct {
	Queue       string
	Nodes       int // members of each job; 1 for a single-node job
	Resources   berth.Resources
	Constraints berth.Constraints
	Jobs        int       // how many pending jobs have this shape
	Since       time.Time // when the longest waiting of them was submitted
}

// HostActivity is what the autoscaler needs of a host's workers: whether
// any is connected and how many attempts they hold.
type HostActivity struct {
	Host      string
	Connected bool
	Running   int
}

// PoolView is the controller's side of an autoscaler's tick.
type PoolView struct {
	At time.Time
	// Demand is the pending jobs that have waited since before the cut-off
	// PendingDemand was given, grouped by shape: jobs held back by a quota
	// rule, handed to a federation peer or waiting out a retry backoff are
	// left out.
	Demand []Demand
	// Hosts is every host with a worker not lost, by name.
	Hosts []HostActivity
}

// PendingDemand returns the view an autoscaler decides on: the demand of
// the jobs pending since before waitedBefore, and the hosts' activity. It
// walks the active jobs once (not the stored history) and groups them by
// shape, so the view is as small as the kinds of waiting jobs.
func (c *Controller) PendingDemand(ctx context.Context, waitedBefore time.Time) (*PoolView, error) {
	out := &PoolView{}
	err := c.do(ctx, func() {
		out.At = c.now()
		byShape := map[string]*Demand{}
		byPlain := map[plainShape]*Demand{} // the shapes without labels, found without a demandKey
		for _, js := range c.jobs {
			j := js.view()
			if j.State != berth.JobPending || js.placed() || js.federated() || js.task == nil || !j.CreatedAt.Before(waitedBefore) {
				continue
			}
			if _, backoff := c.restarting[js]; backoff || js.task.Reason.Code == scheduler.ReasonQuota {
				continue
			}
			var plain plainShape
			var d *Demand
			if len(j.Constraints.Labels) == 0 {
				plain = plainShape{queue: j.Queue, nodes: max(j.Nodes, 1), resources: j.Resources, host: j.Constraints.Host}
				d = byPlain[plain]
			}
			if d == nil {
				key := demandKey(j)
				if d = byShape[key]; d == nil {
					d = &Demand{Queue: j.Queue, Nodes: max(j.Nodes, 1), Resources: j.Resources,
						Constraints: berth.Constraints{Host: j.Constraints.Host, Labels: maps.Clone(j.Constraints.Labels)}, Since: j.CreatedAt}
					byShape[key] = d
				}
				if len(j.Constraints.Labels) == 0 {
					byPlain[plain] = d
				}
			}
			d.Jobs++
			if j.CreatedAt.Before(d.Since) {
				d.Since = j.CreatedAt
			}
		}
		for _, d := range byShape {
			out.Demand = append(out.Demand, *d)
		}
		hosts := map[string]*HostActivity{}
		for _, ws := range c.order {
			if ws.w.State == berth.WorkerLost {
				continue
			}
			h := hosts[ws.w.Host]
			if h == nil {
				h = &HostActivity{Host: ws.w.Host}
				hosts[ws.w.Host] = h
			}
			h.Connected = h.Connected || ws.sess != nil
			h.Running += len(ws.attempts)
		}
		for _, h := range hosts {
			out.Hosts = append(out.Hosts, *h)
		}
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out.Demand, func(a, b Demand) int { return a.Since.Compare(b.Since) })
	slices.SortFunc(out.Hosts, func(a, b HostActivity) int { return strings.Compare(a.Host, b.Host) })
	return out, nil
}

// plainShape is the shape of a job without label constraints, as
// PendingDemand groups it: comparable, so that grouping a million queued
// jobs builds no key for each (demandKey).
type plainShape struct {
	queue     string
	nodes     int
	resources berth.Resources
	host      string
}

// demandKey is the shape of j as PendingDemand groups it.
func demandKey(j *berth.Job) string {
	r := j.Resources
	var b strings.Builder
	fmt.Fprintf(&b, "%s\x00%d\x00%d\x00%s\x00%d\x00%g\x00%d\x00%s", j.Queue, max(j.Nodes, 1), r.GPUs, r.GPUType,
		r.GPUMemory, r.CPUs, r.Memory, j.Constraints.Host)
	keys := slices.Collect(maps.Keys(j.Constraints.Labels))
	sort.Strings(keys)
	for _, k := range keys {
		b.WriteByte(0)
		b.WriteString(k + "=" + j.Constraints.Labels[k])
	}
	return b.String()
}

// RecordPoolEvent emits e, a pool event, on the event stream and in the
// audit log, stamped with the controller's clock when its time is zero,
// and returns once it is durable.
func (c *Controller) RecordPoolEvent(ctx context.Context, e berth.Event) error {
	var written <-chan struct{}
	if err := c.do(ctx, func() {
		if e.Time.IsZero() {
			e.Time = c.now().UTC()
		}
		c.emit(e)
		written = c.durable()
	}); err != nil {
		return err
	}
	return c.awaitDurable(ctx, written)
}

// Registered reports whether an agent of host is connected now: a rented
// instance's agent has joined (provision.Registry). It is false once the
// controller has stopped.
func (c *Controller) Registered(host string) bool {
	var ok bool
	err := c.do(context.Background(), func() {
		for _, ws := range c.order {
			ok = ok || ws.w.Host == host && ws.sess != nil
		}
	})
	return err == nil && ok
}
