package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/store"
)

// lifecycleTests check what the controller's lifecycle relies on of
// store.JobStore as a whole: LoadActive, batches of every size, and
// writes concurrent with reads.
func lifecycleTests() []test {
	tests := []test{
		{"LoadActiveEmpty", testLoadActiveEmpty},
		{"LoadActive", testLoadActive},
		{"LoadActiveManyPending", testLoadActiveManyPending},
		{"LoadActiveMembers", testLoadActiveMembers},
		{"ConcurrentWritesAndReads", testConcurrent},
		{"AuditHead", testAuditHead},
	}
	for _, n := range []int{1, 127, 128, 129, 300, 1000} {
		tests = append(tests, test{fmt.Sprintf("BatchOf%d", n), func(t *testing.T, s store.Store) { testBatchOf(t, s, n) }})
	}
	return tests
}

func testLoadActiveEmpty(t *testing.T, s store.Store) {
	a := loadActive(t, s)
	if len(a.Jobs)+len(a.Attempts)+len(a.Workers)+len(a.Quotas)+len(a.Controls)+len(a.Events) != 0 {
		t.Errorf("LoadActive of an empty store = %s, want nothing", dump(a))
	}
	for st, n := range a.Counts {
		if n != 0 {
			t.Errorf("Counts[%s] = %d in an empty store", st, n)
		}
	}
	for id, n := range a.LogSizes {
		t.Errorf("LogSizes[%s] = %d in an empty store", id, n)
	}
}

// testLoadActiveManyPending loads enough pending jobs for the drivers to
// read them in ranges at once, arrays of one spec among jobs of their
// own, with running and ended jobs between them: every active job comes
// back once, in id order, with its own spec.
func testLoadActiveManyPending(t *testing.T, s store.Store) {
	const n = 30_011
	var ids idSource
	var want []*berth.Job
	counts := map[berth.JobState]int{}
	b := &store.Batch{}
	for i := range n {
		st := berth.JobPending
		switch i % 997 {
		case 5:
			st = berth.JobRunning
		case 6:
			st = berth.JobSucceeded
		}
		j := newJob(ids.next(), "gpu", "alice", st)
		j.ArrayIndex = intPtr(i)
		if i%1000 == 7 { // a job of its own amid an array
			j.Command = berth.Argv{"echo", fmt.Sprint(i)}
		} else if i >= n/2 { // the second array
			j.Queue, j.Command = "cpu", berth.Argv{"sleep", "1"}
		}
		counts[st]++
		if !st.Terminal() {
			want = append(want, cloneJob(j))
		}
		b.Jobs = append(b.Jobs, j)
		if len(b.Jobs) == 5000 || i == n-1 {
			write(t, s, b)
			b = &store.Batch{}
		}
	}
	// The jobs of the first batch after the array's first job, pending
	// and with its spec, are stored sharing its spec and load as members.
	members := 0
	for i := 1; i < 5000; i++ {
		if i%1000 != 7 && i%997 != 5 && i%997 != 6 {
			members++
		}
	}
	if split := loadActiveSplit(t, s); len(split.Members) != members || len(split.Jobs)+members != len(want) {
		t.Fatalf("LoadActive: %d jobs and %d members, want %d and %d", len(split.Jobs), len(split.Members), len(want)-members, members)
	}
	// Handed out in parts as they are read: the same jobs, in id order.
	var parts int
	var streamed []*berth.Job
	split, err := s.LoadActive(t.Context(), func(a *store.Active, jobs []*berth.Job, members []store.ArrayMember, left int) {
		parts++
		if a.Counts[berth.JobPending] != counts[berth.JobPending] {
			t.Errorf("part %d: the counts are not read yet", parts)
		}
		if got := len(streamed) + len(jobs) + len(members) + left; got != len(want) {
			t.Errorf("part %d: %d jobs so far and %d left, want %d in all", parts, got-left, left, len(want))
		}
		part := &store.Active{Jobs: jobs, Members: members}
		checkMembers(t, part)
		streamed = append(streamed, part.AllJobs()...)
	})
	if err != nil {
		t.Fatalf("LoadActive: %v", err)
	}
	if len(split.Jobs) != 0 || len(split.Members) != 0 || parts < 2 {
		t.Errorf("LoadActive handed out %d parts and returned %d jobs, %d members; want the jobs in parts (30,011 jobs are read in ranges), none returned",
			parts, len(split.Jobs), len(split.Members))
	}
	checkEqual(t, "LoadActive's parts", streamed, loadActive(t, s).Jobs)
	a := loadActive(t, s)
	if !slices.Equal(jobIDs(a.Jobs), jobIDs(want)) {
		t.Fatalf("LoadActive: %d jobs, want the %d active ones in id order", len(a.Jobs), len(want))
	}
	for i, j := range a.Jobs {
		w := want[i]
		if j.State != w.State || j.Queue != w.Queue || !slices.Equal(j.Command, w.Command) || *j.ArrayIndex != *w.ArrayIndex {
			t.Fatalf("loaded job %d = %s %s %v #%d, want %s %s %v #%d", i, j.State, j.Queue, j.Command, *j.ArrayIndex,
				w.State, w.Queue, w.Command, *w.ArrayIndex)
		}
	}
	for _, st := range []berth.JobState{berth.JobPending, berth.JobRunning, berth.JobSucceeded} {
		if a.Counts[st] != counts[st] {
			t.Errorf("Counts[%s] = %d, want %d", st, a.Counts[st], counts[st])
		}
	}
}

