package scheduler

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/berth-dev/berth"
)

func fraction(id string, prio, milli int) *Task {
	return &Task{JobID: id, Priority: prio, TaskSpec: &TaskSpec{Queue: "default", Submitted: t0, Resources: berth.Resources{GPUMilli: milli}}}
}

// place runs one pass of ts over workers and returns where each task went
// ("w0:1" worker and GPUs, "" when it waits) and the plan.
func place(ws []*Worker, cfg Config, ts ...*Task) (map[string]string, Plan) {
	q := NewQueue(cfg)
	for i, t := range ts {
		t.Seq = uint64(i)
		q.Push(t)
	}
	plan := RunPass(q, &Snapshot{Now: t0, Workers: ws})
	out := map[string]string{}
	for _, a := range plan.Assignments {
		out[a.Task.JobID] = fmt.Sprint(a.WorkerID, ":", a.GPUs)
	}
	return out, plan
}

// TestFractionBestFit: a fraction goes to the GPU it fills most, never to
// one given whole; a whole-GPU request takes only untouched GPUs; two
// halves share one GPU, and a third waits saying why.
func TestFractionBestFit(t *testing.T) {
	t.Parallel()
	cfg := Config{}
	w := newWorker("w0", gpus(3, "H100", 80<<30))
	w.GPUMilliUsed = []int{berth.WholeGPU, 250, 600}
	got, _ := place([]*Worker{w}, cfg, fraction("a", 100, 300))
	if got["a"] != "w0:[2]" {
		t.Errorf("0.3 went to %q; want GPU 2 (600 used: filled most)", got["a"])
	}
	got, _ = place([]*Worker{w}, cfg, fraction("a", 100, 500))
	if got["a"] != "w0:[1]" {
		t.Errorf("0.5 went to %q; want GPU 1, the one with room", got["a"])
	}
	got, plan := place([]*Worker{w}, cfg, task("whole", 100, t0, 1))
	if got["whole"] != "" {
		t.Errorf("a whole GPU went to %q; every GPU is shared or taken", got["whole"])
	}
	if len(plan.Assignments) != 0 {
		t.Fatalf("plan %v", summary(plan))
	}

	// Two 0.5 share GPU 0; the whole request takes GPU 1; the third 0.5 waits.
	two := newWorker("w1", gpus(2, "H100", 80<<30))
	q := NewQueue(cfg)
	a, b, c, whole := fraction("a", 300, 500), fraction("b", 200, 500), fraction("c", 100, 500), task("whole", 250, t0, 1)
	for i, tk := range []*Task{a, b, whole, c} {
		tk.Seq = uint64(i)
		q.Push(tk)
	}
	plan = RunPass(q, &Snapshot{Now: t0, Workers: []*Worker{two}})
	if fmt.Sprint(summary(plan)) != "[a@w1[0] whole@w1[1] b@w1[0]]" {
		t.Fatalf("plan %v; want a and b sharing GPU 0, whole on GPU 1", summary(plan))
	}
	for _, as := range plan.Assignments {
		if as.Task.Resources.GPUMilli > 0 && as.GPUMilli != 500 {
			t.Errorf("%s: GPUMilli %d, want 500", as.Task.JobID, as.GPUMilli)
		}
	}
	if c.Reason.Code != ReasonCapacity || !strings.Contains(c.Reason.Message, "no GPU with 500 milli free") {
		t.Errorf("third half's reason = %+v; want capacity, no GPU with 500 milli free", c.Reason)
	}
}

// TestFractionGPUMemory: a fraction's gpu_memory is its share of the GPU's
// memory: 30GiB of a 40GiB GPU is 750 milli, so beside 0.5 it waits, and a
// GPU smaller than asked is never used.
func TestFractionGPUMemory(t *testing.T) {
	t.Parallel()
	w := newWorker("w0", []berth.GPU{{Index: 0, Model: "A100", Memory: 40 << 30}, {Index: 1, Model: "A100", Memory: 20 << 30}})
	w.GPUMilliUsed = []int{500, 0}
	big := fraction("big", 100, 100)
	big.Resources.GPUMemory = 30 << 30
	got, plan := place([]*Worker{w}, Config{}, big)
	if got["big"] != "" {
		t.Fatalf("0.1 with 30GiB placed at %s beside 0.5 on 40GiB (or on a 20GiB GPU)", got["big"])
	}
	if len(plan.Assignments) != 0 {
		t.Fatal(summary(plan))
	}
	w.GPUMilliUsed = []int{250, 0}
	big = fraction("big", 100, 100)
	big.Resources.GPUMemory = 30 << 30
	got, plan = place([]*Worker{w}, Config{}, big)
	if got["big"] != "w0:[0]" || plan.Assignments[0].GPUMilli != 750 {
		t.Fatalf("got %v; want GPU 0 with 750 milli", summary(plan))
	}
}

