package sim_test

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/scheduler"
	"github.com/berth-dev/berth/sim"
)

func fillCluster(gpusPerWorker ...int) *sim.Cluster {
	c := &sim.Cluster{}
	for i, n := range gpusPerWorker {
		w := sim.Worker{ID: string(rune('a' + i)), CPUs: 64, Memory: 256 << 30}
		for g := range n {
			w.GPUs = append(w.GPUs, berth.GPU{Index: g, Model: "A100", Memory: 80 << 30})
		}
		c.Workers = append(c.Workers, w)
	}
	return c
}

func fillTask(id string, gpus, milli int) sim.Job {
	return sim.Job{ID: id, User: "u", Priority: 100, Nodes: 1, Duration: time.Second,
		Resources: berth.Resources{GPUs: gpus, GPUMilli: milli, CPUs: 1}}
}

func fill(t *testing.T, c *sim.Cluster, pool []sim.Job, policy string, opt sim.FillOptions) sim.FillResult {
	t.Helper()
	cfg, err := scheduler.PolicyConfig(policy)
	if err != nil {
		t.Fatal(err)
	}
	res, err := sim.Fill(context.Background(), c, pool, cfg, opt)
	if err != nil {
		t.Fatalf("%s: %v", policy, err)
	}
	return res
}

// TestFillCountsWhatFractionsStrand: 0.6-GPU tasks on one 2-GPU worker.
// Two fit, one a GPU, leaving 0.4 on each that no 0.6 can use: the third
// fails at 90 % arrived with 40 % unallocated, and so it stays.
func TestFillCountsWhatFractionsStrand(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{"berth", "bestfit", "fgd"} {
		res := fill(t, fillCluster(2), []sim.Job{fillTask("p", 0, 600)}, policy,
			sim.FillOptions{Seed: 1, Points: []float64{0.5, 1}, Curve: 0.3})
		want := sim.FillResult{Seed: 1, GPUs: 2, Tasks: 4, Placed: 2, Failed: 2, ArrivedAtFull: 0.9, UnallocatedAtFull: 0.4,
			Points: []sim.FillPoint{{Arrived: 0.5, Unallocated: 0.4}, {Arrived: 1, Unallocated: 0.4}},
			Curve:  []sim.FillPoint{{Arrived: 0, Unallocated: 0.7}, {Arrived: 0.3, Unallocated: 0.7}, {Arrived: 0.6, Unallocated: 0.4}, {Arrived: 0.9, Unallocated: 0.4}}}
		res.WallSeconds = 0
		if !reflect.DeepEqual(res, want) {
			t.Errorf("%s:\n got %+v\nwant %+v", policy, res, want)
		}
	}
}

// TestFillLeavesOutWhatNeverFits: a 4-GPU task fits no 2-GPU worker: it
// is counted apart and is not load; the 0.6 tasks fill as alone.
func TestFillLeavesOutWhatNeverFits(t *testing.T) {
	t.Parallel()
	res := fill(t, fillCluster(2), []sim.Job{fillTask("p", 0, 600), fillTask("big", 4, 0)}, "fgd",
		sim.FillOptions{Seed: 3, Points: []float64{1}})
	if res.Unfit == 0 || res.Placed != 2 || res.Failed != 2 || res.Tasks != res.Unfit+4 || res.ArrivedAtFull != 0.9 || res.UnallocatedAtFull != 0.4 {
		t.Fatalf("%+v", res)
	}
}

// TestFillIsSeeded: fractions and whole GPUs drawn at random onto
// workers of 1 to 8 GPUs. The same seed gives the same result under each
// policy; another seed draws other tasks.
func TestFillIsSeeded(t *testing.T) {
	t.Parallel()
	c := fillCluster(8, 8, 4, 4, 2, 2, 1, 1)
	pool := []sim.Job{fillTask("a", 0, 700), fillTask("b", 0, 300), fillTask("c", 0, 600), fillTask("whole", 1, 0),
		fillTask("two", 2, 0), fillTask("eight", 8, 0)}
	opt := sim.FillOptions{Seed: 7, Points: []float64{0.5, 0.7, 0.9, 1}, Curve: 0.1}
	for _, policy := range []string{"berth", "bestfit", "fgd"} {
		res := fill(t, c, pool, policy, opt)
		again := fill(t, c, pool, policy, opt)
		res.WallSeconds, again.WallSeconds = 0, 0
		if !reflect.DeepEqual(res, again) {
			t.Fatalf("%s: two runs differ:\n%+v\n%+v", policy, res, again)
		}
		if len(res.Points) != 4 || res.Points[3].Arrived != 1 || len(res.Curve) != 11 || res.Failed == 0 ||
			res.Placed+res.Failed != res.Tasks || res.UnallocatedAtFull < 0 || res.UnallocatedAtFull > 1 {
			t.Fatalf("%s: %+v", policy, res)
		}
		other := opt
		other.Seed = 8
		if o := fill(t, c, pool, policy, other); reflect.DeepEqual(o.Curve, res.Curve) {
			t.Fatalf("%s: seeds 7 and 8 give the same curve %+v", policy, o.Curve)
		}
	}
}

func TestFillRejectsBadInput(t *testing.T) {
	t.Parallel()
	cfg := scheduler.DefaultConfig()
	gang := fillTask("g", 1, 0)
	gang.Nodes = 2
	for _, tc := range []struct {
		c    *sim.Cluster
		pool []sim.Job
		opt  sim.FillOptions
		want string
	}{
		{fillCluster(1), nil, sim.FillOptions{Points: []float64{1}}, "tasks"},
		{fillCluster(1), []sim.Job{fillTask("p", 1, 0)}, sim.FillOptions{Points: []float64{0}}, "points"},
		{fillCluster(1), []sim.Job{gang}, sim.FillOptions{Points: []float64{1}}, "jobs[0].nodes"},
		{fillCluster(0), []sim.Job{fillTask("p", 1, 0)}, sim.FillOptions{Points: []float64{1}}, "workers"},
		{fillCluster(1), []sim.Job{fillTask("big", 4, 0)}, sim.FillOptions{Points: []float64{1}}, "no task of the pool fits"},
	} {
		_, err := sim.Fill(context.Background(), tc.c, tc.pool, cfg, tc.opt)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v", tc.want, err)
		}
	}
}