// testLoadActiveMembers loads an array whose jobs changed in every way
// a job's row can change after its submission: only the jobs still as
// submitted load as members, each exactly the job written, and the
// members made at one time share one Like. The jobs that are no members
// are few: the drivers read them by id (with many, by a second walk:
// LoadActiveManyPending).
func testLoadActiveMembers(t *testing.T, s store.Store) {
	var ids idSource
	first := fullJob(ids.next())
	first.ArrayIndex, first.State, first.Reason, first.ExitCode, first.Attempts = intPtr(0), berth.JobPending, "", nil, 0
	first.StartedAt, first.FinishedAt = time.Time{}, time.Time{}
	jobs := []*berth.Job{first}
	for i := 1; i < 40; i++ {
		j := cloneJob(first)
		j.ID, j.ArrayIndex = ids.next(), intPtr(i)
		if i >= 9 {
			j.CreatedAt = first.CreatedAt.Add(time.Millisecond) // made a moment later
		}
		jobs = append(jobs, j)
	}
	write(t, s, &store.Batch{Jobs: jobs})
	now := base.Add(time.Minute)
	changed := []store.JobUpdate{
		{ID: first.ID, State: berth.JobRunning, Attempts: 1, StartedAt: now}, // the first job's spec is still theirs
		{ID: jobs[1].ID, State: berth.JobPending, Reason: "requeued"},
		{ID: jobs[2].ID, State: berth.JobPending, Attempts: 1},
		{ID: jobs[3].ID, State: berth.JobPending, ExitCode: intPtr(3)},
		{ID: jobs[4].ID, State: berth.JobPending, StartedAt: now},
		{ID: jobs[5].ID, State: berth.JobPending, FinishedAt: now},
		{ID: jobs[6].ID, State: berth.JobSucceeded, ExitCode: intPtr(0), Attempts: 1, StartedAt: now, FinishedAt: now},
	}
	for _, u := range changed {
		apply(jobs[slices.IndexFunc(jobs, func(j *berth.Job) bool { return j.ID == u.ID })], u)
	}
	write(t, s, &store.Batch{JobUpdates: changed, Federation: &store.FederationBatch{
		JobClusters: []store.JobCluster{{JobID: jobs[7].ID, Cluster: "p9"}}}})
	jobs[7].Cluster = "p9"

	a := loadActiveSplit(t, s)
	wantMembers := jobIDs(jobs[8:])
	var got []string
	for _, m := range a.Members {
		got = append(got, m.ID)
	}
	if !slices.Equal(got, wantMembers) {
		t.Fatalf("members %v, want %v (the jobs of the array still as submitted)", got, wantMembers)
	}
	for i, m := range a.Members[1:] {
		if m.Like == a.Members[0].Like || m.Like != a.Members[1].Like {
			t.Errorf("member %d: members made at one time do not share one Like, or made at two times share one", i+1)
		}
	}
	active := slices.DeleteFunc(slices.Clone(jobs), func(j *berth.Job) bool { return j.State.Terminal() })
	checkEqual(t, "LoadActive", a.AllJobs(), active)
}

