package scheduler

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/berth-dev/berth"
)

// backlogQueue returns a queue of blocked tasks that no pass can place:
// parked in queue "parked", which no worker serves, and, in queue
// "default", asking for a GPU type no worker has, half and half, from 4
// users (with mixed, the latter from the ready tasks' user), plus ready
// tasks in "default" that fit the workers of s.
func backlogQueue(blocked, ready int, mixed bool, now time.Time) (*Queue, *Snapshot) {
	s := &Snapshot{Now: now}
	for i := range 2 {
		w := newWorker(fmt.Sprint("w", i), gpus(8, "H100", 80<<30))
		w.Queues = []string{"default"}
		s.Workers = append(s.Workers, w)
	}
	q := NewQueue(DefaultConfig())
	for i := range blocked {
		t := &Task{JobID: fmt.Sprintf("b%07d", i), Seq: uint64(i), TaskSpec: &TaskSpec{Queue: "parked", User: fmt.Sprint("parker", i%4), Submitted: now.Add(-time.Duration(i%3600) * time.Second)}}
		if i%2 == 1 {
			t.Queue, t.Resources = "default", berth.Resources{GPUs: 1, GPUType: "B200"}
			if mixed {
				t.User = "runner"
			}
		}
		q.Push(t)
	}
	for i := range ready {
		q.Push(&Task{JobID: fmt.Sprintf("r%07d", i), Seq: uint64(blocked + i), TaskSpec: &TaskSpec{Queue: "default", User: "runner", Submitted: now}})
	}
	return q, s
}

// BenchmarkPassBacklog is a pass over 2 workers with 1,000 ready tasks and
// 1,000,000 that cannot run (in a queue no worker serves, or asking for a
// GPU type none has), after a first pass has examined them all: the steady
// state of a server with a parked backlog. With mixed=true the tasks
// asking for the missing GPU type are the ready tasks' user's, in one
// ordered list with them.
func BenchmarkPassBacklog(b *testing.B) {
	for _, mixed := range []bool{false, true} {
		for _, push := range []bool{false, true} {
			b.Run(fmt.Sprint("mixed=", mixed, ",push=", push), func(b *testing.B) { benchBacklog(b, mixed, push) })
		}
	}
}

// benchBacklog runs passes over backlogQueue; with push, one more ready
// task arrives before each (a server's pass after one submit).
func benchBacklog(b *testing.B, mixed, push bool) {
	q, s := backlogQueue(1_000_000, 1_000, mixed, t0)
	RunPass(q, s)
	examined := 0
	for i := 0; b.Loop(); i++ {
		if push {
			q.Push(&Task{JobID: fmt.Sprint("p", i), Seq: uint64(2_000_000 + i), TaskSpec: &TaskSpec{Queue: "default", User: "runner", Submitted: t0}})
		}
		examined += RunPass(q, s).Examined
	}
	b.ReportMetric(float64(examined)/float64(b.N), "examined/pass")
}

// taskSpec is a task drawn once, pushed as a new Task into each queue that
// holds it.
type taskSpec struct {
	id, queue, user, gpuType, template string
	prio, gpus, nodes                  int
	submitted                          time.Time
	maxRuntime                         time.Duration
	seq                                uint64
}

func (sp *taskSpec) task() *Task {
	return &Task{JobID: sp.id, Priority: sp.prio, Seq: sp.seq, TaskSpec: &TaskSpec{Queue: sp.queue, User: sp.user, Template: sp.template, Nodes: sp.nodes, Submitted: sp.submitted, MaxRuntime: sp.maxRuntime, Resources: berth.Resources{GPUs: sp.gpus, GPUType: sp.gpuType}}}
}

