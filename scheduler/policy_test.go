package scheduler

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/berth-dev/berth"
)

func h100s(n int) []*Worker {
	ws := make([]*Worker, n)
	for i := range ws {
		ws[i] = newWorker(fmt.Sprint("w", i), gpus(8, "H100", 80<<30))
	}
	return ws
}

func gang(id string, nodes, ngpu int, submitted time.Time) *Task {
	t := task(id, 100, submitted, ngpu)
	t.Nodes = nodes
	return t
}

// run places a running attempt on w, taking its GPUs.
func run(w *Worker, id string, prio int, started time.Time, gpuIdx ...int) *Running {
	r := &Running{AttemptID: "a-" + id, JobID: id, Queue: "default", Priority: prio, Started: started, GPUs: gpuIdx}
	for _, g := range gpuIdx {
		w.GPUMilliUsed[g] = berth.WholeGPU
	}
	w.Running = append(w.Running, r)
	w.FreeSlots--
	return r
}

func placements(p Plan) map[string][]string {
	out := map[string][]string{}
	for _, a := range p.Assignments {
		out[a.Task.JobID] = append(out[a.Task.JobID], fmt.Sprintf("%d@%s", a.Rank, a.WorkerID))
	}
	return out
}

func TestGangAllOrNothing(t *testing.T) {
	t.Parallel()
	ws := h100s(3)
	run(ws[2], "busy", 100, t0, 0, 1, 2, 3)
	q := NewQueue(Config{})
	three := gang("three", 3, 8, t0)
	two := gang("two", 2, 8, t0.Add(time.Second))
	q.Push(three)
	q.Push(two)
	plan := RunPass(q, &Snapshot{Now: t0.Add(time.Minute), Workers: ws})
	got := placements(plan)
	if len(got["three"]) != 0 {
		t.Fatalf("gang of 3 partly placed with only 2 whole machines free: %v", got["three"])
	}
	if fmt.Sprint(got["two"]) != "[0@w0 1@w1]" {
		t.Fatalf("gang of 2 placed %v, want ranks 0 and 1 on w0 and w1", got["two"])
	}
	if three.Reason.Code != ReasonCapacity || !strings.Contains(three.Reason.Message, "3 workers") {
		t.Fatalf("gang of 3 reason = %+v", three.Reason)
	}
	four := gang("four", 4, 8, t0)
	q2 := NewQueue(Config{})
	q2.Push(four)
	RunPass(q2, &Snapshot{Now: t0, Workers: ws})
	if four.Reason.Code != ReasonUnfit || !strings.Contains(four.Reason.Message, "needs 4 workers") {
		t.Fatalf("gang of 4 on 3 workers: reason %+v, want unfit", four.Reason)
	}
}