func testLoadActive(t *testing.T, s store.Store) {
	var ids idSource
	var jobs []*berth.Job
	counts := map[berth.JobState]int{}
	for i, st := range []berth.JobState{berth.JobPending, berth.JobSucceeded, berth.JobRunning, berth.JobPending,
		berth.JobFailed, berth.JobCancelled, berth.JobRunning, berth.JobSucceeded, berth.JobPending, berth.JobSucceeded} {
		j := newJob(ids.next(), []string{"gpu", "cpu"}[i%2], "alice", st)
		if st != berth.JobPending {
			j.StartedAt, j.Attempts = base.Add(time.Duration(i)), 1
		}
		jobs = append(jobs, j)
	}
	running := jobs[2]
	var attempts []*berth.Attempt
	for _, st := range allAttemptStates {
		attempts = append(attempts, newAttempt(ids.next(), running.ID, st))
	}
	assigned, active, ended := attempts[0], attempts[1], attempts[2]
	workers := []*berth.Worker{
		{ID: ids.next(), Host: "gpu-1", State: berth.WorkerBusy, Running: 2, LastHeartbeat: base},
		{ID: ids.next(), Host: "gpu-2", State: berth.WorkerLost},
		{ID: ids.next(), Host: "cpu-1", State: berth.WorkerParked, Queues: []string{"cpu"}},
	}
	// Written out of id order; one is deleted later.
	quotas := []*berth.QuotaRule{
		quotaRule("user", "bob", berth.NoLimit, 2, 0.5, 1),
		quotaRule("queue", "gpu", 16, berth.NoLimit, 0, 2),
		quotaRule("template", "jupyter", 1, 1, 0, 3),
		quotaRule("user", "alice", 8, 4, 2, 4),
	}
	write(t, s, &store.Batch{
		Jobs:     jobs,
		Attempts: attempts,
		Workers:  workers,
		Quotas:   quotas,
		Logs: []store.LogChunk{
			{AttemptID: active.ID, Offset: 0, Data: []byte("0123456789")},
			{AttemptID: ended.ID, Offset: 0, Data: make([]byte, 100)},
		},
	})
	// Updates move jobs between states; later writes add output.
	u1 := store.JobUpdate{ID: jobs[0].ID, State: berth.JobRunning, Attempts: 1, StartedAt: base.Add(time.Hour)}
	u2 := store.JobUpdate{ID: jobs[6].ID, State: berth.JobFailed, Reason: "lost", Attempts: 1,
		StartedAt: jobs[6].StartedAt, FinishedAt: base.Add(time.Hour)}
	write(t, s, &store.Batch{
		JobUpdates:   []store.JobUpdate{u1, u2},
		QuotaDeletes: []string{"template:jupyter"},
		Logs:         []store.LogChunk{{AttemptID: active.ID, Offset: 10, Data: []byte("abcde")}},
	})
	apply(jobs[0], u1)
	apply(jobs[6], u2)

	var wantJobs []*berth.Job
	for _, j := range jobs {
		counts[j.State]++
		if !j.State.Terminal() {
			wantJobs = append(wantJobs, j)
		}
	}
	a := loadActive(t, s)
	sortByID(a.Jobs, func(j *berth.Job) string { return j.ID })
	sortByID(a.Attempts, func(x *berth.Attempt) string { return x.ID })
	sortByID(a.Workers, func(w *berth.Worker) string { return w.ID })
	checkEqual(t, "Active.Jobs", a.Jobs, wantJobs)
	checkEqual(t, "Active.Attempts", a.Attempts, []*berth.Attempt{assigned, active})
	checkEqual(t, "Active.Workers", a.Workers, workers)
	checkEqual(t, "Active.Quotas", a.Quotas, []*berth.QuotaRule{quotas[1], quotas[3], quotas[0]})
	if a.LogSizes[active.ID] != 15 || a.LogSizes[assigned.ID] != 0 {
		t.Errorf("LogSizes = %v, want %s: 15 (and %s: 0 or absent)", a.LogSizes, active.ID, assigned.ID)
	}
	for id := range a.LogSizes {
		if id != active.ID && id != assigned.ID {
			t.Errorf("LogSizes has %s, which is not an active attempt", id)
		}
	}
	for _, st := range allJobStates {
		if a.Counts[st] != counts[st] {
			t.Errorf("Counts[%s] = %d, want %d (all counts %v)", st, a.Counts[st], counts[st], a.Counts)
		}
	}
	for st := range a.Counts {
		if !slices.Contains(allJobStates, st) {
			t.Errorf("Counts has unknown state %q", st)
		}
	}
}