// TestFractionQuota: a GPU quota counts fractions as fractions.
func TestFractionQuota(t *testing.T) {
	t.Parallel()
	w := newWorker("w0", gpus(2, "H100", 80<<30))
	quota := []berth.QuotaRule{{Scope: berth.QuotaUser, Name: "alice", MaxGPUs: 1, MaxJobs: berth.NoLimit}}
	q := NewQueue(Config{})
	var ts []*Task
	for i := range 3 {
		tk := fraction(fmt.Sprint("f", i), 100, 500)
		tk.User, tk.Seq = "alice", uint64(i)
		ts = append(ts, tk)
		q.Push(tk)
	}
	plan := RunPass(q, &Snapshot{Now: t0, Workers: []*Worker{w}, Quotas: quota})
	if len(plan.Assignments) != 2 {
		t.Fatalf("placed %v; want two halves within a 1-GPU quota", summary(plan))
	}
	if len(plan.QuotaExceeded) != 1 || plan.QuotaExceeded[0].Resource != "gpu_milli" || plan.QuotaExceeded[0].InUse != 1000 ||
		plan.QuotaExceeded[0].Requested != 500 {
		t.Fatalf("quota exceeded %+v; want gpu_milli 1000 in use, 500 requested", plan.QuotaExceeded)
	}
	if msg := ts[2].Reason.Message; msg != "over quota user:alice: gpus<=1, 1 in use, 0.5 requested" {
		t.Errorf("reason %q", msg)
	}
}

// TestFractionUnfit: a fraction needs a worker with a GPU; the reason and
// NeverFits say so.
func TestFractionUnfit(t *testing.T) {
	t.Parallel()
	cpuOnly := newWorker("c0", nil)
	tk := fraction("f", 100, 500)
	_, _ = place([]*Worker{cpuOnly}, Config{}, tk)
	if tk.Reason.Code != ReasonUnfit || tk.Reason.Message != "no worker has a GPU to share" {
		t.Errorf("reason %+v", tk.Reason)
	}
	err := NeverFits(func(yield func(*Worker) bool) { yield(cpuOnly) }, &tk.Resources, 1)
	if err == nil || err.Field != "resources.gpus" || !strings.Contains(err.Message, "0.5 requested") {
		t.Errorf("NeverFits = %v", err)
	}
}