func TestQuotaCapsGPUsAndJobs(t *testing.T) {
	t.Parallel()
	ws := h100s(2)
	q := NewQueue(Config{})
	var tasks []*Task
	for i := range 3 {
		tk := task(fmt.Sprint("a", i), 100, t0.Add(time.Duration(i)*time.Second), 4)
		tk.User, tk.Seq = "alice", uint64(i)
		tasks = append(tasks, tk)
		q.Push(tk)
	}
	bob := task("b0", 100, t0.Add(time.Minute), 4)
	bob.User = "bob"
	q.Push(bob)
	rule := berth.QuotaRule{Scope: berth.QuotaUser, Name: "alice", MaxGPUs: 8, MaxJobs: berth.NoLimit}
	s := &Snapshot{Now: t0.Add(time.Hour), Workers: ws, Quotas: []berth.QuotaRule{rule}}
	plan := RunPass(q, s)
	got := placements(plan)
	if len(got["a0"]) != 1 || len(got["a1"]) != 1 || len(got["a2"]) != 0 || len(got["b0"]) != 1 {
		t.Fatalf("placements = %v, want a0, a1 and b0 but not a2 (alice gpus<=8)", got)
	}
	if r := tasks[2].Reason; r.Code != ReasonQuota || !strings.Contains(r.Message, "user:alice") {
		t.Fatalf("a2 reason = %+v, want quota naming user:alice", r)
	}
	want := QuotaExceeded{JobID: "a2", User: "alice", Rule: "user:alice", Resource: "gpus", Requested: 4, InUse: 8, Limit: 8}
	if len(plan.QuotaExceeded) != 1 || plan.QuotaExceeded[0] != want {
		t.Fatalf("QuotaExceeded = %+v, want [%+v]", plan.QuotaExceeded, want)
	}
	// The next pass, with alice's two jobs running, still holds a2 back
	// but reports nothing new.
	q.Remove(tasks[0])
	q.Remove(tasks[1])
	q.Remove(bob)
	run(ws[0], "a0", 100, t0, 0, 1, 2, 3).User = "alice"
	run(ws[0], "a1", 100, t0, 4, 5, 6, 7).User = "alice"
	plan = RunPass(q, s)
	if len(plan.Assignments) != 0 || len(plan.QuotaExceeded) != 0 || tasks[2].Reason.Code != ReasonQuota {
		t.Fatalf("second pass: %+v, reason %+v; want nothing placed, nothing newly reported", plan, tasks[2].Reason)
	}
	// A job-count rule.
	q3 := NewQueue(Config{})
	for i := range 3 {
		tk := task(fmt.Sprint("c", i), 100, t0.Add(time.Duration(i)*time.Second), 0)
		tk.Queue = "cpu"
		q3.Push(tk)
	}
	jobs := berth.QuotaRule{Scope: berth.QuotaQueue, Name: "cpu", MaxGPUs: berth.NoLimit, MaxJobs: 2}
	if n := len(RunPass(q3, &Snapshot{Now: t0, Workers: h100s(1), Quotas: []berth.QuotaRule{jobs}}).Assignments); n != 2 {
		t.Fatalf("queue:cpu jobs<=2 placed %d jobs", n)
	}
}

func TestFairShareLetsALateUserIn(t *testing.T) {
	t.Parallel()
	build := func(fair float64) (*Queue, *Task) {
		q := NewQueue(Config{AgingRate: 60, FairShare: fair})
		for i := range 100 {
			tk := task(fmt.Sprint("a", i), 100, t0.Add(time.Duration(i)*time.Second), 1)
			tk.User, tk.Seq = "alice", uint64(i)
			q.Push(tk)
		}
		bob := task("bob", 100, t0.Add(10*time.Minute), 1)
		bob.User, bob.Seq = "bob", 1000
		q.Push(bob)
		return q, bob
	}
	ws := make([]*Worker, 4)
	for i := range ws {
		ws[i] = newWorker(fmt.Sprint("w", i), gpus(1, "H100", 80<<30))
	}
	now := t0.Add(20 * time.Minute)
	q, _ := build(100)
	if got := placements(RunPass(q, &Snapshot{Now: now, Workers: ws})); len(got["bob"]) != 1 {
		t.Fatalf("with fair share bob got nothing: %v", got)
	}
	q, _ = build(0)
	if got := placements(RunPass(q, &Snapshot{Now: now, Workers: ws})); len(got["bob"]) != 0 {
		t.Fatalf("without fair share bob should wait behind alice's older jobs: %v", got)
	}
	// A weight of 4 lets alice hold more before bob passes her.
	q, _ = build(100)
	heavy := berth.QuotaRule{Scope: berth.QuotaUser, Name: "alice", MaxGPUs: berth.NoLimit, MaxJobs: berth.NoLimit, Weight: 100}
	if got := placements(RunPass(q, &Snapshot{Now: now, Workers: ws, Quotas: []berth.QuotaRule{heavy}})); len(got["bob"]) != 0 {
		t.Fatalf("alice with weight 100 should keep the cluster: %v", got)
	}
}

func preemptConfig() Config {
	return Config{Preempt: true, PreemptMinRuntime: 5 * time.Minute, PreemptLimit: 10, PreemptWindow: time.Minute}
}