func testBatchOf(t *testing.T, s store.Store, n int) {
	var ids idSource
	jobs := make([]*berth.Job, n)
	attempts := make([]*berth.Attempt, n)
	logs := make([]store.LogChunk, n)
	var out []byte
	for i := range n {
		j := fullJob(ids.next())
		j.ArrayIndex, j.State, j.ExitCode, j.FinishedAt = intPtr(i), berth.JobRunning, nil, time.Time{}
		j.CreatedAt = base.Add(time.Duration(i))
		jobs[i] = j
		attempts[i] = newAttempt(ids.next(), j.ID, berth.AttemptRunning)
		line := fmt.Appendf(nil, "line %d\n", i)
		logs[i] = store.LogChunk{AttemptID: attempts[0].ID, Offset: int64(len(out)), Data: line}
		out = append(out, line...)
	}
	events := newEvents(1, n)
	write(t, s, &store.Batch{Jobs: jobs, Attempts: attempts, Logs: logs, Events: events})

	want := slices.Clone(jobs)
	slices.Reverse(want)
	checkEqual(t, "Jobs({})", listJobs(t, s, store.JobFilter{}), want)
	checkEqual(t, "Attempts(last job)", getAttempts(t, s, jobs[n-1].ID), []*berth.Attempt{attempts[n-1]})
	if got := getLogs(t, s, attempts[0].ID, 0, len(out)+1); !bytes.Equal(got, out) {
		t.Errorf("Logs: got %d bytes, want %d", len(got), len(out))
	}
	a := loadActive(t, s)
	if len(a.Jobs) != n || len(a.Attempts) != n || a.Counts[berth.JobRunning] != n {
		t.Errorf("LoadActive: %d jobs, %d attempts, %d running, want %d of each", len(a.Jobs), len(a.Attempts), a.Counts[berth.JobRunning], n)
	}
	sortByID(a.Attempts, func(x *berth.Attempt) string { return x.ID })
	checkEqual(t, "Active.Attempts", a.Attempts, attempts)
	checkEqual(t, "Active.Events", a.Events, events)
	if a.LogSizes[attempts[0].ID] != int64(len(out)) {
		t.Errorf("LogSizes[first] = %d, want %d", a.LogSizes[attempts[0].ID], len(out))
	}

	// Setting the progress of every attempt in one batch.
	progress := make([]store.AttemptProgress, n)
	for i, a := range attempts {
		a.Progress = fmt.Sprintf("step %d/%d", i, n)
		progress[i] = store.AttemptProgress{AttemptID: a.ID, Progress: a.Progress}
	}
	write(t, s, &store.Batch{Progress: progress})
	checkEqual(t, "Attempts(last job) after progress", getAttempts(t, s, jobs[n-1].ID), []*berth.Attempt{attempts[n-1]})
	a = loadActive(t, s)
	sortByID(a.Attempts, func(x *berth.Attempt) string { return x.ID })
	checkEqual(t, "Active.Attempts after progress", a.Attempts, attempts)

	// Updating every job in one batch.
	updates := make([]store.JobUpdate, n)
	for i, j := range jobs {
		updates[i] = store.JobUpdate{ID: j.ID, State: berth.JobSucceeded, ExitCode: intPtr(0), Attempts: 1,
			StartedAt: j.StartedAt, FinishedAt: base.Add(time.Hour + time.Duration(i))}
		apply(j, updates[i])
	}
	write(t, s, &store.Batch{JobUpdates: updates})
	checkEqual(t, "Jobs({}) after updates", listJobs(t, s, store.JobFilter{}), want)
}

