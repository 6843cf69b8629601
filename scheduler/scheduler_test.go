package scheduler

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/berth-dev/berth"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func gpus(n int, model string, mem berth.Bytes) []berth.GPU {
	out := make([]berth.GPU, n)
	for i := range out {
		out[i] = berth.GPU{Index: i, Model: model, Memory: mem}
	}
	return out
}

func newWorker(id string, gs []berth.GPU) *Worker {
	return &Worker{ID: id, Host: id, GPUs: gs, GPUMilliUsed: make([]int, len(gs)),
		CPUs: 64, Memory: 512 << 30, FreeCPUs: 64, FreeMemory: 512 << 30, FreeSlots: 100}
}

func task(id string, prio int, submitted time.Time, ngpu int) *Task {
	return &Task{JobID: id, Priority: prio, TaskSpec: &TaskSpec{Queue: "default", Submitted: submitted, Resources: berth.Resources{GPUs: ngpu}}}
}

func order(q *Queue, now time.Time) []string {
	var ids []string
	q.Ordered(now, func(t *Task) bool { ids = append(ids, t.JobID); return true })
	return ids
}

func TestOrderPriorityThenFIFO(t *testing.T) {
	t.Parallel()
	q := NewQueue(Config{AgingRate: 0})
	for i, p := range []int{100, 500, 100, 500} {
		tk := task(fmt.Sprint("j", i), p, t0.Add(time.Duration(i)*time.Second), 0)
		tk.Seq = uint64(i)
		q.Push(tk)
	}
	got := fmt.Sprint(order(q, t0.Add(time.Minute)))
	if want := "[j1 j3 j0 j2]"; got != want {
		t.Fatalf("order = %s, want %s", got, want)
	}
}

func TestAgingLetsOldLowPriorityPass(t *testing.T) {
	t.Parallel()
	// 60 points an hour: a job 2 hours older gains 120 points.
	q := NewQueue(Config{AgingRate: 60})
	old := task("old", 100, t0, 0)
	young := task("young", 200, t0.Add(2*time.Hour), 0)
	q.Push(young)
	q.Push(old)
	now := t0.Add(2 * time.Hour)
	if got := order(q, now); got[0] != "old" {
		t.Fatalf("order = %v, want old first (effective %v vs %v)", got, q.EffectivePriority(old, now), q.EffectivePriority(young, now))
	}
	q2 := NewQueue(Config{AgingRate: 60})
	young2 := task("young", 200, t0.Add(time.Hour), 0)
	q2.Push(task("old", 100, t0, 0))
	q2.Push(young2)
	if got := order(q2, t0.Add(time.Hour)); got[0] != "young" {
		t.Fatalf("with only 60 points of aging, order = %v, want young first", got)
	}
}

func TestStarvationBoost(t *testing.T) {
	t.Parallel()
	q := NewQueue(Config{AgingRate: 0, StarvationAfter: 10 * time.Minute, StarvationBoost: 1000})
	q.Push(task("starving", 0, t0, 0))
	q.Push(task("urgent", 1000, t0.Add(9*time.Minute), 0))
	if got := order(q, t0.Add(9*time.Minute)); got[0] != "urgent" {
		t.Fatalf("before the threshold order = %v, want urgent first", got)
	}
	now := t0.Add(11 * time.Minute)
	if got := order(q, now); got[0] != "starving" {
		t.Fatalf("past the threshold order = %v, want starving first", got)
	}
}

func TestRemoveAndRepush(t *testing.T) {
	t.Parallel()
	q := NewQueue(DefaultConfig())
	a, b := task("a", 100, t0, 0), task("b", 100, t0.Add(time.Second), 0)
	q.Push(a)
	q.Push(b)
	q.Remove(a)
	if got := fmt.Sprint(order(q, t0)); got != "[b]" || q.Len() != 1 {
		t.Fatalf("after remove: %s len %d", got, q.Len())
	}
	q.Push(a)
	if got := fmt.Sprint(order(q, t0)); got != "[a b]" || q.Len() != 2 {
		t.Fatalf("after re-push: %s len %d", got, q.Len())
	}
}

