package scheduler

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/berth-dev/berth"
)

// TestPlacementsChooseDifferently: where half-GPU requests are the usual
// kind, a 0.3 task goes on the GPU with 0.8 free (leaving 0.5, still
// usable) under fgd, and on the one with 0.5 free (leaving 0.2, which no
// usual request can use) under Berth's best fit and the paper's.
func TestPlacementsChooseDifferently(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ placement, want, why string }{
		{PlacementDefault, "b", ""},
		{PlacementBestFit, "b", "bestfit: "},
		{PlacementFGD, "a", "fgd: fragmentation grows by 0.000 GPU here, the least of the 2 workers"},
	} {
		a, b := newWorker("a", gpus(1, "A100", 80<<30)), newWorker("b", gpus(1, "A100", 80<<30))
		a.GPUMilliUsed[0], b.GPUMilliUsed[0] = 200, 500
		cfg := DefaultConfig()
		cfg.Placement = tc.placement
		q := NewQueue(cfg)
		if q.mix != nil {
			for range 9 {
				q.mix.Observe(Demand{GPUs: 1, Milli: 500, CPUs: 1})
			}
		}
		q.Push(fraction("j", 100, 300))
		plan := RunPass(q, &Snapshot{Now: t0, Workers: []*Worker{a, b}})
		if len(plan.Assignments) != 1 {
			t.Fatalf("%q: %d assignments", tc.placement, len(plan.Assignments))
		}
		as := plan.Assignments[0]
		if as.WorkerID != tc.want || as.GPUMilli != 300 || !strings.HasPrefix(as.Why, tc.why) || (tc.why == "") != (as.Why == "") {
			t.Errorf("%q: placed on %s (%d milli), why %q; want %s, why %q…", tc.placement, as.WorkerID, as.GPUMilli, as.Why, tc.want, tc.why)
		}
	}
}

// TestFGDKeepsBigWorkersWhole: when 8-GPU requests are part of the mix,
// a one-GPU task goes to the 2-GPU worker rather than break into an idle
// 8-GPU one, though both are idle and best fit by free GPUs would do the
// same only by chance of order.
func TestFGDKeepsBigWorkersWhole(t *testing.T) {
	t.Parallel()
	big, small := newWorker("a-big", gpus(8, "A100", 80<<30)), newWorker("b-small", gpus(2, "A100", 80<<30))
	cfg := DefaultConfig()
	cfg.Placement = PlacementFGD
	q := NewQueue(cfg)
	q.mix.Observe(Demand{GPUs: 8, Milli: berth.WholeGPU})
	q.Push(task("j", 100, t0, 1))
	plan := RunPass(q, &Snapshot{Now: t0, Workers: []*Worker{big, small}})
	if got := placements(plan)["j"]; fmt.Sprint(got) != "[0@b-small]" {
		t.Fatalf("placed %v, want on b-small", got)
	}
}

// randomShared draws workers with GPUs free, shared by fractions or given
// whole, and some CPUs and memory in use.
func randomShared(rt *rapid.T) []*Worker {
	ws := make([]*Worker, rapid.IntRange(1, 6).Draw(rt, "workers"))
	for i := range ws {
		w := newWorker(fmt.Sprint("w", i), gpus(rapid.SampledFrom([]int{0, 1, 2, 4, 8}).Draw(rt, "gpus"),
			rapid.SampledFrom([]string{"H100", "A100"}).Draw(rt, "model"), 80<<30))
		for g := range w.GPUMilliUsed {
			w.GPUMilliUsed[g] = rapid.SampledFrom([]int{0, 0, 250, 500, 700, 900, berth.WholeGPU}).Draw(rt, "used")
		}
		w.FreeCPUs = float64(rapid.IntRange(0, 64).Draw(rt, "cpus"))
		ws[i] = w
	}
	return ws
}

