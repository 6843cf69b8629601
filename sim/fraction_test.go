package sim_test

import (
	"testing"
	"time"

	"github.com/berth-dev/berth/scheduler"
)

// TestSimReplaysFractions: four half-GPU jobs on one GPU run two at a
// time, sharing it: the second pair starts when the first ends, and the
// GPU is busy all along, under every policy.
func TestSimReplaysFractions(t *testing.T) {
	t.Parallel()
	doc := `workers:
  - {name: w, gpus: 1xA100:80GiB, cpus: 16, memory: 64GiB}
jobs:
  - {id: half, count: 4, gpus: 0.5, duration: 1h}
`
	for _, policy := range scheduler.PolicyNames() {
		r := replay(t, doc, policy)
		if r.Completed != 4 || r.MakespanSeconds != 2*3600 || r.GPUUtilization != 1 {
			t.Fatalf("%s: %d completed, makespan %gs, GPU utilisation %g; want 4, 7200 and 1", policy, r.Completed, r.MakespanSeconds, r.GPUUtilization)
		}
		for id, start := range map[string]time.Duration{"half-0": 0, "half-1": 0, "half-2": time.Hour, "half-3": time.Hour} {
			if o := outcome(t, r, id); o.Start != start {
				t.Errorf("%s: %s started at %s, want %s", policy, id, o.Start, start)
			}
		}
	}
}