func drawSpecs(rt *rapid.T, now time.Time, first, n int) []*taskSpec {
	out := make([]*taskSpec, n)
	for i := range out {
		out[i] = &taskSpec{id: fmt.Sprint("j", first+i), seq: uint64(first + i),
			queue:      rapid.SampledFrom([]string{"default", "gpu", "parked"}).Draw(rt, "queue"),
			user:       rapid.SampledFrom([]string{"alice", "bob"}).Draw(rt, "user"),
			gpuType:    rapid.SampledFrom([]string{"", "", "H100", "B200"}).Draw(rt, "type"),
			template:   rapid.SampledFrom([]string{"", "", "train"}).Draw(rt, "template"),
			prio:       rapid.IntRange(0, 3).Draw(rt, "prio") * 100,
			gpus:       rapid.IntRange(0, 8).Draw(rt, "gpus"),
			nodes:      rapid.SampledFrom([]int{1, 1, 1, 2}).Draw(rt, "nodes"),
			submitted:  now.Add(-time.Duration(rapid.IntRange(0, 120).Draw(rt, "age")) * time.Minute),
			maxRuntime: time.Duration(rapid.IntRange(0, 3).Draw(rt, "max")) * 30 * time.Minute}
	}
	return out
}

// drawWorkers draws a cluster in which some queues have no worker, some
// GPU types none, some workers are off or have a queue turned off, some
// GPUs run attempts, and few tasks fit at once.
func drawWorkers(rt *rapid.T, now time.Time) []*Worker {
	ws := make([]*Worker, rapid.IntRange(0, 4).Draw(rt, "workers"))
	for i := range ws {
		w := newWorker(fmt.Sprint("w", i), gpus(rapid.SampledFrom([]int{0, 4, 8}).Draw(rt, "ngpus"),
			rapid.SampledFrom([]string{"H100", "A100"}).Draw(rt, "model"), 80<<30))
		w.Queues = rapid.SampledFrom([][]string{nil, {"default"}, {"gpu"}, {"default", "gpu"}}).Draw(rt, "queues")
		w.Off = rapid.IntRange(0, 4).Draw(rt, "off") == 0
		if len(w.Queues) > 0 && rapid.IntRange(0, 4).Draw(rt, "offQueue") == 0 {
			w.OffQueues = w.Queues[:1]
		}
		for g := 0; g < len(w.GPUs); g += 4 {
			if rapid.Bool().Draw(rt, "busy") {
				r := run(w, fmt.Sprint("r", i, g), rapid.IntRange(0, 300).Draw(rt, "rprio"), now.Add(-time.Hour), g, g+1, g+2, g+3)
				r.User = rapid.SampledFrom([]string{"alice", "bob"}).Draw(rt, "ruser")
				r.Preemptible = rapid.Bool().Draw(rt, "preemptible")
				r.MaxRuntime = time.Duration(rapid.IntRange(0, 2).Draw(rt, "rmax")) * time.Hour
			}
		}
		// Few slots: passes often stop before the end of the queue.
		w.FreeSlots = rapid.IntRange(0, 3).Draw(rt, "slots")
		ws[i] = w
	}
	return ws
}

func drawQuotas(rt *rapid.T) []berth.QuotaRule {
	var out []berth.QuotaRule
	for _, r := range []berth.QuotaRule{{Scope: berth.QuotaUser, Name: "alice"}, {Scope: berth.QuotaQueue, Name: "parked"},
		{Scope: berth.QuotaTemplate, Name: "train"}} {
		if rapid.IntRange(0, 2).Draw(rt, "rule") == 0 {
			r.MaxGPUs, r.MaxJobs = rapid.IntRange(0, 8).Draw(rt, "maxGPUs"), berth.NoLimit
			out = append(out, r)
		}
	}
	return out
}

