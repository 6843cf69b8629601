package scheduler

import (
	"fmt"
	"testing"
	"time"

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
