package storetest

import (
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/store"
)

// exerciseDurable checks, as parallel subtests of t, that a store keeps
// every acknowledged write across Close and a reopen, and that it keeps
// the newest store.KeptEvents events and deletes older ones. Each subtest
// opens one path several times (see Driver.Open).
func exerciseDurable(t *testing.T, d Driver) {
	t.Helper()
	t.Run("ReopenKeepsEverything", func(t *testing.T) {
		t.Parallel()
		testReopen(t, reopener(t, d.Open))
	})
	t.Run("ReopenKeepsInstances", func(t *testing.T) {
		t.Parallel()
		testReopenKeepsInstances(t, reopener(t, d.Open))
	})
	t.Run("KeepsNewestEvents", func(t *testing.T) {
		t.Parallel()
		testKeptEvents(t, reopener(t, d.Open), d.StoredEvents)
	})
}

// snapshot is everything a store returns, for comparing a store before and
// after a reopen.
type snapshot struct {
	Active   *store.Active
	Jobs     []*berth.Job
	Attempts map[string][]*berth.Attempt
	Logs     map[string]string
	Workers  []*berth.Worker
	Quotas   []*berth.QuotaRule
	Controls []*berth.WorkerControl
}

func takeSnapshot(t *testing.T, s store.Store, jobIDs, attemptIDs []string) *snapshot {
	t.Helper()
	a := loadActive(t, s)
	sortByID(a.Jobs, func(j *berth.Job) string { return j.ID })
	sortByID(a.Attempts, func(x *berth.Attempt) string { return x.ID })
	sortByID(a.Workers, func(w *berth.Worker) string { return w.ID })
	snap := &snapshot{Active: a, Jobs: listJobs(t, s, store.JobFilter{}), Attempts: map[string][]*berth.Attempt{},
		Logs: map[string]string{}, Workers: getWorkers(t, s), Quotas: getQuotas(t, s),
		Controls: getControls(t, s)}
	for _, id := range jobIDs {
		snap.Attempts[id] = getAttempts(t, s, id)
	}
	for _, id := range attemptIDs {
		snap.Logs[id] = string(getLogs(t, s, id, 0, 1<<20))
	}
	return snap
}

// reopener returns a function that opens, with open, the store at a path
// in a temporary directory of t, after closing the one it opened before,
// and returns the store and the path; the last one is closed when t ends.
func reopener(t *testing.T, open func(t *testing.T, path string) store.Store) func() (store.Store, string) {
	path := filepath.Join(t.TempDir(), "berth.db")
	var current store.Store
	t.Cleanup(func() {
		if current != nil {
			if err := current.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		}
	})
	return func() (store.Store, string) {
		t.Helper()
		if current != nil {
			err := current.Close()
			current = nil
			if err != nil {
				t.Fatalf("Close: %v", err)
			}
		}
		s := open(t, path)
		if s == nil {
			t.Fatal("open returned a nil store")
		}
		current = s
		return s, path
	}
}