// TestFractionProperties (rapid): over random workers (GPUs untouched,
// given whole or partly shared) and a random mix of whole and fractional
// requests: no GPU goes over 1000 milli; a fraction takes exactly one GPU,
// its share by MilliOn, never one given whole in the snapshot or the
// plan; whole GPUs go only to untouched GPUs; the whole-GPU requests
// placed ahead of every fraction land exactly where they would without
// the fractions; the same input gives the same plan.
func TestFractionProperties(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(rt *rapid.T) {
		var workers []*Worker
		for i := range rapid.IntRange(1, 5).Draw(rt, "workers") {
			var gs []berth.GPU
			for g := range rapid.IntRange(0, 4).Draw(rt, "gpus") {
				gs = append(gs, berth.GPU{Index: g, Model: "H100", Memory: berth.Bytes(rapid.SampledFrom([]int64{40, 80}).Draw(rt, "mem")) << 30})
			}
			w := newWorker(fmt.Sprint("w", i), gs)
			for g := range w.GPUMilliUsed {
				w.GPUMilliUsed[g] = rapid.SampledFrom([]int{0, 0, berth.WholeGPU, 250, 500, 900}).Draw(rt, "used")
			}
			w.FreeSlots = rapid.IntRange(0, 8).Draw(rt, "slots")
			workers = append(workers, w)
		}
		type req struct {
			whole, milli, nodes int
			mem                 berth.Bytes
		}
		nWhole := rapid.IntRange(0, 8).Draw(rt, "whole tasks")
		var reqs []req
		for range nWhole {
			reqs = append(reqs, req{whole: rapid.IntRange(0, 3).Draw(rt, "ngpu"), nodes: rapid.IntRange(1, 2).Draw(rt, "nodes")})
		}
		for range rapid.IntRange(0, 16).Draw(rt, "fractions") {
			r := req{milli: rapid.IntRange(1, 999).Draw(rt, "milli"), nodes: rapid.IntRange(1, 2).Draw(rt, "nodes")}
			if rapid.Bool().Draw(rt, "gpu memory") {
				r.mem = berth.Bytes(rapid.IntRange(1, 80).Draw(rt, "gib")) << 30
			}
			reqs = append(reqs, r)
		}
		maxGPUs := rapid.IntRange(0, 6).Draw(rt, "quota")
		quota := []berth.QuotaRule{{Scope: berth.QuotaUser, Name: "q", MaxGPUs: maxGPUs, MaxJobs: berth.NoLimit}}
		build := func(withFractions bool, user string) *Queue {
			q := NewQueue(DefaultConfig())
			for i, r := range reqs {
				if r.milli > 0 && !withFractions {
					continue
				}
				prio := 900 - i // whole requests first: they come first in reqs
				tk := &Task{JobID: fmt.Sprint("j", i), Priority: prio, Seq: uint64(i), TaskSpec: &TaskSpec{Queue: "default", User: user, Submitted: t0, Nodes: r.nodes, Resources: berth.Resources{GPUs: r.whole, GPUMilli: r.milli, GPUMemory: r.mem}}}
				q.Push(tk)
			}
			return q
		}
		plan := RunPass(build(true, ""), &Snapshot{Now: t0, Workers: workers})
		used := map[*Worker][]int{}
		byID := map[string]*Worker{}
		for _, w := range workers {
			used[w] = append([]int(nil), w.GPUMilliUsed...)
			byID[w.ID] = w
		}
		wholeIn := map[string]bool{} // GPUs given whole in the plan
		for _, a := range plan.Assignments {
			w, r := byID[a.WorkerID], &a.Task.Resources
			if r.GPUMilli == 0 {
				if len(a.GPUs) != r.GPUs || a.GPUMilli != 0 {
					rt.Fatalf("%s asks %d whole GPUs, got %v (%d milli)", a.Task.JobID, r.GPUs, a.GPUs, a.GPUMilli)
				}
				for _, g := range a.GPUs {
					if used[w][g] != 0 {
						rt.Fatalf("%s given GPU %s/%d whole, which holds %d milli", a.Task.JobID, w.ID, g, used[w][g])
					}
					used[w][g] = berth.WholeGPU
					wholeIn[fmt.Sprint(w.ID, g)] = true
				}
				continue
			}
			if len(a.GPUs) != 1 {
				rt.Fatalf("fraction %s split over GPUs %v", a.Task.JobID, a.GPUs)
			}
			g := a.GPUs[0]
			if want := r.MilliOn(w.GPUs[g]); a.GPUMilli != want {
				rt.Fatalf("fraction %s takes %d milli of GPU %d, want %d", a.Task.JobID, a.GPUMilli, g, want)
			}
			if wholeIn[fmt.Sprint(w.ID, g)] || w.GPUMilliUsed[g] == berth.WholeGPU {
				rt.Fatalf("fraction %s put on GPU %s/%d, given whole", a.Task.JobID, w.ID, g)
			}
			used[w][g] += a.GPUMilli
			if used[w][g] > berth.WholeGPU {
				rt.Fatalf("GPU %s/%d over 1000 milli: %d", w.ID, g, used[w][g])
			}
		}
		var wholeWith []string
		for _, s := range summary(plan) {
			var i int
			fmt.Sscanf(s, "j%d", &i)
			if reqs[i].milli == 0 {
				wholeWith = append(wholeWith, s)
			}
		}
		if without := summary(RunPass(build(false, ""), &Snapshot{Now: t0, Workers: workers})); fmt.Sprint(without) != fmt.Sprint(wholeWith) {
			rt.Fatalf("whole-GPU placements change with fractions behind them:\n%v\n%v", without, wholeWith)
		}
		if again := RunPass(build(true, ""), &Snapshot{Now: t0, Workers: workers}); fmt.Sprint(summary(again)) != fmt.Sprint(summary(plan)) {
			rt.Fatalf("plans differ for the same input:\n%v\n%v", summary(plan), summary(again))
		}
		// Under a GPU quota on their user, fractions count as fractions.
		limited := build(true, "q")
		charged := 0
		for _, a := range RunPass(limited, &Snapshot{Now: t0, Workers: workers, Quotas: quota}).Assignments {
			charged += a.Task.Resources.GPUsMilli()
		}
		if charged > maxGPUs*berth.WholeGPU {
			rt.Fatalf("%d milli-GPUs placed under a quota of %d GPUs", charged, maxGPUs)
		}
	})
}

