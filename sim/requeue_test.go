package sim

import (
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/scheduler"
)

// TestSimRequeuedTaskIsPlacedOnce is a regression test for a scheduler.Queue
// bug the simulator found: a task that was removed (placed) and pushed
// again (requeued after preemption or for a retry, as the controller and
// the simulator do) while its user still had other tasks queued was placed
// twice in one pass. Remove left the task in its list's sorted slice,
// marked removed; Push cleared the mark and appended it to fresh, so the
// list held it twice.
func TestSimRequeuedTaskIsPlacedOnce(t *testing.T) {
	t.Parallel()
	now := epoch
	gpus := make([]berth.GPU, 8)
	for i := range gpus {
		gpus[i] = berth.GPU{Index: i, Model: "H100"}
	}
	s := &scheduler.Snapshot{Now: now, Workers: []*scheduler.Worker{{ID: "w", GPUs: gpus, GPUMilliUsed: make([]int, 8),
		CPUs: 64, Memory: 1 << 40, FreeCPUs: 64, FreeMemory: 1 << 40, FreeSlots: 100}}}
	q := scheduler.NewQueue(scheduler.Config{})
	task := func(id string, seq uint64) *scheduler.Task {
		return &scheduler.Task{JobID: id, Priority: 100, Seq: seq, TaskSpec: &scheduler.TaskSpec{Queue: "default", User: "u", Submitted: now, Resources: berth.Resources{GPUs: 1}}}
	}
	a, b := task("a", 1), task("b", 2)
	q.Push(a)
	q.Push(b)
	// The cluster has room for one: a is placed, b stays queued.
	s.Workers[0].FreeSlots = 1
	plan := scheduler.RunPass(q, s)
	if len(plan.Assignments) != 1 || plan.Assignments[0].Task != a {
		t.Fatalf("first pass placed %d tasks, want a alone", len(plan.Assignments))
	}
	q.Remove(a)
	// a is preempted (or fails and is retried): the same task is queued again.
	q.Push(a)
	if q.Len() != 2 {
		t.Fatalf("queue holds %d tasks, want 2", q.Len())
	}
	s.Workers[0].FreeSlots = 100
	s.Now = now.Add(time.Minute)
	plan = scheduler.RunPass(q, s)
	placed := map[string]int{}
	for _, as := range plan.Assignments {
		placed[as.Task.JobID]++
	}
	if placed["a"] != 1 || placed["b"] != 1 {
		t.Fatalf("second pass placed a %d times and b %d times, want once each", placed["a"], placed["b"])
	}
}