func testReopen(t *testing.T, reopen func() (store.Store, string)) {
	s, _ := reopen()
	if a := loadActive(t, s); len(a.Jobs)+len(a.Attempts)+len(a.Workers)+len(a.Quotas)+len(a.Controls)+len(a.Events) != 0 {
		t.Fatalf("first open is not empty: %s", dump(a))
	}
	var ids idSource
	full := fullJob(ids.next())
	pending := newJob(ids.next(), "cpu", "bob", berth.JobPending)
	running := newJob(ids.next(), "gpu", "bob", berth.JobPending)
	att := newAttempt(ids.next(), running.ID, berth.AttemptRunning)
	worker := &berth.Worker{ID: ids.next(), Host: "gpu-1", GPUs: []berth.GPU{{Index: 0, Model: "H100", Memory: 80 << 30}},
		State: berth.WorkerBusy, Running: 1, LastHeartbeat: base.Add(3), RegisteredAt: base}
	alice := quotaRule("user", "alice", 8, 4, 2.75, 5)
	gpuQueue := quotaRule("queue", "gpu", berth.NoLimit, 100, 0, 6)
	gpuOff := control("gpu-1", "gpu", berth.DesiredOff, berth.StopDrain, "ops", 7)
	allOff := control("gpu-1", berth.AllQueues, berth.DesiredOff, berth.StopHard, "", 8)
	write(t, s, &store.Batch{Jobs: []*berth.Job{full, pending, running}, Workers: []*berth.Worker{worker},
		Quotas: []*berth.QuotaRule{alice, gpuQueue}, Controls: []*berth.WorkerControl{gpuOff, allOff},
		Events: []*berth.Event{fullEvent(1)}})
	write(t, s, &store.Batch{
		JobUpdates: []store.JobUpdate{{ID: running.ID, State: berth.JobRunning, Attempts: 1, StartedAt: base.Add(9)}},
		Attempts:   []*berth.Attempt{att},
		Progress:   []store.AttemptProgress{{AttemptID: att.ID, Progress: "epoch 1/3"}},
		Logs:       []store.LogChunk{{AttemptID: att.ID, Data: []byte("epoch 1\n")}},
		Events:     newEvents(2, 2),
	})
	// A failed batch leaves nothing behind, after a reopen too.
	lostJob := newJob(ids.next(), "gpu", "bob", berth.JobPending)
	if err := s.Write(t.Context(), &store.Batch{Jobs: []*berth.Job{lostJob},
		JobUpdates: []store.JobUpdate{{ID: ids.next(), State: berth.JobRunning}}, Events: newEvents(4, 1)}); err == nil {
		t.Fatal("Write with an update of a missing job succeeded")
	}
	jobIDs := []string{full.ID, pending.ID, running.ID}
	attemptIDs := []string{att.ID}
	before := takeSnapshot(t, s, jobIDs, attemptIDs)
	if len(before.Jobs) != 3 || before.Logs[att.ID] != "epoch 1\n" || len(before.Attempts[running.ID]) != 1 ||
		before.Attempts[running.ID][0].Progress != "epoch 1/3" ||
		len(before.Quotas) != 2 || len(before.Active.Quotas) != 2 || len(before.Controls) != 2 || len(before.Active.Controls) != 2 ||
		len(before.Active.Events) != 3 {
		t.Fatalf("before reopen: %s", dump(before))
	}

	s, _ = reopen()
	checkEqual(t, "after reopen", takeSnapshot(t, s, jobIDs, attemptIDs), before)
	checkNotFound(t, s, lostJob.ID)

	// The reopened store takes writes, and keeps them over another reopen.
	later := newJob(ids.next(), "gpu", "carol", berth.JobPending)
	aliceLater := quotaRule("user", "alice", 2, berth.NoLimit, 0, 7)
	allOn := control("gpu-1", berth.AllQueues, berth.DesiredOn, berth.StopHard, "ops", 9)
	write(t, s, &store.Batch{
		Jobs:         []*berth.Job{later},
		JobUpdates:   []store.JobUpdate{{ID: pending.ID, State: berth.JobCancelled, Reason: "cancelled", FinishedAt: base.Add(time.Hour)}},
		Quotas:       []*berth.QuotaRule{aliceLater},
		QuotaDeletes: []string{gpuQueue.ID()},
		Controls:     []*berth.WorkerControl{allOn},
		Progress:     []store.AttemptProgress{{AttemptID: att.ID, Progress: "epoch 2/3"}},
		Logs:         []store.LogChunk{{AttemptID: att.ID, Offset: 8, Data: []byte("epoch 2\n")}},
		Events:       newEvents(4, 1),
	})
	jobIDs = append(jobIDs, later.ID)
	before = takeSnapshot(t, s, jobIDs, attemptIDs)
	if len(before.Jobs) != 4 || before.Logs[att.ID] != "epoch 1\nepoch 2\n" || before.Active.Counts[berth.JobCancelled] != 1 ||
		!reflect.DeepEqual(before.Quotas, []*berth.QuotaRule{aliceLater}) ||
		!reflect.DeepEqual(before.Controls, []*berth.WorkerControl{allOn, gpuOff}) || before.Attempts[running.ID][0].Progress != "epoch 2/3" ||
		!reflect.DeepEqual(before.Active.Events, append([]*berth.Event{fullEvent(1)}, newEvents(2, 3)...)) {
		t.Fatalf("after writing to the reopened store: %s", dump(before))
	}
	s, _ = reopen()
	checkEqual(t, "after second reopen", takeSnapshot(t, s, jobIDs, attemptIDs), before)
}

// testKeptEvents writes more than store.KeptEvents events in a few large
// batches. After each, the store holds no event older than the newest
// store.KeptEvents; after a reopen LoadActive returns exactly those, in
// order; the reopened store goes on deleting the oldest.
// (Under the race detector each large batch or load takes seconds: the
// test writes and loads as few as it can.)
func testKeptEvents(t *testing.T, reopen func() (store.Store, string),
	storedEvents func(t *testing.T, path string) (oldest, newest uint64)) {
	const kept = store.KeptEvents
	s, path := reopen()
	newest := 0
	writeEvents := func(n int) {
		t.Helper()
		write(t, s, &store.Batch{Events: newEvents(uint64(newest+1), n)})
		newest += n
		oldest := max(newest-kept+1, 1)
		if first, last := storedEvents(t, path); first != uint64(oldest) || last != uint64(newest) {
			t.Fatalf("after %d events the store holds seq %d to %d, want %d to %d", newest, first, last, oldest, newest)
		}
	}
	writeEvents(kept)
	writeEvents(5000)

	s, _ = reopen()
	got, first := loadActive(t, s).Events, uint64(newest-kept+1)
	if len(got) != kept {
		t.Fatalf("Active.Events after a reopen has %d events, want the newest %d (seq %d to %d)", len(got), kept, first, newest)
	}
	for i, e := range got {
		if e.Seq != first+uint64(i) {
			t.Fatalf("Active.Events[%d] after a reopen has seq %d, want %d", i, e.Seq, first+uint64(i))
		}
	}
	checkEqual(t, "the oldest and newest of Active.Events after a reopen", []*berth.Event{got[0], got[kept-1]},
		[]*berth.Event{newEvents(first, 1)[0], newEvents(uint64(newest), 1)[0]})
	writeEvents(3000)
}