func testConcurrent(t *testing.T, s store.Store) {
	const writers, batches, perBatch, readers, reads = 4, 10, 5, 3, 10
	ctx := t.Context()
	var ids idSource
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for range batches {
				b := &store.Batch{}
				for range perBatch {
					b.Jobs = append(b.Jobs, newJob(ids.next(), fmt.Sprint("q", w), "alice", berth.JobPending))
				}
				if err := s.Write(ctx, b); err != nil {
					t.Errorf("Write: %v", err)
					return
				}
			}
		})
	}
	for range readers {
		wg.Go(func() {
			for range reads {
				// Each batch is seen whole or not at all.
				jobs, err := s.Jobs(ctx, store.JobFilter{})
				if err != nil {
					t.Errorf("Jobs: %v", err)
					return
				}
				if len(jobs)%perBatch != 0 {
					t.Errorf("Jobs saw %d jobs, not a whole number of %d-job batches", len(jobs), perBatch)
				}
				a, err := s.LoadActive(ctx, nil)
				if err != nil {
					t.Errorf("LoadActive: %v", err)
					return
				}
				if len(a.Jobs)%perBatch != 0 {
					t.Errorf("LoadActive saw %d jobs, not a whole number of %d-job batches", len(a.Jobs), perBatch)
				}
			}
		})
	}
	wg.Wait()
	jobs := listJobs(t, s, store.JobFilter{})
	if len(jobs) != writers*batches*perBatch {
		t.Fatalf("Jobs has %d jobs, want %d", len(jobs), writers*batches*perBatch)
	}
	for w := range writers {
		if got := listJobs(t, s, store.JobFilter{Queue: fmt.Sprint("q", w)}); len(got) != batches*perBatch {
			t.Errorf("queue q%d has %d jobs, want %d", w, len(got), batches*perBatch)
		}
	}
}

// testAuditHead checks the audit head: none at first, written with the
// batch that sets it, kept by one that does not, and not written by a
// batch that fails before its commit.
func testAuditHead(t *testing.T, s store.Store) {
	ctx := context.Background()
	head := func(want store.AuditHead, when string) {
		t.Helper()
		got, err := s.AuditHead(ctx)
		if err != nil || got != want {
			t.Fatalf("AuditHead %s = %+v, %v; want %+v", when, got, err, want)
		}
	}
	head(store.AuditHead{}, "of an empty store")
	h1 := store.AuditHead{Seq: 5, Hash: strings.Repeat("a", 64)}
	withHead := func(h store.AuditHead) func() (*store.AuditHead, error) {
		return func() (*store.AuditHead, error) { return &h, nil }
	}
	write(t, s, &store.Batch{Jobs: []*berth.Job{newJob("a1", "q", "u", berth.JobPending)}, BeforeCommit: withHead(h1)})
	head(h1, "after a batch set it")
	write(t, s, &store.Batch{Jobs: []*berth.Job{newJob("a2", "q", "u", berth.JobPending)}, BeforeCommit: func() (*store.AuditHead, error) { return nil, nil }})
	head(h1, "after a batch without one")
	h2 := store.AuditHead{Seq: 1 << 40, Hash: strings.Repeat("b", 64)}
	failed := errors.New("the audit append failed")
	err := s.Write(ctx, &store.Batch{Jobs: []*berth.Job{newJob("a3", "q", "u", berth.JobPending)},
		BeforeCommit: func() (*store.AuditHead, error) { return &h2, failed }})
	if !errors.Is(err, failed) {
		t.Fatalf("Write with a failing BeforeCommit = %v", err)
	}
	head(h1, "after a failed batch")
	write(t, s, &store.Batch{Jobs: []*berth.Job{newJob("a3", "q", "u", berth.JobPending)}, BeforeCommit: withHead(h2)})
	head(h2, "after a later batch set it")
}