func TestFeasibility(t *testing.T) {
	t.Parallel()
	w := newWorker("w1", gpus(4, "NVIDIA H100 80GB HBM3", 80<<30))
	w.Labels = map[string]string{"zone": "a"}
	tests := []struct {
		name string
		mod  func(*Task)
		fits bool
	}{
		{"fits", func(*Task) {}, true},
		{"too many gpus", func(t *Task) { t.Resources.GPUs = 5 }, false},
		{"gpu type matches case-insensitively", func(t *Task) { t.Resources.GPUType = "h100" }, true},
		{"wrong gpu type", func(t *Task) { t.Resources.GPUType = "A100" }, false},
		{"gpu memory ok", func(t *Task) { t.Resources.GPUMemory = 80 << 30 }, true},
		{"gpu memory too big", func(t *Task) { t.Resources.GPUMemory = 81 << 30 }, false},
		{"cpus", func(t *Task) { t.Resources.CPUs = 65 }, false},
		{"memory", func(t *Task) { t.Resources.Memory = 513 << 30 }, false},
		{"host", func(t *Task) { t.Constraints.Host = "w2" }, false},
		{"label ok", func(t *Task) { t.Constraints.Labels = map[string]string{"zone": "a"} }, true},
		{"label wrong", func(t *Task) { t.Constraints.Labels = map[string]string{"zone": "b"} }, false},
		{"queue not served", func(t *Task) { t.Queue = "cpu"; w.Queues = []string{"gpu"} }, false},
	}
	for _, tt := range tests {
		w.Queues = nil
		tk := task("j", 100, t0, 2)
		tt.mod(tk)
		q := NewQueue(DefaultConfig())
		q.Push(tk)
		plan := RunPass(q, &Snapshot{Now: t0, Workers: []*Worker{w}})
		if got := len(plan.Assignments) == 1; got != tt.fits {
			t.Errorf("%s: placed = %v, want %v", tt.name, got, tt.fits)
		}
		if !tt.fits {
			if reason := ExplainAll(q, []*Task{tk}, &Snapshot{Now: t0, Workers: []*Worker{w}})[0]; reason.Code != ReasonUnfit {
				t.Errorf("%s: Explain = %q, want the failing requirement", tt.name, reason)
			}
		}
	}
}

func TestBestFitKeepsWholeMachinesFree(t *testing.T) {
	t.Parallel()
	full := newWorker("empty8", gpus(8, "H100", 80<<30))
	partial := newWorker("half", gpus(8, "H100", 80<<30))
	for i := 0; i < 6; i++ {
		partial.GPUMilliUsed[i] = berth.WholeGPU
	}
	q := NewQueue(DefaultConfig())
	q.Push(task("small", 100, t0, 2))
	q.Push(task("big", 100, t0.Add(time.Second), 8))
	plan := RunPass(q, &Snapshot{Now: t0.Add(time.Minute), Workers: []*Worker{full, partial}})
	got := map[string]string{}
	for _, a := range plan.Assignments {
		got[a.Task.JobID] = fmt.Sprint(a.WorkerID, a.GPUs)
	}
	if got["small"] != "half[6 7]" || got["big"] != "empty8[0 1 2 3 4 5 6 7]" {
		t.Fatalf("placements = %v, want small on half's free GPUs and big on the empty machine", got)
	}
}

// TestRetriesGoElsewhere places tasks whose earlier attempts failed on
// some workers: on another worker where one fits, even one best fit would
// not choose; back on an avoided one when nothing else fits now.
func TestRetriesGoElsewhere(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		avoid []string
		busy  []string // workers with no free slot
		host  string
		want  string
	}{
		{"best fit", nil, nil, "", "tight"},
		{"failed on the best fit", []string{"tight"}, nil, "", "roomy"},
		{"failed on both", []string{"tight", "roomy"}, nil, "", "tight"},
		{"the other is full", []string{"tight"}, []string{"roomy"}, "", "tight"},
		{"pinned to its host", []string{"tight"}, nil, "tight", "tight"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tight, roomy := newWorker("tight", gpus(2, "A100", 40<<30)), newWorker("roomy", gpus(8, "A100", 40<<30))
			for _, w := range []*Worker{tight, roomy} {
				if slices.Contains(tc.busy, w.ID) {
					w.FreeSlots = 0
				}
			}
			q := NewQueue(DefaultConfig())
			tk := task("retry", 100, t0, 1)
			tk.Avoid, tk.Constraints.Host = tc.avoid, tc.host
			q.Push(tk)
			plan := RunPass(q, &Snapshot{Now: t0, Workers: []*Worker{tight, roomy}})
			if len(plan.Assignments) != 1 || plan.Assignments[0].WorkerID != tc.want {
				t.Fatalf("assignments %+v; want one on %s", plan.Assignments, tc.want)
			}
		})
	}
}

