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
// users, plus ready tasks in "default" that fit the workers of s.
func backlogQueue(blocked, ready int, now time.Time) (*Queue, *Snapshot) {
	s := &Snapshot{Now: now}
	for i := range 2 {
		w := newWorker(fmt.Sprint("w", i), gpus(8, "H100", 80<<30))
		w.Queues = []string{"default"}
		s.Workers = append(s.Workers, w)
	}
	q := NewQueue(DefaultConfig())
	for i := range blocked {
		t := &Task{JobID: fmt.Sprintf("b%07d", i), Queue: "parked", User: fmt.Sprint("parker", i%4),
			Submitted: now.Add(-time.Duration(i%3600) * time.Second), Seq: uint64(i)}
		if i%2 == 1 {
			t.Queue, t.Resources = "default", berth.Resources{GPUs: 1, GPUType: "B200"}
		}
		q.Push(t)
	}
	for i := range ready {
		q.Push(&Task{JobID: fmt.Sprintf("r%07d", i), Queue: "default", User: "runner", Submitted: now,
			Seq: uint64(blocked + i)})
	}
	return q, s
}

// BenchmarkPassBacklog is a pass over 2 workers with 1,000 ready tasks and
// 1,000,000 that cannot run (in a queue no worker serves, or asking for a
// GPU type none has), after a first pass has examined them all: the steady
// state of a server with a parked backlog.
func BenchmarkPassBacklog(b *testing.B) {
	q, s := backlogQueue(1_000_000, 1_000, t0)
	RunPass(q, s)
	examined := 0
	for b.Loop() {
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
	return &Task{JobID: sp.id, Queue: sp.queue, User: sp.user, Template: sp.template, Priority: sp.prio,
		Nodes: sp.nodes, Submitted: sp.submitted, MaxRuntime: sp.maxRuntime, Seq: sp.seq,
		Resources: berth.Resources{GPUs: sp.gpus, GPUType: sp.gpuType}}
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
// GPU types none, some workers are off or have a queue turned off, and
// some GPUs run attempts.
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
// queues, GPUs free up, quota rules come and go, tasks arrive, placed ones
// leave), and checks each pass against a pass over a new queue of the same
// tasks, which walks every task: the same assignments, preemptions and
// reservations, and the same pending reasons for every task, though the
// first queue leaves out the lists it knows are blocked.
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
			for i := range got {
				if got[i] != exp[i] {
					rt.Fatalf("step %d: %s (%+v) pending for %+v, want %+v", step, ids[i], *specs[ids[i]], got[i], exp[i])
				}
				// Task.Reason too, where the full walk examined the task.
				if theirs[i].reasonPass == fresh.pass && mine[i].Reason != theirs[i].Reason {
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