// randomRequest draws whole GPUs, a fraction or none.
func randomRequest(rt *rapid.T, id string) *Task {
	tk := task(id, rapid.IntRange(0, 500).Draw(rt, "prio"), t0, 0)
	switch rapid.IntRange(0, 2).Draw(rt, "kind") {
	case 0:
		tk.Resources.GPUs = rapid.IntRange(1, 4).Draw(rt, "ngpu")
	case 1:
		tk.Resources.GPUMilli = rapid.SampledFrom([]int{100, 250, 300, 500, 600, 750}).Draw(rt, "milli")
	}
	tk.Resources.CPUs = float64(rapid.IntRange(0, 16).Draw(rt, "tcpus"))
	return tk
}

// TestScoredPlacementInvariants: under fgd and bestfit, on random
// clusters of shared GPUs, no GPU goes over 1000 milli, a fraction takes
// one GPU that is not given whole, whole GPUs go only where no fraction
// is, CPUs are never overcommitted, and the same input gives the same
// plan.
func TestScoredPlacementInvariants(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(rt *rapid.T) {
		ws := randomShared(rt)
		cfg := DefaultConfig()
		cfg.Placement = rapid.SampledFrom([]string{PlacementFGD, PlacementBestFit}).Draw(rt, "placement")
		var tasks []*Task
		for i := range rapid.IntRange(1, 20).Draw(rt, "tasks") {
			tasks = append(tasks, randomRequest(rt, fmt.Sprint("j", i)))
		}
		_, plan := place(ws, cfg, tasks...)
		used := map[string][]int{}
		cpus := map[string]float64{}
		for _, w := range ws {
			used[w.ID] = slices.Clone(w.GPUMilliUsed)
			cpus[w.ID] = w.FreeCPUs
		}
		for _, a := range plan.Assignments {
			r := &a.Task.Resources
			u := used[a.WorkerID]
			if cpus[a.WorkerID] -= r.CPUs; cpus[a.WorkerID] < 0 {
				rt.Fatalf("%s overcommits the CPUs of %s", a.Task.JobID, a.WorkerID)
			}
			if r.GPUMilli > 0 {
				if len(a.GPUs) != 1 || a.GPUMilli != r.GPUMilli || u[a.GPUs[0]]+a.GPUMilli > berth.WholeGPU {
					rt.Fatalf("fraction %s: GPUs %v share %d on %s used %v", a.Task.JobID, a.GPUs, a.GPUMilli, a.WorkerID, u)
				}
				u[a.GPUs[0]] += a.GPUMilli
				continue
			}
			if len(a.GPUs) != r.GPUs || a.GPUMilli != 0 {
				rt.Fatalf("%s asked %d whole GPUs, got %v (share %d)", a.Task.JobID, r.GPUs, a.GPUs, a.GPUMilli)
			}
			for _, g := range a.GPUs {
				if u[g] != 0 {
					rt.Fatalf("%s takes GPU %d of %s whole, which has %d milli in use", a.Task.JobID, g, a.WorkerID, u[g])
				}
				u[g] = berth.WholeGPU
			}
		}
		again := make([]*Task, len(tasks))
		for i, tk := range tasks {
			c := *tk
			c.queued, c.list, c.shape, c.removed = false, nil, nil, false
			again[i] = &c
		}
		if _, p2 := place(ws, cfg, again...); explainPlan(plan) != explainPlan(p2) {
			rt.Fatalf("plans differ for the same input:\n%s\n%s", explainPlan(plan), explainPlan(p2))
		}
	})
}

func explainPlan(p Plan) string {
	var b strings.Builder
	for _, a := range p.Assignments {
		fmt.Fprintf(&b, "%s/%d@%s%v:%d %s\n", a.Task.JobID, a.Rank, a.WorkerID, a.GPUs, a.GPUMilli, a.Why)
	}
	return b.String()
}