func TestOffWorkersGetNothing(t *testing.T) {
	t.Parallel()
	w := newWorker("w", nil)
	w.Off = true
	q := NewQueue(DefaultConfig())
	tk := task("j", 100, t0, 0)
	q.Push(tk)
	if plan := RunPass(q, &Snapshot{Now: t0, Workers: []*Worker{w}}); len(plan.Assignments) != 0 {
		t.Fatalf("placed on an off worker: %+v", plan.Assignments)
	}
	if r := ExplainAll(q, []*Task{tk}, &Snapshot{Now: t0, Workers: []*Worker{w}})[0]; r.Code != ReasonOff {
		t.Fatalf("Explain = %q", r)
	}
}

// TestUnfitReasonsNameWhatTheTaskAsks checks that the reason a task can
// never run names only requirements it asked for, and that a gang's count
// of workers counts only those that can take work, both in a pass and when
// explained on request.
func TestUnfitReasonsNameWhatTheTaskAsks(t *testing.T) {
	t.Parallel()
	cluster := func(n, ngpu, off int) []*Worker {
		ws := make([]*Worker, n)
		for i := range ws {
			ws[i] = newWorker(fmt.Sprint("w", i), gpus(ngpu, "H100", 80<<30))
			ws[i].Off = i < off
		}
		return ws
	}
	oneServesGPU := cluster(2, 1, 0)
	oneServesGPU[1].Queues = []string{"gpu"}
	splitQueues := cluster(2, 1, 0) // one worker serves default alone, the other gpu
	splitQueues[0].Queues, splitQueues[1].Queues = []string{"default"}, []string{"gpu"}
	oneLabeled := cluster(3, 1, 0)
	oneLabeled[2].Labels = map[string]string{"zone": "a"}
	tests := []struct {
		name    string
		workers []*Worker
		mod     func(*Task)
		want    string
	}{
		{"host no worker has", cluster(2, 1, 0), func(t *Task) { t.Constraints.Host = "nohost" },
			`no worker has host "nohost"`},
		{"gang on a host of one worker", cluster(2, 1, 0), func(t *Task) { t.Nodes, t.Constraints.Host = 2, "w1" },
			`needs 2 workers with host "w1"; 1 exist`},
		{"host not serving the queue", oneServesGPU, func(t *Task) { t.Queue, t.Constraints.Host = "cpu", "w1" },
			`no worker with host "w1" serves queue "cpu"`},
		{"gang on too few workers of its queue", oneServesGPU, func(t *Task) { t.Nodes, t.Queue = 2, "cpu" },
			`needs 2 workers serving queue "cpu"; 1 exist`},
		{"gang larger than the cluster", cluster(5, 1, 1), func(t *Task) { t.Nodes, t.Resources.GPUs = 9, 1 },
			"needs 9 workers with 1 GPU; 4 exist"},
		{"gang asking nothing", cluster(5, 0, 1), func(t *Task) { t.Nodes = 9 },
			"needs 9 workers; 4 exist"},
		{"gang with labels", oneLabeled, func(t *Task) { t.Nodes, t.Constraints.Labels = 2, map[string]string{"zone": "a"} },
			"needs 2 workers with the labels zone=a; 1 exist"},
		{"gang of big workers", append(cluster(3, 8, 0), newWorker("small", gpus(4, "H100", 80<<30))),
			func(t *Task) { t.Nodes, t.Resources.GPUs = 4, 8 }, "needs 4 workers with 8 GPUs; 3 exist"},
		{"gpu type", cluster(2, 2, 0), func(t *Task) { t.Resources.GPUs, t.Resources.GPUType = 2, "A100" },
			"no worker has 2 GPUs of type A100"},
		{"gpu type among the workers of its queue", splitQueues, func(t *Task) { t.Queue, t.Resources.GPUs, t.Resources.GPUType = "gpu", 1, "A100" },
			`no worker serving queue "gpu" has 1 GPU of type A100`},
		{"gang among the workers of its queue", append(splitQueues, newWorker("w2", gpus(1, "H100", 80<<30))),
			func(t *Task) { t.Queue, t.Nodes, t.Resources.GPUs = "gpu", 2, 2 }, `needs 2 workers serving queue "gpu" with 2 GPUs; 0 exist`},
		{"gang that fits off workers too", cluster(2, 1, 1), func(t *Task) { t.Nodes, t.Resources.GPUs = 2, 1 },
			"the workers that fit are off or disconnected (1 of 2 on)"},
	}
	for _, tt := range tests {
		tk := task("j", 100, t0, 0)
		tt.mod(tk)
		q := NewQueue(DefaultConfig())
		q.Push(tk)
		s := &Snapshot{Now: t0, Workers: tt.workers}
		if plan := RunPass(q, s); len(plan.Assignments) != 0 || tk.Reason.Message != tt.want {
			t.Errorf("%s: pass placed %d, reason %q; want none placed and %q", tt.name, len(plan.Assignments), tk.Reason.Message, tt.want)
		}
		if r := ExplainAll(q, []*Task{tk}, s)[0]; r.Message != tt.want {
			t.Errorf("%s: explained %q, want %q", tt.name, r.Message, tt.want)
		}
	}
}

