package postgres

import (
	"strconv"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/store"
)

// BenchmarkWriteArray writes a 10,000-job array and its submitted events
// in one batch, as a submit of `berth bench`'s no-op run does (ns/op is
// per batch).
func BenchmarkWriteArray(b *testing.B) {
	var seq uint64
	benchWrites(b, func(gen *berth.IDGen, now time.Time) []*store.Batch {
		batch := &store.Batch{Jobs: arrayJobs(gen, trueSpec(), now, 10_000)}
		for _, j := range batch.Jobs {
			seq++
			batch.Events = append(batch.Events, &berth.Event{Seq: seq, Time: now, Type: berth.EventJobSubmitted, JobID: j.ID,
				State: berth.JobPending, User: "root"})
		}
		return []*store.Batch{batch}
	})
}

// BenchmarkWriteRound writes, per op, a round of 1,000 jobs of a no-op
// run: the batch that creates them, the batch that assigns them (an
// attempt each), then the batch that ends them (each attempt and job
// updated, an event each).
func BenchmarkWriteRound(b *testing.B) {
	var seq uint64
	benchWrites(b, func(gen *berth.IDGen, now time.Time) []*store.Batch {
		jobs := &store.Batch{Jobs: arrayJobs(gen, trueSpec(), now, 1000)}
		assign, end := &store.Batch{}, &store.Batch{}
		for i, j := range jobs.Jobs {
			seq++
			a := &berth.Attempt{ID: gen.New(now), JobID: j.ID, WorkerID: "w" + strconv.Itoa(i%2), Host: "bench", State: berth.AttemptAssigned, CreatedAt: now}
			assign.Attempts = append(assign.Attempts, a)
			done := *a
			done.State, done.StartedAt, done.FinishedAt, done.ExitCode = berth.AttemptSucceeded, now, now, new(int)
			end.Attempts = append(end.Attempts, &done)
			end.JobUpdates = append(end.JobUpdates, store.JobUpdate{ID: j.ID, State: berth.JobSucceeded, Attempts: 1, ExitCode: new(int),
				StartedAt: now, FinishedAt: now})
			end.Events = append(end.Events, &berth.Event{Seq: seq, Time: now, Type: berth.EventJobSucceeded, JobID: j.ID,
				State: berth.JobSucceeded, WorkerID: "w", Host: "bench"})
		}
		return []*store.Batch{jobs, assign, end}
	})
}

// benchWrites writes, per op, the batches that build returns, in order, on
// a store of b's own; making them is not timed.
func benchWrites(b *testing.B, build func(gen *berth.IDGen, now time.Time) []*store.Batch) {
	s := openTest(b)
	var gen berth.IDGen
	for b.Loop() {
		b.StopTimer()
		batches := build(&gen, time.Now().UTC())
		b.StartTimer()
		for _, batch := range batches {
			if err := s.Write(b.Context(), batch); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// trueSpec returns the spec of a job that runs true.
func trueSpec() berth.JobSpec {
	spec := berth.DefaultJobSpec()
	spec.Command = berth.Argv{"true"}
	return spec
}

// arrayJobs returns the n new jobs of an array of spec.
func arrayJobs(gen *berth.IDGen, spec berth.JobSpec, now time.Time, n int) []*berth.Job {
	jobs := make([]*berth.Job, n)
	for i := range jobs {
		idx := i
		jobs[i] = &berth.Job{ID: gen.New(now), JobSpec: spec, State: berth.JobPending, CreatedAt: now, ArrayIndex: &idx}
	}
	return jobs
}
