package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/store"
)

// attemptTests check the attempts of store.JobStore and their progress.
var attemptTests = []test{
	{"Attempts", testAttempts},
	{"AttemptByID", testAttemptByID},
	{"AttemptUpsertsLastWins", testAttemptUpsertsLastWins},
	{"AttemptProgress", testAttemptProgress},
	{"AttemptProgressInBatchOrder", testAttemptProgressInBatchOrder},
}

func testAttempts(t *testing.T, s store.Store) {
	var ids idSource
	jobA, jobB := newJob(ids.next(), "gpu", "alice", berth.JobRunning), newJob(ids.next(), "gpu", "bob", berth.JobRunning)
	write(t, s, &store.Batch{Jobs: []*berth.Job{jobA, jobB}})

	a1 := &berth.Attempt{ID: ids.next(), JobID: jobA.ID, TaskIndex: 0, WorkerID: "worker-1", Host: "gpu-1",
		GPUs: []int{0, 3}, Port: 29517, State: berth.AttemptAssigned, CreatedAt: base.Add(1)}
	a2 := &berth.Attempt{ID: ids.next(), JobID: jobA.ID, TaskIndex: 1, WorkerID: "worker-2", Host: "gpu-2",
		State: berth.AttemptAssigned, CreatedAt: base.Add(2)}
	b1 := &berth.Attempt{ID: ids.next(), JobID: jobB.ID, WorkerID: "worker-1", Host: "gpu-1", GPUs: []int{1},
		State: berth.AttemptRunning, CreatedAt: base.Add(3), StartedAt: base.Add(4)}
	if as := getAttempts(t, s, jobA.ID); len(as) != 0 {
		t.Errorf("Attempts before any = %s, want none", dump(as))
	}
	// Written newest first: Attempts must still return oldest first.
	write(t, s, &store.Batch{Attempts: []*berth.Attempt{a2, b1, a1}})
	checkEqual(t, "Attempts(A)", getAttempts(t, s, jobA.ID), []*berth.Attempt{a1, a2})
	checkEqual(t, "Attempts(B)", getAttempts(t, s, jobB.ID), []*berth.Attempt{b1})
	if as := getAttempts(t, s, ids.next()); len(as) != 0 {
		t.Errorf("Attempts(unknown job) = %s, want none", dump(as))
	}

	// Upserts of the same id update it in place.
	running := *a1
	running.WorkerID, running.Host, running.GPUs = "worker-3", "gpu-3", []int{2, 5, 7}
	running.State, running.StartedAt = berth.AttemptRunning, base.Add(time.Second+1)
	write(t, s, &store.Batch{Attempts: []*berth.Attempt{&running}})
	checkEqual(t, "Attempts(A) after running", getAttempts(t, s, jobA.ID), []*berth.Attempt{&running, a2})

	failed := running
	failed.State, failed.ExitCode, failed.Reason, failed.FinishedAt = berth.AttemptFailed, intPtr(1), "exit status 1", base.Add(time.Minute+1)
	lost := *a2
	lost.State, lost.Reason, lost.GPUs, lost.FinishedAt = berth.AttemptLost, "worker lost", []int{}, base.Add(time.Minute+2)
	write(t, s, &store.Batch{Attempts: []*berth.Attempt{&failed, &lost}})
	checkEqual(t, "Attempts(A) after ending", getAttempts(t, s, jobA.ID), []*berth.Attempt{&failed, &lost})

	// An exit code can go back to nil and times back to zero.
	cleared := failed
	cleared.ExitCode, cleared.Reason, cleared.StartedAt, cleared.FinishedAt = nil, "", time.Time{}, time.Time{}
	cleared.State = berth.AttemptAssigned
	succeeded := *b1
	succeeded.State, succeeded.ExitCode, succeeded.FinishedAt = berth.AttemptSucceeded, intPtr(0), base.Add(time.Hour)
	write(t, s, &store.Batch{Attempts: []*berth.Attempt{&cleared, &succeeded}})
	checkEqual(t, "Attempts(A) after clearing", getAttempts(t, s, jobA.ID), []*berth.Attempt{&cleared, &lost})
	checkEqual(t, "Attempts(B) after success", getAttempts(t, s, jobB.ID), []*berth.Attempt{&succeeded})
}