// TestReasonsExplainEachTaskAsAlone asks in one call why several queued
// tasks wait, none examined by a pass: each answer is what asking for that
// task alone gives, in the order asked.
func TestReasonsExplainEachTaskAsAlone(t *testing.T) {
	t.Parallel()
	w := newWorker("w", gpus(2, "H100", 80<<30))
	w.GPUMilliUsed[0], w.GPUMilliUsed[1] = berth.WholeGPU, berth.WholeGPU
	q := NewQueue(DefaultConfig())
	a, b, c, d := task("a", 100, t0, 2), task("b", 100, t0.Add(time.Second), 1),
		task("c", 100, t0.Add(2*time.Second), 3), task("d", 100, t0.Add(3*time.Second), 1)
	for _, tk := range []*Task{a, b, c, d} {
		q.Push(tk)
	}
	s := &Snapshot{Now: t0.Add(time.Minute), Workers: []*Worker{w}}
	got := q.Reasons([]*Task{d, b, c, a}, s)
	want := []string{
		"waiting for free resources (3 jobs ahead in order)",
		"waiting for free resources (1 job ahead in order)",
		"no worker has 3 GPUs",
		"waiting for free resources",
	}
	for i, tk := range []*Task{d, b, c, a} {
		if got[i].Message != want[i] {
			t.Errorf("reason of %s = %q, want %q", tk.JobID, got[i].Message, want[i])
		}
		if alone := q.Reasons([]*Task{tk}, s)[0]; alone != got[i] {
			t.Errorf("reason of %s alone = %q, among others %q", tk.JobID, alone, got[i])
		}
	}
	none := newWorker("cpu-only", nil)
	if r := q.Reasons([]*Task{b}, &Snapshot{Now: t0, Workers: []*Worker{none}})[0]; r.Message != "no worker has 1 GPU" {
		t.Errorf("one GPU on a worker with none: %q", r.Message)
	}
}