// TestBacklogPassMatchesAFullWalk runs passes over one queue while the
// cluster changes between them (workers join, leave, turn off or change
// queues, GPUs free up, quota rules come and go, tasks arrive or are
// requeued, placed ones leave), and checks each pass against a pass over
// a new queue of the same tasks, which walks every task but those with a
// static reason (which ExplainAll checks, from the workers alone): the same
// assignments, preemptions and reservations, and the same pending reasons
// for every task (for quota, the same code), though the first queue
// leaves out the lists it knows are blocked.
func TestBacklogPassMatchesAFullWalk(t *testing.T) {
	t.Parallel()
	skipped := 0
	rapid.Check(t, func(rt *rapid.T) {
		now := t0.Add(3 * time.Hour)
		cfg := DefaultConfig()
		cfg.ReserveAfter = 30 * time.Minute
		q := NewQueue(cfg)
		specs := map[string]*taskSpec{}
		tasks := map[string]*Task{}
		push := func(n int) {
			for _, sp := range drawSpecs(rt, now, len(specs), n) {
				specs[sp.id], tasks[sp.id] = sp, sp.task()
				q.Push(tasks[sp.id])
			}
		}
		push(rapid.IntRange(0, 40).Draw(rt, "tasks"))
		var ws []*Worker
		var quotas []berth.QuotaRule
		for step := range rapid.IntRange(1, 8).Draw(rt, "steps") {
			if step == 0 || rapid.Bool().Draw(rt, "newWorkers") {
				ws = drawWorkers(rt, now)
			}
			if rapid.IntRange(0, 3).Draw(rt, "newQuotas") == 0 {
				quotas = drawQuotas(rt)
			}
			if rapid.IntRange(0, 3).Draw(rt, "arrivals") == 0 {
				push(rapid.IntRange(1, 5).Draw(rt, "arrived"))
			}
			if len(tasks) > 0 && rapid.IntRange(0, 3).Draw(rt, "requeues") == 0 {
				// A requeue: the same task out and in again.
				id := fmt.Sprint("j", rapid.IntRange(0, len(specs)-1).Draw(rt, "requeued"))
				if tk := tasks[id]; tk != nil {
					q.Remove(tk)
					q.Push(tk)
				}
			}
			now = now.Add(time.Duration(rapid.IntRange(0, 30).Draw(rt, "elapsed")) * time.Minute)
			s := &Snapshot{Now: now, Workers: ws, Quotas: quotas}
			plan := RunPass(q, s)
			skipped += plan.Skipped

			fresh := NewQueue(cfg)
			ids := make([]string, 0, len(tasks))
			for id := range tasks {
				ids = append(ids, id)
			}
			slices.SortFunc(ids, func(a, b string) int { return int(specs[a].seq) - int(specs[b].seq) })
			mine, theirs := make([]*Task, len(ids)), make([]*Task, len(ids))
			for i, id := range ids {
				mine[i], theirs[i] = tasks[id], specs[id].task()
				fresh.Push(theirs[i])
			}
			want := RunPass(fresh, s)
			if a, b := describe(plan), describe(want); a != b {
				rt.Fatalf("step %d: plan\n%s\nwant (a full walk)\n%s", step, a, b)
			}
			got, exp := q.Reasons(mine, s), fresh.Reasons(theirs, s)
			// Both queues give a static reason without a walk (the
			// shape's); ExplainAll finds it from the workers alone.
			static := ExplainAll(fresh, theirs, s)
			// A quota reason's message counts the use when the pass
			// looked: at its start for a list left out, when it got to
			// the task in a walk. The code must agree.
			same := func(a, b Reason) bool { return a == b || a.Code == ReasonQuota && b.Code == ReasonQuota }
			for i := range got {
				// A pass that stops before a task (the workers are
				// full) leaves it to ExplainAll, which does not weigh
				// quotas; a shape left out as over quota says quota.
				overQuota := got[i].Code == ReasonQuota && theirs[i].reasonPass != fresh.pass
				if !same(got[i], exp[i]) && !overQuota {
					rt.Fatalf("step %d: %s (%+v) pending for %+v, want %+v", step, ids[i], *specs[ids[i]], got[i], exp[i])
				}
				if (got[i].Code == ReasonUnfit || got[i].Code == ReasonOff) && got[i] != static[i] {
					rt.Fatalf("step %d: %s (%+v) pending for %+v, want %+v", step, ids[i], *specs[ids[i]], got[i], static[i])
				}
				if r := mine[i].Reason; mine[i].reasonPass == q.pass && (r.Code == ReasonUnfit || r.Code == ReasonOff) && r != static[i] {
					rt.Fatalf("step %d: %s has Reason %+v, want %+v", step, ids[i], r, static[i])
				}
				// Task.Reason too, where the full walk examined the task.
				if theirs[i].reasonPass == fresh.pass && !same(mine[i].Reason, theirs[i].Reason) {
					rt.Fatalf("step %d: %s has Reason %+v, want %+v", step, ids[i], mine[i].Reason, theirs[i].Reason)
				}
			}
			for _, a := range plan.Assignments {
				q.Remove(a.Task)
				delete(tasks, a.Task.JobID)
			}
		}
	})
	if skipped == 0 {
		t.Fatal("no pass left a list out: the test does not exercise skipping")
	}
}

