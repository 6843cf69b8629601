package controller

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/berth-dev/berth"
)

// backlogs are the numbers of pending jobs the benchmarks below hold: the
// issue 29 curve.
var backlogs = []int{0, 100_000, 1_000_000}

// parked returns a running controller with no store holding n pending
// jobs in a queue no worker serves (backlogged), and their ids; the
// benchmark stops it.
func parked(b *testing.B, n int) (*Controller, []string) {
	c, ids := backlogged(n)
	c.publishMetrics() // as Start does
	go c.loop()
	b.Cleanup(func() { close(c.stop); <-c.done })
	return c, ids
}

// backlogged returns a controller with no store, not started, holding n
// pending jobs in a queue no worker serves, made in arrays of 10,000, and
// their ids.
func backlogged(n int) (*Controller, []string) {
	c := New(Config{})
	spec := berth.DefaultJobSpec()
	spec.Command, spec.Queue = []string{"true"}, "parked"
	ids := make([]string, 0, n)
	for left := n; left > 0; left -= 10_000 {
		for _, j := range c.createJobs(&berth.SubmitRequest{JobSpec: spec, Array: min(left, 10_000)}, "bench") {
			ids = append(ids, j.ID)
		}
		c.fx.take() // no store: the rows are dropped
	}
	c.dirty = false
	return c, ids
}

// BenchmarkMetrics times Metrics, what /metrics, the dashboard's overview
// and its sampler read, on a controller holding a backlog (parked).
func BenchmarkMetrics(b *testing.B) {
	for _, n := range backlogs {
		b.Run(fmt.Sprintf("jobs=%d", n), func(b *testing.B) {
			c, _ := parked(b, n)
			ctx := context.Background()
			for b.Loop() {
				m, err := c.Metrics(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if m.QueueDepth["parked"] != n {
					b.Fatalf("depth %d, want %d", m.QueueDepth["parked"], n)
				}
			}
		})
	}
}

// BenchmarkPublishMetrics times what the loop pays for Metrics: making
// the counters it returns, in each pass of the loop that changed
// something, on a controller holding a backlog (backlogged).
func BenchmarkPublishMetrics(b *testing.B) {
	for _, n := range backlogs {
		b.Run(fmt.Sprintf("jobs=%d", n), func(b *testing.B) {
			c, _ := backlogged(n)
			for b.Loop() {
				c.publishMetrics()
			}
			if m := c.metrics.Load(); m.QueueDepth["parked"] != n {
				b.Fatalf("depth %d, want %d", m.QueueDepth["parked"], n)
			}
		})
	}
}

// BenchmarkServices times Services (berth services, the dashboard's
// services page, a swap waiting for its service) on a controller holding
// a backlog of batch jobs (parked).
func BenchmarkServices(b *testing.B) {
	for _, n := range backlogs {
		b.Run(fmt.Sprintf("jobs=%d", n), func(b *testing.B) {
			c, _ := parked(b, n)
			ctx := context.Background()
			for b.Loop() {
				if list, err := c.Services(ctx); err != nil || len(list) != 0 {
					b.Fatal(list, err)
				}
			}
		})
	}
}

// BenchmarkExplainPage times what a page of a job listing (berth jobs,
// GET /api/v1/jobs, the dashboard's jobs page) does on the loop: say why
// each of its pending jobs waits, here the newest 50 of a backlog
// (parked), as a listing newest first shows them.
func BenchmarkExplainPage(b *testing.B) {
	for _, n := range backlogs[1:] {
		b.Run(fmt.Sprintf("jobs=%d", n), func(b *testing.B) {
			c, ids := parked(b, n)
			page := slices.Clone(ids[len(ids)-50:])
			ctx := context.Background()
			for b.Loop() {
				jobs := make([]*berth.Job, len(page))
				for i, id := range page {
					jobs[i] = &berth.Job{ID: id, State: berth.JobPending}
				}
				if err := c.explainPending(ctx, jobs); err != nil || jobs[0].Reason == "" {
					b.Fatal(jobs[0].Reason, err)
				}
			}
		})
	}
}