// TestFGDChoosesTheLeastGrowth checks one placement against every choice
// there was: no worker and GPU the task fits would have grown the
// fragmentation against the learned mix less.
func TestFGDChoosesTheLeastGrowth(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(rt *rapid.T) {
		ws := randomShared(rt)
		cfg := DefaultConfig()
		cfg.Placement = PlacementFGD
		q := NewQueue(cfg)
		for i := range rapid.IntRange(0, 10).Draw(rt, "history") {
			q.mix.Observe(demandOf(randomRequest(rt, fmt.Sprint("h", i))))
		}
		tk := randomRequest(rt, "j")
		q.Push(tk)
		plan := RunPass(q, &Snapshot{Now: t0, Workers: ws})
		mix := q.mix.Entries()
		growth := func(w *Worker, gs []int) float64 {
			n := FragNode{GPUs: w.GPUs, FreeCPUs: w.FreeCPUs, FreeMemory: w.FreeMemory}
			for _, u := range w.GPUMilliUsed {
				n.FreeMilli = append(n.FreeMilli, berth.WholeGPU-u)
			}
			before := Fragmentation(&n, mix)
			n.FreeMilli = slices.Clone(n.FreeMilli)
			for _, g := range gs {
				n.FreeMilli[g] -= max(tk.Resources.GPUMilli, tk.Resources.GPUs*berth.WholeGPU/max(tk.Resources.GPUs, 1))
			}
			n.FreeCPUs -= tk.Resources.CPUs
			return Fragmentation(&n, mix) - before
		}
		least, fits := math.Inf(1), false
		for _, w := range ws {
			if w.FreeCPUs < tk.Resources.CPUs {
				continue
			}
			var free []int
			for g, u := range w.GPUMilliUsed {
				if (tk.Resources.GPUMilli > 0 && u+tk.Resources.GPUMilli <= berth.WholeGPU) || u == 0 {
					free = append(free, g)
				}
			}
			switch {
			case tk.Resources.GPUMilli > 0:
				for _, g := range free {
					least, fits = min(least, growth(w, []int{g})), true
				}
			case len(free) >= tk.Resources.GPUs:
				least, fits = min(least, growth(w, free[:tk.Resources.GPUs])), true
			}
		}
		if !fits {
			if len(plan.Assignments) != 0 {
				rt.Fatalf("placed %v where nothing fits", plan.Assignments)
			}
			return
		}
		if len(plan.Assignments) != 1 {
			rt.Fatalf("not placed, though it fits (least growth %g)", least)
		}
		a := plan.Assignments[0]
		var w *Worker
		for _, x := range ws {
			if x.ID == a.WorkerID {
				w = x
			}
		}
		if got := growth(w, a.GPUs); got > least+1e-6 {
			rt.Fatalf("placed on %s %v growing fragmentation by %g; %g was possible", a.WorkerID, a.GPUs, got, least)
		}
	})
}

// BenchmarkPlacement is one pass placing one 0.5-GPU task on 1,200
// workers (600 with 8 GPUs, 600 with 2) whose GPUs are a third idle, a
// third shared and a third given whole, with 1,000 recent requests of
// eight kinds in the mix: the cost of one placement under each policy.
func BenchmarkPlacement(b *testing.B) {
	for _, policy := range []string{"berth", "bestfit", "fgd"} {
		b.Run(policy, func(b *testing.B) {
			cfg, err := PolicyConfig(policy)
			if err != nil {
				b.Fatal(err)
			}
			ws := make([]*Worker, 1200)
			for i := range ws {
				ws[i] = newWorker(fmt.Sprintf("w%04d", i), gpus(8-6*(i%2), "A100", 80<<30))
				for g := range ws[i].GPUMilliUsed {
					ws[i].GPUMilliUsed[g] = []int{0, 300, berth.WholeGPU}[(i+g)%3]
				}
			}
			kinds := []Demand{{GPUs: 1, Milli: berth.WholeGPU, CPUs: 8}, {GPUs: 1, Milli: 500, CPUs: 4}, {GPUs: 1, Milli: 250},
				{GPUs: 2, Milli: berth.WholeGPU}, {GPUs: 8, Milli: berth.WholeGPU, CPUs: 32}, {CPUs: 4}, {GPUs: 1, Milli: 700}, {GPUs: 4, Milli: berth.WholeGPU}}
			for b.Loop() {
				b.StopTimer()
				q := NewQueue(cfg)
				if q.mix != nil {
					for i := range DefaultMixWindow {
						q.mix.Observe(kinds[i%len(kinds)])
					}
				}
				q.Push(fraction("j", 100, 500))
				s := &Snapshot{Now: t0, Workers: ws}
				b.StartTimer()
				if len(RunPass(q, s).Assignments) != 1 {
					b.Fatal("not placed")
				}
			}
		})
	}
}