// TestFirstPassLeavesOutAnUnexaminedBacklog: a queue that holds a backlog
// no pass has examined (a server's start) and that cannot run for a
// reason needing no quota (a queue no worker serves, a GPU type none has,
// in a list of its own or beside tasks that can run) is left out by the
// first pass, which examines only what may run; each task of the backlog
// is still pending for the reason a walk gives it, and a worker that
// serves its queue joining makes the next pass place from it.
func TestFirstPassLeavesOutAnUnexaminedBacklog(t *testing.T) {
	for _, mixed := range []bool{false, true} {
		t.Run(fmt.Sprint("mixed=", mixed), func(t *testing.T) {
			const blocked, ready = 2_000, 4
			q, s := backlogQueue(blocked, ready, mixed, t0)
			plan := RunPass(q, s)
			if len(plan.Assignments) != ready || plan.Examined != ready || plan.Skipped != blocked {
				t.Fatalf("first pass: %d placed, %d examined, %d left out; want %d, %d, %d",
					len(plan.Assignments), plan.Examined, plan.Skipped, ready, ready, blocked)
			}
			var backlog []*Task
			for _, l := range q.lists {
				for _, tk := range append(slices.Clip(l.sorted), l.fresh...) {
					if !tk.removed && (tk.Queue == "parked" || tk.Resources.GPUType == "B200") {
						backlog = append(backlog, tk)
					}
				}
			}
			if len(backlog) != blocked {
				t.Fatalf("%d tasks of the backlog queued, want %d", len(backlog), blocked)
			}
			got, want := q.Reasons(backlog, s), ExplainAll(q, backlog, s)
			for i, tk := range backlog {
				if got[i] != want[i] || got[i].Code != ReasonUnfit {
					t.Fatalf("%s (queue %s) pending for %+v, want %+v", tk.JobID, tk.Queue, got[i], want[i])
				}
			}

			w := newWorker("w-parked", gpus(8, "H100", 80<<30))
			w.Queues = []string{"parked"}
			s.Workers = append(s.Workers, w)
			for _, a := range plan.Assignments {
				q.Remove(a.Task)
			}
			plan = RunPass(q, s)
			if len(plan.Assignments) == 0 || plan.Assignments[0].Task.Queue != "parked" {
				t.Fatalf("after a worker of queue parked joined: placed %s, want tasks of queue parked", describe(plan))
			}
		})
	}
}

// agingRun replays a stream in queue "default" on 2 workers of 8 GPUs that
// are off for the first 30 minutes: every minute two 1-GPU jobs of
// priority 100 arrive and each runs 10 minutes once placed (more than the
// workers can take, so a backlog builds), behind job "low" of priority 0,
// submitted first by the same user. blocked tasks that can never run (queue "parked", which
// no worker serves, and a GPU type no worker has in "default") are queued
// besides, older and of priority 1000. It returns when "low" started (zero
// if not within 6 hours) and the most tasks a pass examined after the
// first pass with the workers on (which walks every task once).
func agingRun(t *testing.T, cfg Config, blocked int) (time.Time, int) {
	t.Helper()
	q := NewQueue(cfg)
	for i := range blocked {
		tk := &Task{JobID: fmt.Sprint("b", i), Priority: 1000, Seq: uint64(i), TaskSpec: &TaskSpec{Queue: "parked", User: "hoarder", Submitted: t0.Add(-2 * time.Hour)}}
		if i%2 == 1 {
			tk.Queue, tk.Resources = "default", berth.Resources{GPUs: 1, GPUType: "B200"}
		}
		q.Push(tk)
	}
	seq := uint64(blocked)
	low := &Task{JobID: "low", Seq: seq, TaskSpec: &TaskSpec{Queue: "default", User: "stream", Submitted: t0, Resources: berth.Resources{GPUs: 1}}}
	q.Push(low)
	ws := h100s(2)
	for _, w := range ws {
		w.Queues = []string{"default"}
	}
	maxExamined := 0
	for now := t0; now.Before(t0.Add(6 * time.Hour)); now = now.Add(time.Minute) {
		for range 2 {
			seq++
			q.Push(&Task{JobID: fmt.Sprint("s", seq), Priority: 100, Seq: seq, TaskSpec: &TaskSpec{Queue: "default", User: "stream", Submitted: now, Resources: berth.Resources{GPUs: 1}}})
		}
		for _, w := range ws {
			w.Off = now.Before(t0.Add(30 * time.Minute))
			running := w.Running[:0]
			for _, r := range w.Running {
				if now.Before(r.Started.Add(r.MaxRuntime)) {
					running = append(running, r)
				} else {
					w.GPUMilliUsed[r.GPUs[0]] = 0
					w.FreeSlots++
				}
			}
			w.Running = running
		}
		plan := RunPass(q, &Snapshot{Now: now, Workers: ws})
		if now.After(t0.Add(30 * time.Minute)) {
			maxExamined = max(maxExamined, plan.Examined)
		}
		for _, a := range plan.Assignments {
			for _, w := range ws {
				if w.ID == a.WorkerID {
					r := run(w, a.Task.JobID, a.Task.Priority, now, a.GPUs...)
					r.User, r.MaxRuntime = a.Task.User, 10*time.Minute
				}
			}
			q.Remove(a.Task)
			if a.Task == low {
				return now, maxExamined
			}
		}
	}
	return time.Time{}, maxExamined
}

