package store_test

import (
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/store"
)

// BenchmarkWriteJobs writes batches of 1,000 new jobs on each driver, alone
// and with the 3,000 events the controller emits for them (submitted,
// running, succeeded). Past store.KeptEvents events, each batch also
// prunes as many old ones as it adds.
//
//	go test ./store -run '^$' -bench WriteJobs -benchtime 100x
func BenchmarkWriteJobs(b *testing.B) {
	const jobs = 1000
	for _, d := range drivers {
		for _, withEvents := range []bool{false, true} {
			name := d.name + "/jobs"
			if withEvents {
				name += "+events"
			}
			b.Run(name, func(b *testing.B) {
				s := d.open(b)
				var gen berth.IDGen
				var seq uint64
				now := time.Now().UTC()
				for b.Loop() {
					batch := &store.Batch{}
					for range jobs {
						j := &berth.Job{ID: gen.New(now), JobSpec: berth.JobSpec{Name: "job", User: "alice", Queue: "gpu",
							Kind: berth.KindBatch, Priority: 100, Nodes: 1, Command: berth.Argv{"true"}},
							State: berth.JobPending, CreatedAt: now}
						batch.Jobs = append(batch.Jobs, j)
						if !withEvents {
							continue
						}
						for _, typ := range []string{"job.submitted", "job.running", "job.succeeded"} {
							seq++
							batch.Events = append(batch.Events, &berth.Event{Seq: seq, Time: now, Type: typ, JobID: j.ID,
								WorkerID: "w-01JQ8Z5C2V3K4M5N6P7Q8R9S0T", Host: "gpu-1"})
						}
					}
					if err := s.Write(b.Context(), batch); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*jobs), "ns/job")
			})
		}
	}
}

// BenchmarkJobLifecycle writes what the controller writes for 1,000 jobs
// from submit to success, in three batches: the new jobs; their attempts
// assigned and the jobs running; the attempts and jobs succeeded. (The
// controller writes at least that many: a job's running state lands with
// its assignment or its end when the agent's acceptance shares their group
// commit, in a batch of its own otherwise.) ns/job is the store's share of
// a trivial job's cost.
//
//	go test ./store -run '^$' -bench JobLifecycle -benchtime 100x
func BenchmarkJobLifecycle(b *testing.B) {
	const jobs = 1000
	for _, d := range drivers {
		b.Run(d.name, func(b *testing.B) {
			s := d.open(b)
			var gen berth.IDGen
			now := time.Now().UTC()
			zero := 0
			for b.Loop() {
				var created, assigned, ended store.Batch
				for range jobs {
					j := &berth.Job{ID: gen.New(now), JobSpec: berth.JobSpec{Name: "job", User: "alice", Queue: "gpu",
						Kind: berth.KindBatch, Priority: 100, Nodes: 1, Command: berth.Argv{"true"}},
						State: berth.JobPending, CreatedAt: now}
					created.Jobs = append(created.Jobs, j)
					a := &berth.Attempt{ID: gen.New(now), JobID: j.ID, WorkerID: "w-01JQ8Z5C2V3K4M5N6P7Q8R9S0T", Host: "gpu-1",
						GPUs: []int{0}, State: berth.AttemptAssigned, CreatedAt: now}
					assigned.Attempts = append(assigned.Attempts, a)
					assigned.JobUpdates = append(assigned.JobUpdates, store.JobUpdate{ID: j.ID, State: berth.JobRunning, Attempts: 1, StartedAt: now})
					done := *a
					done.State, done.ExitCode, done.StartedAt, done.FinishedAt = berth.AttemptSucceeded, &zero, now, now
					ended.Attempts = append(ended.Attempts, &done)
					ended.JobUpdates = append(ended.JobUpdates, store.JobUpdate{ID: j.ID, State: berth.JobSucceeded, ExitCode: &zero,
						Attempts: 1, StartedAt: now, FinishedAt: now})
				}
				for _, batch := range []*store.Batch{&created, &assigned, &ended} {
					if err := s.Write(b.Context(), batch); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*jobs), "ns/job")
		})
	}
}