func testAttemptByID(t *testing.T, s store.Store) {
	var ids idSource
	j := newJob(ids.next(), "gpu", "alice", berth.JobRunning)
	a := &berth.Attempt{ID: ids.next(), JobID: j.ID, WorkerID: "worker-1", Host: "gpu-1", GPUs: []int{1},
		State: berth.AttemptLost, Reason: "worker gpu-1 lost", CreatedAt: base.Add(1), FinishedAt: base.Add(2)}
	write(t, s, &store.Batch{Jobs: []*berth.Job{j}, Attempts: []*berth.Attempt{a}})
	got, err := s.Attempt(t.Context(), a.ID)
	if err != nil {
		t.Fatalf("Attempt(%s): %v", a.ID, err)
	}
	checkEqual(t, "Attempt", got, a)
	unknown := ids.next()
	if _, err := s.Attempt(t.Context(), unknown); berth.ErrorCode(err) != berth.ECodeNotFound {
		t.Errorf("Attempt(unknown) error %v, want %s", err, berth.ECodeNotFound)
	}
}

func testAttemptUpsertsLastWins(t *testing.T, s store.Store) {
	var ids idSource
	job := newJob(ids.next(), "gpu", "alice", berth.JobRunning)
	write(t, s, &store.Batch{Jobs: []*berth.Job{job}})

	// The same id twice in one batch, next to each other and 130 entries
	// apart (in different multi-row inserts): the later one wins.
	var list, want []*berth.Attempt
	for range 130 {
		a := newAttempt(ids.next(), job.ID, berth.AttemptAssigned)
		list, want = append(list, a), append(want, a)
	}
	first := *list[0]
	first.State, first.StartedAt = berth.AttemptRunning, base.Add(5)
	list = append(list, &first)
	want[0] = &first
	near := newAttempt(ids.next(), job.ID, berth.AttemptAssigned)
	nearLater := *near
	nearLater.State, nearLater.Host = berth.AttemptRunning, "host-2"
	list = append(list, near, &nearLater)
	want = append(want, &nearLater)

	write(t, s, &store.Batch{Attempts: list})
	checkEqual(t, "Attempts", getAttempts(t, s, job.ID), want)
}

func testAttemptProgress(t *testing.T, s store.Store) {
	var ids idSource
	job := newJob(ids.next(), "gpu", "alice", berth.JobRunning)
	active := newAttempt(ids.next(), job.ID, berth.AttemptRunning)
	active.Progress = "step 10/100"
	ended := newAttempt(ids.next(), job.ID, berth.AttemptFailed)
	// An attempt upsert writes Progress.
	write(t, s, &store.Batch{Jobs: []*berth.Job{job}, Attempts: []*berth.Attempt{active, ended}})
	checkEqual(t, "Attempts", getAttempts(t, s, job.ID), []*berth.Attempt{active, ended})
	checkEqual(t, "Active.Attempts", loadActive(t, s).Attempts, []*berth.Attempt{active})

	// Progress sets only the attempt's progress, terminal or not, and is
	// visible in Attempts and LoadActive.
	write(t, s, &store.Batch{Progress: []store.AttemptProgress{
		{AttemptID: active.ID, Progress: "epoch 2: loss=0.31 ☃ \"quoted\"\n"},
		{AttemptID: ended.ID, Progress: "step 7"},
	}})
	active.Progress, ended.Progress = "epoch 2: loss=0.31 ☃ \"quoted\"\n", "step 7"
	checkEqual(t, "Attempts after progress", getAttempts(t, s, job.ID), []*berth.Attempt{active, ended})
	checkEqual(t, "Active.Attempts after progress", loadActive(t, s).Attempts, []*berth.Attempt{active})

	// Progress of an unknown attempt is no error and changes nothing, in a
	// batch with other writes too.
	before := loadActive(t, s)
	write(t, s, &store.Batch{Progress: []store.AttemptProgress{{AttemptID: ids.next(), Progress: "x"}, {AttemptID: "", Progress: "y"}}})
	other := newJob(ids.next(), "cpu", "bob", berth.JobPending)
	write(t, s, &store.Batch{Jobs: []*berth.Job{other}, Progress: []store.AttemptProgress{{AttemptID: other.ID, Progress: "z"}}})
	checkEqual(t, "Attempts after progress of unknown attempts", getAttempts(t, s, job.ID), []*berth.Attempt{active, ended})
	if as := getAttempts(t, s, other.ID); len(as) != 0 {
		t.Errorf("Attempts of a job without any = %s, want none", dump(as))
	}
	checkEqual(t, "Active.Attempts after progress of unknown attempts", loadActive(t, s).Attempts, before.Attempts)
	checkJob(t, s, other)

	// A later upsert without progress clears it; progress can be emptied.
	upserted := *active
	upserted.Progress, upserted.Reason = "", "restarted"
	write(t, s, &store.Batch{Attempts: []*berth.Attempt{&upserted}, Progress: []store.AttemptProgress{{AttemptID: ended.ID}}})
	ended.Progress = ""
	checkEqual(t, "Attempts after upsert and clearing", getAttempts(t, s, job.ID), []*berth.Attempt{&upserted, ended})
}