func TestPreemption(t *testing.T) {
	t.Parallel()
	now := t0.Add(time.Hour)
	setup := func() (*Worker, []*Running) {
		w := newWorker("w0", gpus(8, "H100", 80<<30))
		var rs []*Running
		for i := range 4 {
			r := run(w, fmt.Sprint("low", i), 10+i, t0, 2*i, 2*i+1)
			r.Preemptible = true
			rs = append(rs, r)
		}
		return w, rs
	}
	urgent := func(ngpu int) *Queue {
		q := NewQueue(preemptConfig())
		q.Push(task("urgent", 500, now, ngpu))
		return q
	}

	w, _ := setup()
	q := urgent(4)
	plan := RunPass(q, &Snapshot{Now: now, Workers: []*Worker{w}})
	var victims []string
	for _, p := range plan.Preemptions {
		victims = append(victims, p.JobID)
		if p.For != "urgent" || p.WorkerID != "w0" {
			t.Fatalf("preemption %+v", p)
		}
	}
	if fmt.Sprint(victims) != "[low0 low1]" {
		t.Fatalf("victims = %v, want the two lowest-priority attempts", victims)
	}
	if len(plan.Reservations) != 1 || len(plan.Assignments) != 0 {
		t.Fatalf("plan = %+v, want w0 reserved for urgent and nothing placed yet", plan)
	}

	// While the victims stop, the next pass preempts nothing more.
	w, rs := setup()
	rs[0].Stopping, rs[1].Stopping = true, true
	q = urgent(4)
	plan = RunPass(q, &Snapshot{Now: now, Workers: []*Worker{w}})
	if len(plan.Preemptions) != 0 || len(plan.Reservations) != 1 {
		t.Fatalf("with victims stopping: %+v", plan)
	}

	for name, mod := range map[string]func(*Worker, []*Running, *Snapshot){
		"not preemptible": func(_ *Worker, rs []*Running, _ *Snapshot) {
			for _, r := range rs {
				r.Preemptible = false
			}
		},
		"too young": func(_ *Worker, rs []*Running, _ *Snapshot) {
			for _, r := range rs {
				r.Started = now.Add(-time.Minute)
			}
		},
		"budget spent": func(_ *Worker, _ []*Running, s *Snapshot) { s.RecentPreemptions = 10 },
		"same priority": func(_ *Worker, rs []*Running, _ *Snapshot) {
			rs[0].Priority, rs[1].Priority, rs[2].Priority, rs[3].Priority = 500, 500, 500, 500
		},
		"gang member": func(_ *Worker, rs []*Running, _ *Snapshot) {
			for _, r := range rs {
				r.Gang = true
			}
		},
	} {
		w, rs := setup()
		s := &Snapshot{Now: now, Workers: []*Worker{w}}
		mod(w, rs, s)
		if plan := RunPass(urgent(4), s); len(plan.Preemptions) != 0 {
			t.Errorf("%s: preempted %+v", name, plan.Preemptions)
		}
	}

	// Gang-aware: two members need two machines; only one has victims.
	w, _ = setup()
	busy := newWorker("w1", gpus(8, "H100", 80<<30))
	run(busy, "keep", 10, t0, 0, 1, 2, 3, 4, 5, 6, 7)
	q = NewQueue(preemptConfig())
	g := gang("g", 2, 8, now)
	g.Priority = 500
	q.Push(g)
	if plan := RunPass(q, &Snapshot{Now: now, Workers: []*Worker{w, busy}}); len(plan.Preemptions) != 0 {
		t.Fatalf("preempted for a gang that still could not start: %+v", plan.Preemptions)
	}
}

