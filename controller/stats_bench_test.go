package controller

import (
	"context"
	"fmt"
	"testing"

	"github.com/berth-dev/berth"
)

// BenchmarkMetrics times Metrics, what /metrics, the dashboard's overview
// and its sampler read, on a running loop over a controller holding N
// pending jobs in a queue no worker serves (the issue 29 backlog), made
// in arrays of 10,000.
func BenchmarkMetrics(b *testing.B) {
	for _, n := range []int{0, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("jobs=%d", n), func(b *testing.B) {
			c := New(Config{})
			spec := berth.DefaultJobSpec()
			spec.Command, spec.Queue = []string{"true"}, "parked"
			for left := n; left > 0; left -= 10_000 {
				c.createJobs(&berth.SubmitRequest{JobSpec: spec, Array: min(left, 10_000)}, c.pool, "bench")
				c.fx.take() // no store: the rows are dropped
			}
			c.dirty = false
			go c.loop()
			defer func() { close(c.stop); <-c.done }()
			ctx := context.Background()
			b.ResetTimer()
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