// TestBacklogStillStartsWithinTheAgingBound checks that a low-priority job
// behind a stream of higher-priority ones starts within the aging bound
// once capacity appears, when a large backlog that cannot run is queued
// besides (and left out of the passes): at the same time as with no
// backlog, and at most one job's run time (10 minutes, when a GPU frees)
// after the starvation boost puts it ahead of every unboosted job, while
// with no aging it starves. Its user is the stream's, so that fair share
// does not let it in earlier.
func TestBacklogStillStartsWithinTheAgingBound(t *testing.T) {
	t.Parallel()
	alone, _ := agingRun(t, DefaultConfig(), 0)
	started, examined := agingRun(t, DefaultConfig(), 20_000)
	t.Logf("low started %s after submission; passes examined at most %d tasks", started.Sub(t0), examined)
	bound := t0.Add(DefaultConfig().StarvationAfter + 10*time.Minute)
	if started.IsZero() || started.After(bound) {
		t.Fatalf("low started at %v, want by %v", started, bound)
	}
	if !started.Equal(alone) {
		t.Fatalf("low started at %v behind the backlog, %v without it", started, alone)
	}
	if examined >= 20_000 {
		t.Fatalf("a pass examined %d tasks: the blocked backlog was walked", examined)
	}
	if greedy, _ := agingRun(t, Config{}, 20_000); !greedy.IsZero() {
		t.Fatalf("without aging low started at %v; want it starved (the bound comes from aging)", greedy)
	}
}