// TestFractionPreemption: a waiting fraction preempts only as many
// preemptible fractions as free its share of one GPU, and a whole-GPU
// request counts a shared GPU free only once every fraction on it goes.
func TestFractionPreemption(t *testing.T) {
	t.Parallel()
	now := t0.Add(time.Hour)
	setup := func() *Worker {
		w := newWorker("w0", gpus(1, "H100", 80<<30))
		for i, prio := range []int{10, 20, 30, 40} { // four quarters
			r := &Running{AttemptID: fmt.Sprint("a", i), JobID: fmt.Sprint("q", i), Queue: "default", Priority: prio,
				Started: t0, GPUs: []int{0}, GPUMilli: 250, Preemptible: true}
			w.GPUMilliUsed[0] += 250
			w.Running = append(w.Running, r)
			w.FreeSlots--
		}
		return w
	}
	victims := func(tk *Task) []string {
		q := NewQueue(preemptConfig())
		q.Push(tk)
		plan := RunPass(q, &Snapshot{Now: now, Workers: []*Worker{setup()}})
		var out []string
		for _, p := range plan.Preemptions {
			out = append(out, p.JobID)
		}
		return out
	}
	half := fraction("half", 500, 500)
	half.Submitted = now
	if got := fmt.Sprint(victims(half)); got != "[q0 q1]" {
		t.Errorf("a half preempts %s; want the two lowest quarters", got)
	}
	if got := fmt.Sprint(victims(task("whole", 500, now, 1))); got != "[q0 q1 q2 q3]" {
		t.Errorf("a whole GPU preempts %s; want every quarter on it", got)
	}
}

// BenchmarkPassFractions is one pass over an empty cluster of 1,000
// workers with 8 GPUs each and 20,000 pending tasks, half of them
// fractions (0.1 to 0.9 of a GPU), half 1 or 2 whole GPUs.
func BenchmarkPassFractions(b *testing.B) {
	placed := 0
	var pass time.Duration
	for b.Loop() {
		b.StopTimer()
		var ws []*Worker
		for i := range 1000 {
			ws = append(ws, newWorker(fmt.Sprintf("w%04d", i), gpus(8, "H100", 80<<30)))
		}
		q := NewQueue(DefaultConfig())
		for i := range 20_000 {
			tk := task(fmt.Sprint("j", i), 100+i%7, t0, 1+i%2)
			if i%2 == 0 {
				tk.Resources.GPUs, tk.Resources.GPUMilli = 0, 100*(1+i%9)
			}
			tk.Seq = uint64(i)
			q.Push(tk)
		}
		b.StartTimer()
		start := time.Now()
		placed += len(RunPass(q, &Snapshot{Now: t0, Workers: ws}).Assignments)
		pass += time.Since(start)
	}
	b.ReportMetric(float64(placed)/pass.Seconds(), "placements/s")
}

// TestFractionReservation: a half that has waited long reserves the
// worker whose fraction ends first, expecting to start when it ends.
func TestFractionReservation(t *testing.T) {
	t.Parallel()
	now := t0.Add(time.Hour)
	var ws []*Worker
	for i, ends := range []time.Duration{3 * time.Hour, time.Hour} {
		w := newWorker(fmt.Sprint("w", i), gpus(1, "H100", 80<<30))
		w.GPUMilliUsed[0] = 750
		w.Running = append(w.Running, &Running{AttemptID: fmt.Sprint("a", i), JobID: fmt.Sprint("r", i), Queue: "default",
			Priority: 100, Started: t0, MaxRuntime: ends, GPUs: []int{0}, GPUMilli: 750})
		ws = append(ws, w)
	}
	q := NewQueue(Config{ReserveAfter: 10 * time.Minute})
	half := fraction("half", 100, 500)
	q.Push(half)
	plan := RunPass(q, &Snapshot{Now: now, Workers: ws})
	if len(plan.Assignments) != 0 || len(plan.Reservations) != 1 || fmt.Sprint(plan.Reservations[0].Workers) != "[w1]" ||
		!plan.Reservations[0].Start.Equal(t0.Add(time.Hour)) {
		t.Fatalf("plan %+v; want w1 reserved from %s", plan, t0.Add(time.Hour))
	}
}