// TestNeverOvercommit checks on random clusters and workloads that a plan
// never gives a GPU twice or exceeds CPUs, memory or slots, and that it is
// the same plan for the same input.
func TestNeverOvercommit(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(rt *rapid.T) {
		nw := rapid.IntRange(1, 8).Draw(rt, "workers")
		var workers []*Worker
		for i := 0; i < nw; i++ {
			w := newWorker(fmt.Sprint("w", i), gpus(rapid.IntRange(0, 8).Draw(rt, "gpus"), rapid.SampledFrom([]string{"H100", "A100"}).Draw(rt, "model"), berth.Bytes(rapid.SampledFrom([]int64{40, 80}).Draw(rt, "mem"))<<30))
			for g := range w.GPUMilliUsed {
				if rapid.Bool().Draw(rt, "used") {
					w.GPUMilliUsed[g] = berth.WholeGPU
				}
			}
			w.FreeCPUs = float64(rapid.IntRange(0, 16).Draw(rt, "cpus"))
			w.FreeMemory = berth.Bytes(rapid.IntRange(0, 64).Draw(rt, "memgb")) << 30
			w.FreeSlots = rapid.IntRange(0, 6).Draw(rt, "slots")
			workers = append(workers, w)
		}
		build := func() *Queue {
			q := NewQueue(DefaultConfig())
			nt := rapid.IntRange(0, 40).Draw(rt, "tasks")
			for i := 0; i < nt; i++ {
				tk := task(fmt.Sprint("j", i), rapid.IntRange(0, 1000).Draw(rt, "prio"), t0.Add(time.Duration(rapid.IntRange(0, 7200).Draw(rt, "age"))*time.Second), rapid.IntRange(0, 4).Draw(rt, "ngpu"))
				tk.Resources.CPUs = float64(rapid.IntRange(0, 4).Draw(rt, "tcpu"))
				tk.Resources.Memory = berth.Bytes(rapid.IntRange(0, 16).Draw(rt, "tmem")) << 30
				tk.Seq = uint64(i)
				q.Push(tk)
			}
			return q
		}
		q := build()
		now := t0.Add(3 * time.Hour)
		plan := RunPass(q, &Snapshot{Now: now, Workers: workers})
		checkNoOvercommit(rt, workers, plan)
		again := RunPass(q, &Snapshot{Now: now, Workers: workers})
		if fmt.Sprint(summary(again)) != fmt.Sprint(summary(plan)) {
			rt.Fatalf("plans differ for the same input:\n%v\n%v", summary(plan), summary(again))
		}
	})
}

// checkNoOvercommit fails if plan gives a GPU twice or takes more CPUs,
// memory or slots than a worker has free, or places a member twice.
func checkNoOvercommit(rt *rapid.T, workers []*Worker, plan Plan) {
	byID := map[string]*Worker{}
	for _, w := range workers {
		byID[w.ID] = w
	}
	usedCPU, usedMem, usedSlots := map[string]float64{}, map[string]berth.Bytes{}, map[string]int{}
	gpuTaken := map[string]bool{}
	placed := map[string]bool{}
	for _, a := range plan.Assignments {
		member := fmt.Sprint(a.Task.JobID, "/", a.Rank)
		if placed[member] {
			rt.Fatalf("%s placed twice", member)
		}
		placed[member] = true
		w := byID[a.WorkerID]
		if len(a.GPUs) != a.Task.Resources.GPUs {
			rt.Fatalf("task %s wants %d GPUs, got %v", a.Task.JobID, a.Task.Resources.GPUs, a.GPUs)
		}
		for _, g := range a.GPUs {
			key := fmt.Sprint(w.ID, "/", g)
			if w.GPUMilliUsed[g] != 0 || gpuTaken[key] {
				rt.Fatalf("GPU %s given twice", key)
			}
			gpuTaken[key] = true
		}
		usedCPU[w.ID] += a.Task.Resources.CPUs
		usedMem[w.ID] += a.Task.Resources.Memory
		usedSlots[w.ID]++
	}
	for _, w := range workers {
		if usedCPU[w.ID] > w.FreeCPUs || usedMem[w.ID] > w.FreeMemory || usedSlots[w.ID] > w.FreeSlots {
			rt.Fatalf("worker %s overcommitted: cpu %v/%v mem %v/%v slots %d/%d", w.ID,
				usedCPU[w.ID], w.FreeCPUs, usedMem[w.ID], w.FreeMemory, usedSlots[w.ID], w.FreeSlots)
		}
	}
}

func summary(p Plan) []string {
	var out []string
	for _, a := range p.Assignments {
		out = append(out, fmt.Sprint(a.Task.JobID, "@", a.WorkerID, a.GPUs))
	}
	return out
}

// BenchmarkPass is one full pass over the synthetic workload: 10,000
// workers × 100,000 pending tasks with gangs, quotas and fair share on.
func BenchmarkPass(b *testing.B) {
	placed := 0
	var pass time.Duration
	for b.Loop() {
		b.StopTimer()
		q, s := Synthetic(10_000, 100_000, t0)
		b.StartTimer()
		start := time.Now()
		placed += len(RunPass(q, s).Assignments)
		pass += time.Since(start)
	}
	b.ReportMetric(float64(placed)/pass.Seconds(), "placements/s")
}