// TestBlockedTasksAreReexamined leaves tasks out of passes while what
// blocks them holds, and checks that they are examined again, and placed,
// once it changes: a worker joins, turns on or turns their queue on, GPUs
// free up, a quota rule changes, a reservation ends. Meanwhile their
// pending reasons stay those a walk gives.
func TestBlockedTasksAreReexamined(t *testing.T) {
	t.Parallel()
	type setup struct {
		tasks  []*Task
		ws     []*Worker
		quotas []berth.QuotaRule
	}
	tasks := func(n int, queue, gpuType string, ngpu int) []*Task {
		out := make([]*Task, n)
		for i := range out {
			out[i] = &Task{JobID: fmt.Sprint(queue, i), Seq: uint64(i), TaskSpec: &TaskSpec{Queue: queue, User: "alice", Submitted: t0, Resources: berth.Resources{GPUs: ngpu, GPUType: gpuType}}}
		}
		return out
	}
	serving := func(id string, queues ...string) *Worker {
		w := newWorker(id, gpus(8, "H100", 80<<30))
		w.Queues = queues
		return w
	}
	cases := []struct {
		name    string
		before  func() setup
		skipped bool // the passes before the change leave the tasks out
		reason  string
		change  func(*setup)
	}{
		{"a worker joins", func() setup {
			return setup{tasks: tasks(50, "parked", "", 0), ws: []*Worker{serving("w0", "default")}}
		}, true, `no worker serves queue "parked"`, func(s *setup) {
			s.ws = append(s.ws, serving("w1", "parked"))
		}},
		{"a worker turns on", func() setup {
			w := serving("w1")
			w.GPUs[0].Model, w.Off = "B200", true
			return setup{tasks: tasks(50, "default", "B200", 1), ws: []*Worker{serving("w0"), w}}
		}, true, "the workers that fit are off or disconnected (0 of 1 on)", func(s *setup) {
			s.ws[1].Off = false
		}},
		{"a queue turns on", func() setup {
			w := serving("w1", "parked")
			w.OffQueues = []string{"parked"}
			return setup{tasks: tasks(50, "parked", "", 0), ws: []*Worker{serving("w0", "default"), w}}
		}, true, "the workers that fit are off or disconnected (0 of 1 on)", func(s *setup) {
			s.ws[1].OffQueues = nil
		}},
		{"GPUs free up", func() setup {
			w := serving("w0")
			run(w, "busy", 0, t0, 0, 1, 2, 3)
			return setup{tasks: tasks(5, "default", "", 8), ws: []*Worker{w}}
		}, false, "waiting for free resources", func(s *setup) {
			s.ws = []*Worker{serving("w0")}
		}},
		{"a quota rule is raised", func() setup {
			return setup{tasks: tasks(5, "default", "", 1), ws: []*Worker{serving("w0")},
				quotas: []berth.QuotaRule{{Scope: berth.QuotaUser, Name: "alice", MaxGPUs: 0, MaxJobs: berth.NoLimit}}}
		}, true, "over quota user:alice: gpus<=0, 0 in use, 1 requested", func(s *setup) {
			s.quotas[0].MaxGPUs = 8
		}},
		{"quota frees up", func() setup {
			w := serving("w0")
			run(w, "alices", 0, t0, 0).User = "alice"
			return setup{tasks: tasks(5, "default", "", 1), ws: []*Worker{w},
				quotas: []berth.QuotaRule{{Scope: berth.QuotaUser, Name: "alice", MaxGPUs: 1, MaxJobs: berth.NoLimit}}}
		}, true, "over quota user:alice: gpus<=1, 1 in use, 1 requested", func(s *setup) {
			s.ws = []*Worker{serving("w0")} // alice's running job ended
		}},
		{"a quota rule applies", func() setup {
			return setup{tasks: tasks(5, "parked", "", 1), ws: []*Worker{serving("w0", "default")}}
		}, true, `no worker serves queue "parked"`, func(s *setup) {
			// Now over quota: the tasks are walked and say so (before
			// the worker that serves them joins, below).
			s.quotas = []berth.QuotaRule{{Scope: berth.QuotaQueue, Name: "parked", MaxGPUs: 0, MaxJobs: berth.NoLimit}}
		}},
		{"a reservation ends", func() setup {
			w := serving("w0")
			run(w, "busy", 0, t0, 0, 1, 2, 3).MaxRuntime = time.Hour
			big := &Task{JobID: "big", TaskSpec: &TaskSpec{Queue: "default", User: "bob", Submitted: t0.Add(-time.Hour), Resources: berth.Resources{GPUs: 8}}}
			return setup{tasks: append(tasks(3, "default", "", 4), big), ws: []*Worker{w}}
		}, false, "the resources it fits are reserved for job big", func(s *setup) {
			s.tasks = s.tasks[:len(s.tasks)-1] // big is cancelled
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := tc.before()
			q := NewQueue(DefaultConfig())
			for _, tk := range st.tasks {
				q.Push(tk)
			}
			waiting := st.tasks[0] // the first of the blocked tasks in order
			for pass := range 3 {
				s := &Snapshot{Now: t0, Workers: st.ws, Quotas: st.quotas}
				plan := RunPass(q, s)
				if len(plan.Assignments) > 0 && plan.Assignments[0].Task == waiting {
					t.Fatalf("pass %d placed %s before the change", pass, waiting.JobID)
				}
				if left := plan.Skipped > 0; pass > 0 && left != tc.skipped {
					t.Fatalf("pass %d: %d tasks skipped, %d examined; want skipped %v", pass, plan.Skipped, plan.Examined, tc.skipped)
				}
				if r := q.Reasons([]*Task{waiting}, s)[0]; r.Message != tc.reason || waiting.Reason != r {
					t.Fatalf("pass %d: %s pending for %+v (Reason %+v), want %q", pass, waiting.JobID, r, waiting.Reason, tc.reason)
				}
			}
			tc.change(&st)
			q = requeue(q, st.tasks)
			if tc.name == "a quota rule applies" {
				s := &Snapshot{Now: t0, Workers: st.ws, Quotas: st.quotas}
				if plan := RunPass(q, s); plan.Skipped != 0 || waiting.Reason.Code != ReasonQuota {
					t.Fatalf("with a rule on its queue: %d skipped, %s pending for %+v; want it walked, over quota", plan.Skipped, waiting.JobID, waiting.Reason)
				}
				st.quotas, st.ws = nil, append(st.ws, serving("w1", "parked"))
			}
			plan := RunPass(q, &Snapshot{Now: t0, Workers: st.ws, Quotas: st.quotas})
			if len(placements(plan)[waiting.JobID]) == 0 {
				t.Fatalf("after the change: %s not placed (%+v); plan %s", waiting.JobID, waiting.Reason, describe(plan))
			}
		})
	}
}