func TestReservationAndBackfill(t *testing.T) {
	t.Parallel()
	now := t0.Add(time.Hour)
	ws := h100s(2)
	for i, w := range ws {
		r := run(w, fmt.Sprint("long", i), 100, now.Add(-30*time.Minute), 0, 1, 2, 3)
		r.MaxRuntime = time.Hour
	}
	q := NewQueue(Config{ReserveAfter: 10 * time.Minute})
	big := gang("big", 2, 8, now.Add(-20*time.Minute))
	big.Seq = 0
	q.Push(big)
	short := task("short", 100, now.Add(-time.Minute), 4)
	short.MaxRuntime, short.Seq = 10*time.Minute, 1
	q.Push(short)
	unbounded := task("unbounded", 100, now.Add(-time.Minute), 4)
	unbounded.Seq = 2
	q.Push(unbounded)
	long := task("long", 100, now.Add(-time.Minute), 4)
	long.MaxRuntime, long.Seq = 2*time.Hour, 3
	q.Push(long)

	plan := RunPass(q, &Snapshot{Now: now, Workers: ws})
	if len(plan.Reservations) != 1 {
		t.Fatalf("reservations = %+v, want one for big", plan.Reservations)
	}
	r := plan.Reservations[0]
	if r.JobID != "big" || fmt.Sprint(r.Workers) != "[w0 w1]" || !r.Start.Equal(now.Add(30*time.Minute)) {
		t.Fatalf("reservation = %+v, want big on w0 and w1 from %v", r, now.Add(30*time.Minute))
	}
	if big.Reason.Code != ReasonReservation {
		t.Fatalf("big reason = %+v", big.Reason)
	}
	got := placements(plan)
	if len(got["short"]) != 1 || len(got["unbounded"]) != 0 || len(got["long"]) != 0 {
		t.Fatalf("placements = %v, want only short to backfill", got)
	}
	for _, tk := range []*Task{unbounded, long} {
		if tk.Reason.Code != ReasonReserved || !strings.Contains(tk.Reason.Message, "big") {
			t.Fatalf("%s reason = %+v, want reserved for big", tk.JobID, tk.Reason)
		}
	}
}

func TestHeadOfLineBlocksTheQueue(t *testing.T) {
	t.Parallel()
	q := NewQueue(Config{HeadOfLine: true})
	q.Push(task("big", 100, t0, 16))
	small := task("small", 100, t0.Add(time.Second), 1)
	small.Seq = 1
	q.Push(small)
	plan := RunPass(q, &Snapshot{Now: t0, Workers: h100s(1)})
	if len(plan.Assignments) != 0 || small.Reason.Code != ReasonOrder {
		t.Fatalf("plan %+v, small reason %+v; want small held behind big", plan, small.Reason)
	}
}

func TestModelAffinity(t *testing.T) {
	t.Parallel()
	ws := h100s(3)
	ws[2].Models = []string{"llama-70b"}
	q := NewQueue(Config{})
	tk := task("j", 100, t0, 1)
	tk.Model = "llama-70b"
	q.Push(tk)
	if got := placements(RunPass(q, &Snapshot{Now: t0, Workers: ws})); fmt.Sprint(got["j"]) != "[0@w2]" {
		t.Fatalf("placed %v, want on w2 where the model is warm", got["j"])
	}
}

// randomCluster draws workers with some GPUs in use by running attempts
// of random users.
func randomCluster(rt *rapid.T, now time.Time) []*Worker {
	nw := rapid.IntRange(1, 6).Draw(rt, "workers")
	ws := make([]*Worker, nw)
	for i := range ws {
		ws[i] = newWorker(fmt.Sprint("w", i), gpus(rapid.SampledFrom([]int{0, 2, 4, 8}).Draw(rt, "gpus"), rapid.SampledFrom([]string{"H100", "A100"}).Draw(rt, "model"), 80<<30))
		for g := 0; g < len(ws[i].GPUs); g += 2 {
			if rapid.IntRange(0, 3).Draw(rt, "busy") == 0 {
				r := run(ws[i], fmt.Sprint("r", i, g), rapid.IntRange(0, 500).Draw(rt, "rprio"), now.Add(-time.Hour), g, g+1)
				r.User = rapid.SampledFrom([]string{"alice", "bob", "carol"}).Draw(rt, "ruser")
				r.Preemptible = rapid.Bool().Draw(rt, "preemptible")
				r.MaxRuntime = time.Duration(rapid.IntRange(0, 3).Draw(rt, "rmax")) * time.Hour
			}
		}
		ws[i].FreeSlots = rapid.IntRange(0, 6).Draw(rt, "slots")
	}
	return ws
}

