package postgres

import (
	"strconv"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/postgres/pgtest"
	"github.com/berth-dev/berth/store"
)

// BenchmarkWriteArray writes a 10,000-job array in one batch, as a submit
// of `berth bench`'s no-op run does (ns/op is per batch).
func BenchmarkWriteArray(b *testing.B) {
	s, err := Open(b.Context(), pgtest.NewDatabase(b))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	var gen berth.IDGen
	spec := berth.DefaultJobSpec()
	spec.Command, spec.Workdir = berth.Argv{"true"}, "/tmp/bench"
	var seq uint64
	for b.Loop() {
		b.StopTimer()
		now := time.Now().UTC()
		batch := &store.Batch{}
		for i := range 10_000 {
			idx := i
			j := &berth.Job{ID: gen.New(now), JobSpec: spec, State: berth.JobPending, CreatedAt: now, ArrayIndex: &idx}
			batch.Jobs = append(batch.Jobs, j)
			seq++
			batch.Events = append(batch.Events, &berth.Event{Seq: seq, Time: now, Type: berth.EventJobSubmitted, JobID: j.ID, State: berth.JobPending, User: "root"})
		}
		b.StartTimer()
		if err := s.Write(b.Context(), batch); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWriteRound writes, per op, the rounds of 1,000 jobs of a no-op
// run: the batch that assigns them (an attempt each), then the batch that
// ends them (each attempt and job updated).
func BenchmarkWriteRound(b *testing.B) {
	s, err := Open(b.Context(), pgtest.NewDatabase(b))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	var gen berth.IDGen
	spec := berth.DefaultJobSpec()
	spec.Command = berth.Argv{"true"}
	var seq uint64
	for b.Loop() {
		b.StopTimer()
		now := time.Now().UTC()
		jobs := &store.Batch{}
		for i := range 1000 {
			idx := i
			jobs.Jobs = append(jobs.Jobs, &berth.Job{ID: gen.New(now), JobSpec: spec, State: berth.JobPending, CreatedAt: now, ArrayIndex: &idx})
		}
		if err := s.Write(b.Context(), jobs); err != nil {
			b.Fatal(err)
		}
		assign, end := &store.Batch{}, &store.Batch{}
		for i, j := range jobs.Jobs {
			seq++
			a := &berth.Attempt{ID: gen.New(now), JobID: j.ID, WorkerID: "w" + strconv.Itoa(i%2), Host: "bench", State: berth.AttemptAssigned, CreatedAt: now}
			assign.Attempts = append(assign.Attempts, a)
			done := *a
			done.State, done.StartedAt, done.FinishedAt, done.ExitCode = berth.AttemptSucceeded, now, now, new(int)
			end.Attempts = append(end.Attempts, &done)
			end.JobUpdates = append(end.JobUpdates, store.JobUpdate{ID: j.ID, State: berth.JobSucceeded, Attempts: 1, ExitCode: new(int), StartedAt: now, FinishedAt: now})
			end.Events = append(end.Events, &berth.Event{Seq: seq, Time: now, Type: berth.EventJobSucceeded, JobID: j.ID, State: berth.JobSucceeded, WorkerID: "w", Host: "bench"})
		}
		b.StartTimer()
		if err := s.Write(b.Context(), assign); err != nil {
			b.Fatal(err)
		}
		if err := s.Write(b.Context(), end); err != nil {
			b.Fatal(err)
		}
	}
}
