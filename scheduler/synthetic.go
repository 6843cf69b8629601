package scheduler

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/berth-dev/berth"
)

// Synthetic builds the benchmark workload of `berth bench scheduler` and
// BenchmarkPass: an empty cluster of workers (8 GPUs each: mostly
// H100, some A100 with a zone label) and pending tasks from 50 users with
// 1, 2, 4 or 8 GPUs, one in twenty a gang of 2–4 whole machines, and a GPU
// quota on every fifth user. The same arguments give the same workload.
func Synthetic(workers, pending int, now time.Time) (*Queue, *Snapshot) {
	rng := rand.New(rand.NewPCG(1, uint64(workers)<<32|uint64(pending)))
	s := &Snapshot{Now: now, Workers: make([]*Worker, workers)}
	for i := range s.Workers {
		model, mem := "NVIDIA H100 80GB HBM3", berth.Bytes(80<<30)
		var labels map[string]string
		if i%4 == 3 {
			model, mem = "NVIDIA A100-SXM4-40GB", 40<<30
			labels = map[string]string{"zone": fmt.Sprint("z", i%3)}
		}
		gs := make([]berth.GPU, 8)
		for g := range gs {
			gs[g] = berth.GPU{Index: g, Model: model, Memory: mem}
		}
		s.Workers[i] = &Worker{ID: fmt.Sprintf("w%05d", i), Host: fmt.Sprintf("host%05d", i), Labels: labels,
			GPUs: gs, GPUMilliUsed: make([]int, 8), CPUs: 128, Memory: 1 << 40, FreeCPUs: 128, FreeMemory: 1 << 40, FreeSlots: 16}
	}
	const users = 50
	for u := 0; u < users; u += 5 {
		s.Quotas = append(s.Quotas, berth.QuotaRule{Scope: berth.QuotaUser, Name: fmt.Sprint("user", u),
			MaxGPUs: workers * 8 / 20, MaxJobs: berth.NoLimit, Weight: float64(1 + u%3)})
	}
	q := NewQueue(DefaultConfig())
	for i := 0; i < pending; i++ {
		t := &Task{JobID: fmt.Sprintf("j%07d", i), Priority: rng.IntN(10) * 100, Seq: uint64(i),
			TaskSpec: &TaskSpec{Queue: "default", User: fmt.Sprint("user", rng.IntN(users)),
				Submitted: now.Add(-time.Duration(rng.IntN(7200)) * time.Second),
				Resources: berth.Resources{GPUs: 1 << rng.IntN(4), CPUs: 4, Memory: 32 << 30}}}
		switch {
		case i%20 == 0:
			t.Nodes, t.Resources.GPUs = 2+rng.IntN(3), 8
		case i%7 == 0:
			t.Resources.GPUType = "A100"
		case i%11 == 0:
			t.MaxRuntime = time.Duration(1+rng.IntN(120)) * time.Minute
		}
		q.Push(t)
	}
	return q, s
}