func randomTasks(rt *rapid.T, q *Queue, now time.Time) {
	n := rapid.IntRange(0, 30).Draw(rt, "tasks")
	for i := range n {
		tk := task(fmt.Sprint("j", i), rapid.IntRange(0, 1000).Draw(rt, "prio"),
			now.Add(-time.Duration(rapid.IntRange(0, 7200).Draw(rt, "age"))*time.Second), rapid.IntRange(0, 8).Draw(rt, "ngpu"))
		tk.Nodes = rapid.SampledFrom([]int{1, 1, 1, 2, 3}).Draw(rt, "nodes")
		tk.User = rapid.SampledFrom([]string{"alice", "bob", "carol"}).Draw(rt, "user")
		tk.MaxRuntime = time.Duration(rapid.IntRange(0, 120).Draw(rt, "max")) * time.Minute
		tk.Seq = uint64(i)
		q.Push(tk)
	}
}

// TestPlanInvariants checks on random clusters, workloads and quotas with
// every policy on: no worker overcommitted, gangs all or nothing on
// distinct workers, quotas never exceeded, preemptions only of allowed
// victims within the budget, and the same plan for the same input.
func TestPlanInvariants(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(rt *rapid.T) {
		now := t0.Add(3 * time.Hour)
		ws := randomCluster(rt, now)
		cfg := DefaultConfig()
		cfg.ReserveAfter = 30 * time.Minute
		quota := berth.QuotaRule{Scope: berth.QuotaUser, Name: "alice", MaxGPUs: rapid.IntRange(0, 16).Draw(rt, "quota"), MaxJobs: berth.NoLimit}
		s := &Snapshot{Now: now, Workers: ws, Quotas: []berth.QuotaRule{quota}}
		q := NewQueue(cfg)
		randomTasks(rt, q, now)
		plan := RunPass(q, s)
		checkNoOvercommit(rt, ws, plan)
		byID := map[string]*Worker{}
		for _, w := range ws {
			byID[w.ID] = w
		}
		members := map[*Task][]Assignment{}
		for _, a := range plan.Assignments {
			members[a.Task] = append(members[a.Task], a)
		}
		aliceGPUs := 0
		for _, w := range ws {
			for _, r := range w.Running {
				if r.User == "alice" {
					aliceGPUs += len(r.GPUs)
				}
			}
		}
		startGPUs := aliceGPUs
		for tk, as := range members {
			if len(as) != tk.nodes() {
				rt.Fatalf("gang %s: %d of %d members placed", tk.JobID, len(as), tk.nodes())
			}
			seen := map[string]bool{}
			for i, a := range as {
				if a.Rank != i || seen[a.WorkerID] {
					rt.Fatalf("gang %s members %+v: ranks out of order or a worker twice", tk.JobID, as)
				}
				seen[a.WorkerID] = true
			}
			if tk.User == "alice" {
				aliceGPUs += tk.Resources.GPUs * tk.nodes()
			}
		}
		if aliceGPUs > max(quota.MaxGPUs, startGPUs) {
			rt.Fatalf("alice holds %d GPUs after the plan, quota %d (had %d)", aliceGPUs, quota.MaxGPUs, startGPUs)
		}
		if len(plan.Preemptions) > cfg.PreemptLimit {
			rt.Fatalf("%d preemptions, limit %d", len(plan.Preemptions), cfg.PreemptLimit)
		}
		for _, p := range plan.Preemptions {
			var victim *Running
			for _, r := range byID[p.WorkerID].Running {
				if r.AttemptID == p.AttemptID {
					victim = r
				}
			}
			if victim == nil || !victim.Preemptible || victim.Gang {
				rt.Fatalf("preempted %+v, not a preemptible single-node attempt", p)
			}
		}
		again := NewQueue(cfg)
		var tasks []*Task
		q.Ordered(now, func(t *Task) bool { tasks = append(tasks, t); return true })
		for _, a := range plan.Assignments {
			if !slices.Contains(tasks, a.Task) {
				tasks = append(tasks, a.Task)
			}
		}
		for _, tk := range tasks {
			c := *tk
			c.queued = false
			again.Push(&c)
		}
		if a, b := describe(plan), describe(RunPass(again, s)); a != b {
			rt.Fatalf("plans differ for the same input:\n%s\n%s", a, b)
		}
	})
}