// TestQueueYieldsEachQueuedTaskOnce pushes, removes and re-pushes (as a
// requeue does) random tasks, with passes in between, and checks that the
// queue yields exactly the queued tasks, each once, in effective order.
func TestQueueYieldsEachQueuedTaskOnce(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(rt *rapid.T) {
		q := NewQueue(DefaultConfig())
		n := rapid.IntRange(1, 20).Draw(rt, "tasks")
		tasks := make([]*Task, n)
		for i := range tasks {
			tasks[i] = task(fmt.Sprint("j", i), rapid.IntRange(0, 3).Draw(rt, "prio")*100, t0.Add(time.Duration(rapid.IntRange(0, 7200).Draw(rt, "age"))*time.Second), 0)
			tasks[i].User = rapid.SampledFrom([]string{"a", "b"}).Draw(rt, "user")
			tasks[i].Seq = uint64(i)
		}
		queued := map[*Task]bool{}
		now := t0.Add(3 * time.Hour)
		for range rapid.IntRange(1, 60).Draw(rt, "ops") {
			tk := tasks[rapid.IntRange(0, n-1).Draw(rt, "which")]
			switch rapid.IntRange(0, 2).Draw(rt, "op") {
			case 0:
				q.Push(tk)
				queued[tk] = true
			case 1:
				q.Remove(tk)
				delete(queued, tk)
			case 2:
				RunPass(q, &Snapshot{Now: now, Workers: []*Worker{newWorker("w", nil)}})
			}
		}
		seen := map[*Task]int{}
		var last *Task
		q.Ordered(now, func(tk *Task) bool {
			seen[tk]++
			if last != nil && q.EffectivePriority(tk, now) > q.EffectivePriority(last, now) {
				rt.Fatalf("%s (%.1f) after %s (%.1f)", tk.JobID, q.EffectivePriority(tk, now), last.JobID, q.EffectivePriority(last, now))
			}
			last = tk
			return true
		})
		for tk, c := range seen {
			if c != 1 || !queued[tk] {
				rt.Fatalf("%s yielded %d times, queued %v", tk.JobID, c, queued[tk])
			}
		}
		if len(seen) != len(queued) || q.Len() != len(queued) {
			rt.Fatalf("yielded %d, queued %d, Len %d", len(seen), len(queued), q.Len())
		}
	})
}

// TestFrontGoesFirstInItsPriorityClass pushes a requeued task with Front:
// it goes before every task of its priority, however old, and still after
// a higher priority.
func TestFrontGoesFirstInItsPriorityClass(t *testing.T) {
	t.Parallel()
	for _, rate := range []float64{0, 60} {
		q := NewQueue(Config{AgingRate: rate})
		for i, p := range []int{100, 100, 200} {
			tk := task(fmt.Sprint("j", i), p, t0.Add(time.Duration(i)*time.Second), 0)
			tk.Seq = uint64(i + 1)
			q.Push(tk)
		}
		stopped := task("stopped", 100, t0.Add(time.Hour), 0)
		stopped.Seq, stopped.Front = 9, true
		q.Push(stopped)
		// Submitted an hour after j0 and j1, it still goes first among them.
		if want := "[j2 stopped j0 j1]"; fmt.Sprint(order(q, t0.Add(2*time.Hour))) != want {
			t.Fatalf("aging %g: order = %s, want %s", rate, order(q, t0.Add(2*time.Hour)), want)
		}
	}
}

// TestPushAllocatesNoKnownShape: pushing a task whose shape the queue
// already holds allocates nothing for the shape (a start pushes a million
// tasks of a few shapes); the list's slices grow amortized.
func TestPushAllocatesNoKnownShape(t *testing.T) {
	spec := &TaskSpec{Queue: "parked", User: "u", Submitted: t0}
	tasks := make([]Task, 2_002)
	for i := range tasks {
		tasks[i] = Task{JobID: fmt.Sprint("j", i), Seq: uint64(i), TaskSpec: spec}
	}
	q := NewQueue(DefaultConfig())
	next := 0
	allocs := testing.AllocsPerRun(2_000, func() {
		q.Push(&tasks[next])
		next++
	})
	if allocs >= 0.5 {
		t.Errorf("%.2f allocations a push of a known shape, want none but the list's amortized growth", allocs)
	}
}