func testAttemptProgressInBatchOrder(t *testing.T, s store.Store) {
	var ids idSource
	job := newJob(ids.next(), "gpu", "alice", berth.JobRunning)
	a := newAttempt(ids.next(), job.ID, berth.AttemptAssigned)
	a.Progress = "from the upsert"

	// Progress applies after attempt upserts, so in one batch it wins over
	// the upsert, also of an attempt the batch creates; a later progress of
	// the same attempt wins over an earlier one.
	write(t, s, &store.Batch{Jobs: []*berth.Job{job}, Attempts: []*berth.Attempt{a},
		Progress: []store.AttemptProgress{{AttemptID: a.ID, Progress: "first"}, {AttemptID: a.ID, Progress: "last"}}})
	want := *a
	want.Progress = "last"
	checkEqual(t, "Attempts after creating batch", getAttempts(t, s, job.ID), []*berth.Attempt{&want})

	running := *a
	running.State, running.StartedAt, running.Progress = berth.AttemptRunning, base.Add(time.Minute), "stale"
	write(t, s, &store.Batch{Attempts: []*berth.Attempt{&running}, Progress: []store.AttemptProgress{{AttemptID: a.ID, Progress: "step 1"}}})
	want = running
	want.Progress = "step 1"
	checkEqual(t, "Attempts after upsert and progress", getAttempts(t, s, job.ID), []*berth.Attempt{&want})
	checkEqual(t, "Active.Attempts after upsert and progress", loadActive(t, s).Attempts, []*berth.Attempt{&want})

	// Batches merged with Append, compacted or not, keep the order of the
	// writes: a progress then an upsert leaves the upsert's progress; an
	// upsert then a progress leaves the progress.
	for _, compact := range []bool{false, true} {
		done := running
		done.State, done.FinishedAt, done.Progress = berth.AttemptSucceeded, base.Add(time.Hour), fmt.Sprint("done ", compact)
		merged := &store.Batch{}
		merged.Append(&store.Batch{Progress: []store.AttemptProgress{{AttemptID: a.ID, Progress: "step 2"}}})
		merged.Append(&store.Batch{Attempts: []*berth.Attempt{&done}})
		if compact {
			merged.Compact()
		}
		write(t, s, merged)
		checkEqual(t, fmt.Sprintf("Attempts after progress, then upsert (compacted %v)", compact),
			getAttempts(t, s, job.ID), []*berth.Attempt{&done})

		merged = &store.Batch{}
		merged.Append(&store.Batch{Attempts: []*berth.Attempt{&running}})
		merged.Append(&store.Batch{Progress: []store.AttemptProgress{{AttemptID: a.ID, Progress: "step 3"}}})
		merged.Append(&store.Batch{Progress: []store.AttemptProgress{{AttemptID: a.ID, Progress: "step 4"}}})
		if compact {
			merged.Compact()
		}
		write(t, s, merged)
		want = running
		want.Progress = "step 4"
		checkEqual(t, fmt.Sprintf("Attempts after upsert, then progress (compacted %v)", compact),
			getAttempts(t, s, job.ID), []*berth.Attempt{&want})
	}
}