func describe(p Plan) string {
	var parts []string
	for _, a := range p.Assignments {
		parts = append(parts, fmt.Sprint(a.Task.JobID, "/", a.Rank, "@", a.WorkerID, a.GPUs))
	}
	sort.Strings(parts)
	return fmt.Sprint(parts, p.Preemptions, p.Reservations)
}

// TestEveryFittingJobRuns replays passes on a random cluster in which every
// task fits some worker, finishing what was placed after each pass: every
// task is placed within a bounded number of passes, whatever its priority
// (aging and the starvation boost), and nothing is placed twice.
func TestEveryFittingJobRuns(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(rt *rapid.T) {
		now := t0
		ws := make([]*Worker, rapid.IntRange(1, 4).Draw(rt, "workers"))
		for i := range ws {
			ws[i] = newWorker(fmt.Sprint("w", i), gpus(8, "H100", 80<<30))
		}
		cfg := DefaultConfig()
		q := NewQueue(cfg)
		n := rapid.IntRange(1, 60).Draw(rt, "tasks")
		for i := range n {
			tk := task(fmt.Sprint("j", i), rapid.IntRange(0, 1000).Draw(rt, "prio"), now, rapid.IntRange(1, 8).Draw(rt, "ngpu"))
			tk.Nodes = rapid.IntRange(1, len(ws)).Draw(rt, "nodes")
			tk.User = rapid.SampledFrom([]string{"alice", "bob"}).Draw(rt, "user")
			tk.Seq = uint64(i)
			q.Push(tk)
		}
		placed := map[string]bool{}
		for pass := 0; q.Len() > 0; pass++ {
			if pass > 2*n+2 {
				rt.Fatalf("%d tasks still pending after %d passes", q.Len(), pass)
			}
			now = now.Add(time.Minute)
			plan := RunPass(q, &Snapshot{Now: now, Workers: ws})
			for _, a := range plan.Assignments {
				if a.Rank == 0 {
					if placed[a.Task.JobID] {
						rt.Fatalf("%s placed twice", a.Task.JobID)
					}
					placed[a.Task.JobID] = true
					q.Remove(a.Task)
				}
			}
		}
	})
}

// TestServiceReplicasSpreadAcrossHosts places replicas of one service: each
// goes to a host without one while there is such a host (best fit would
// stack them on one machine), then where they fit; a running replica
// counts.
func TestServiceReplicasSpreadAcrossHosts(t *testing.T) {
	t.Parallel()
	workers := []*Worker{newWorker("a", gpus(4, "H100", 80<<30)), newWorker("b", gpus(4, "H100", 80<<30))}
	q := NewQueue(DefaultConfig())
	for i := range 3 {
		tk := task(fmt.Sprint("r", i), 100, t0.Add(time.Duration(i)), 1)
		tk.Seq, tk.Spread = uint64(i+1), "alice/chat"
		q.Push(tk)
	}
	other := task("batch", 100, t0.Add(time.Second), 1)
	other.Seq = 9
	q.Push(other)
	plan := RunPass(q, &Snapshot{Now: t0, Workers: workers})
	hosts := map[string]string{}
	for _, a := range plan.Assignments {
		hosts[a.Task.JobID] = a.WorkerID
	}
	if len(hosts) != 4 || hosts["r0"] == hosts["r1"] || hosts["r2"] == "" {
		t.Fatalf("placements = %v, want r0 and r1 on different hosts and r2 placed anyway", hosts)
	}

	// A replica already running on a: the next goes to b.
	running := newWorker("a", gpus(4, "H100", 80<<30))
	running.Running = []*Running{{AttemptID: "x", JobID: "r-old", Spread: "alice/chat", GPUs: []int{0}, Started: t0}}
	running.GPUMilliUsed[0] = berth.WholeGPU
	q = NewQueue(DefaultConfig())
	tk := task("r-new", 100, t0, 1)
	tk.Spread = "alice/chat"
	q.Push(tk)
	plan = RunPass(q, &Snapshot{Now: t0, Workers: []*Worker{running, newWorker("b", gpus(4, "H100", 80<<30))}})
	if len(plan.Assignments) != 1 || plan.Assignments[0].WorkerID != "b" {
		t.Fatalf("with a replica running on a: %v, want the new one on b", summary(plan))
	}
}