// requeue drops from q the tasks not in keep (a cancelled job) and returns q.
func requeue(q *Queue, keep []*Task) *Queue {
	q.Ordered(t0, func(tk *Task) bool {
		if !slices.Contains(keep, tk) {
			q.Remove(tk)
		}
		return true
	})
	return q
}

// TestTaskPushedIntoABlockedListIsExplained pushes tasks into lists that
// passes leave out: they get their shape's reason without a walk, and a
// task newly held back by quota is reported in Plan.QuotaExceeded, as a
// walk would do.
func TestTaskPushedIntoABlockedListIsExplained(t *testing.T) {
	t.Parallel()
	w := newWorker("w0", gpus(8, "H100", 80<<30))
	w.Queues = []string{"default"}
	s := &Snapshot{Now: t0, Workers: []*Worker{w},
		Quotas: []berth.QuotaRule{{Scope: berth.QuotaUser, Name: "bob", MaxGPUs: 0, MaxJobs: berth.NoLimit}}}
	q := NewQueue(DefaultConfig())
	newTask := func(id, queue, user string) *Task {
		tk := &Task{JobID: id, TaskSpec: &TaskSpec{Queue: queue, User: user, Submitted: t0, Resources: berth.Resources{GPUs: 1}}}
		q.Push(tk)
		return tk
	}
	newTask("p0", "parked", "alice")
	newTask("b0", "default", "bob")
	RunPass(q, s)
	if plan := RunPass(q, s); plan.Skipped != 2 || plan.Examined != 0 {
		t.Fatalf("second pass: %d skipped, %d examined; want both left out", plan.Skipped, plan.Examined)
	}
	parked, over := newTask("p1", "parked", "alice"), newTask("b1", "default", "bob")
	plan := RunPass(q, s)
	if plan.Skipped != 4 || plan.Examined != 0 {
		t.Fatalf("after the pushes: %d skipped, %d examined; want all 4 left out", plan.Skipped, plan.Examined)
	}
	if parked.Reason.Message != `no worker serves queue "parked"` || over.Reason.Code != ReasonQuota {
		t.Fatalf("reasons %+v and %+v, want the parked queue's and quota", parked.Reason, over.Reason)
	}
	if len(plan.QuotaExceeded) != 1 || plan.QuotaExceeded[0].JobID != "b1" || plan.QuotaExceeded[0].Rule != "user:bob" {
		t.Fatalf("QuotaExceeded = %+v, want b1's only", plan.QuotaExceeded)
	}
	if plan := RunPass(q, s); len(plan.QuotaExceeded) != 0 {
		t.Fatalf("next pass: QuotaExceeded = %+v, want none (b1 was reported)", plan.QuotaExceeded)
	}
}
