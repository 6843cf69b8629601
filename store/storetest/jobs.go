package storetest

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/store"
)

// jobTests check the jobs of store.JobStore: writing, updating and
// reading them back, and listing them.
var jobTests = []test{
	{"JobRoundTrip", testJobRoundTrip},
	{"JobZeroValues", testJobZeroValues},
	{"JobNotFound", testJobNotFound},
	{"JobStates", testJobStates},
	{"JobUpdates", testJobUpdates},
	{"JobUpdatesInBatchOrder", testJobUpdatesInBatchOrder},
	{"UpdateOfMissingJobFailsWholeBatch", testUpdateOfMissingJobFailsWholeBatch},
	{"JobsFilter", testJobsFilter},
	{"JobsPaging", testJobsPaging},
	{"JobsByIdempotencyKey", testJobsByIdempotencyKey},
	{"JobHosts", testJobHosts},
	{"ArraySpecStoredOnce", testArraySpec},
}

// testJobHosts: a job's host is its newest attempt's, a gang's its rank
// 0's with the count of the other members; a job never placed has none.
func testJobHosts(t *testing.T, s store.Store) {
	var ids idSource
	single, gang, waiting := ids.next(), ids.next(), ids.next()
	jobs := []*berth.Job{newJob(single, "gpu", "alice", berth.JobRunning), newJob(gang, "gpu", "alice", berth.JobRunning),
		newJob(waiting, "gpu", "alice", berth.JobPending)}
	at := func(job, host string, task int, state berth.AttemptState) *berth.Attempt {
		a := newAttempt(ids.next(), job, state)
		a.Host, a.TaskIndex = host, task
		return a
	}
	write(t, s, &store.Batch{Jobs: jobs, Attempts: []*berth.Attempt{
		at(single, "old", 0, berth.AttemptFailed), at(single, "new", 0, berth.AttemptRunning),
		at(gang, "g-1", 1, berth.AttemptRunning), at(gang, "g-0", 0, berth.AttemptRunning), at(gang, "g-2", 2, berth.AttemptRunning),
	}})
	got, err := s.JobHosts(context.Background(), []string{single, gang, waiting})
	if err != nil {
		t.Fatal(err)
	}
	checkEqual(t, "JobHosts", got, map[string]string{single: "new", gang: "g-0 +2"})
}

func testJobRoundTrip(t *testing.T, s store.Store) {
	var ids idSource
	full := fullJob(ids.next())
	// A pointer to zero is not nil: an array index 0 and an exit code 0
	// must come back as such.
	zeroPtrs := newJob(ids.next(), "cpu", "bob", berth.JobSucceeded)
	zeroPtrs.ArrayIndex, zeroPtrs.ExitCode = intPtr(0), intPtr(0)
	zeroPtrs.StartedAt, zeroPtrs.FinishedAt = base.Add(1), base.Add(2)
	// A field added to berth.Job must be added to fullJob too, so that
	// this test covers it.
	for name, v := range fields(reflect.ValueOf(*full)) {
		if v.IsZero() && name != "Host" { // derived from attempts (JobHosts), not stored
			t.Errorf("fullJob leaves %s zero: give it a value so that its round trip is checked", name)
		}
	}
	write(t, s, &store.Batch{Jobs: []*berth.Job{cloneJob(full), cloneJob(zeroPtrs)}})

	checkJob(t, s, full)
	checkJob(t, s, zeroPtrs)
	checkEqual(t, "Jobs({})", listJobs(t, s, store.JobFilter{}), []*berth.Job{zeroPtrs, full})
	keyed, err := s.JobsByIdempotencyKey(t.Context(), full.IdempotencyKey)
	if err != nil {
		t.Fatalf("JobsByIdempotencyKey: %v", err)
	}
	checkEqual(t, "JobsByIdempotencyKey", keyed, []*berth.Job{full})

	// Times in another location are stored as the same instant and read
	// back in UTC.
	local := fullJob(ids.next())
	local.IdempotencyKey = ""
	want := cloneJob(local)
	zone := time.FixedZone("UTC+5:30", 5*3600+1800)
	local.CreatedAt, local.StartedAt, local.FinishedAt = local.CreatedAt.In(zone), local.StartedAt.In(zone), local.FinishedAt.In(zone)
	write(t, s, &store.Batch{Jobs: []*berth.Job{local}})
	checkJob(t, s, want)
}

func testJobZeroValues(t *testing.T, s store.Store) {
	var ids idSource
	// Only what the controller always sets; every other field is zero and
	// must stay zero: nil pointers, zero times, empty strings.
	j := &berth.Job{ID: ids.next(), JobSpec: berth.JobSpec{Queue: "default"}, State: berth.JobPending, CreatedAt: base}
	write(t, s, &store.Batch{Jobs: []*berth.Job{cloneJob(j)}})
	got := getJob(t, s, j.ID)
	checkEqual(t, "Job", got, j)
	if !got.StartedAt.IsZero() || !got.FinishedAt.IsZero() {
		t.Errorf("zero times came back as %v, %v", got.StartedAt, got.FinishedAt)
	}
	if got.ExitCode != nil || got.ArrayIndex != nil {
		t.Errorf("nil pointers came back as exit code %v, array index %v", got.ExitCode, got.ArrayIndex)
	}
}

func testJobNotFound(t *testing.T, s store.Store) {
	var ids idSource
	checkNotFound(t, s, ids.next())
	j := newJob(ids.next(), "gpu", "alice", berth.JobPending)
	write(t, s, &store.Batch{Jobs: []*berth.Job{j}})
	checkNotFound(t, s, ids.next())
	checkNotFound(t, s, "")
	checkNotFound(t, s, j.ID[:len(j.ID)-1])
	checkJob(t, s, j)
}

func testJobStates(t *testing.T, s store.Store) {
	var ids idSource
	states := []berth.JobState{berth.JobPending, berth.JobRunning, berth.JobSucceeded, berth.JobFailed, berth.JobCancelled}
	want := map[string]berth.JobState{}
	var jobs []*berth.Job
	var ask []string
	for i := 0; i < 1203; i++ { // more than one IN list's worth
		j := newJob(ids.next(), "gpu", "alice", states[i%len(states)])
		jobs = append(jobs, j)
		want[j.ID] = j.State
		ask = append(ask, j.ID)
	}
	write(t, s, &store.Batch{Jobs: jobs})
	missing := ids.next()
	ask = append(ask, missing)
	got, err := s.JobStates(context.Background(), ask)
	if err != nil {
		t.Fatalf("JobStates: %v", err)
	}
	if len(got) != len(want) {
		t.Fatalf("JobStates returned %d states, want %d", len(got), len(want))
	}
	for id, st := range want {
		if got[id] != st {
			t.Fatalf("JobStates[%s] = %q, want %q", id, got[id], st)
		}
	}
	if _, ok := got[missing]; ok {
		t.Fatal("JobStates has an entry for an unknown id")
	}
	if got, err := s.JobStates(context.Background(), nil); err != nil || len(got) != 0 {
		t.Fatalf("JobStates(nil) = %v, %v; want empty", got, err)
	}
}

func testJobUpdates(t *testing.T, s store.Store) {
	var ids idSource
	j := fullJob(ids.next())
	j.State, j.Reason, j.ExitCode, j.Attempts, j.StartedAt, j.FinishedAt = berth.JobPending, "waiting for 4 GPUs", nil, 0, time.Time{}, time.Time{}
	other := newJob(ids.next(), "gpu", "bob", berth.JobPending)
	write(t, s, &store.Batch{Jobs: []*berth.Job{cloneJob(j), cloneJob(other)}})
	want := cloneJob(j)

	updates := []store.JobUpdate{
		{ID: j.ID, State: berth.JobRunning, Attempts: 1, StartedAt: base.Add(2*time.Second + 3)},
		{ID: j.ID, State: berth.JobFailed, Reason: "exit status 137", ExitCode: intPtr(137), Attempts: 1,
			StartedAt: base.Add(2*time.Second + 3), FinishedAt: base.Add(time.Hour + 5)},
		// A retry: back to pending with no exit code and no times.
		{ID: j.ID, State: berth.JobPending, Reason: "retrying (1 of 3)", Attempts: 1},
		{ID: j.ID, State: berth.JobSucceeded, ExitCode: intPtr(0), Attempts: 2,
			StartedAt: base.Add(3 * time.Hour), FinishedAt: base.Add(4*time.Hour + 1)},
	}
	for i, u := range updates {
		write(t, s, &store.Batch{JobUpdates: []store.JobUpdate{u}})
		apply(want, u)
		checkEqual(t, fmt.Sprintf("Job after update %d", i), getJob(t, s, j.ID), want)
	}
	checkJob(t, s, other)
}

func testJobUpdatesInBatchOrder(t *testing.T, s store.Store) {
	var ids idSource
	// New jobs are written before the updates of the same batch, and a
	// later update of the same job wins.
	j := newJob(ids.next(), "gpu", "alice", berth.JobPending)
	want := cloneJob(j)
	u1 := store.JobUpdate{ID: j.ID, State: berth.JobRunning, Attempts: 1, StartedAt: base.Add(1)}
	u2 := store.JobUpdate{ID: j.ID, State: berth.JobCancelled, Reason: "cancelled by alice", Attempts: 1,
		StartedAt: base.Add(1), FinishedAt: base.Add(2)}
	write(t, s, &store.Batch{Jobs: []*berth.Job{cloneJob(j)}, JobUpdates: []store.JobUpdate{u1, u2}})
	apply(want, u2)
	checkJob(t, s, want)

	// Likewise for a job written before.
	u3 := store.JobUpdate{ID: j.ID, State: berth.JobRunning, Attempts: 2, StartedAt: base.Add(3)}
	u4 := store.JobUpdate{ID: j.ID, State: berth.JobSucceeded, ExitCode: intPtr(0), Attempts: 2,
		StartedAt: base.Add(3), FinishedAt: base.Add(4)}
	write(t, s, &store.Batch{JobUpdates: []store.JobUpdate{u3, u4}})
	apply(want, u4)
	checkJob(t, s, want)
}

func testUpdateOfMissingJobFailsWholeBatch(t *testing.T, s store.Store) {
	ctx := t.Context()
	var ids idSource
	old := newJob(ids.next(), "gpu", "alice", berth.JobPending)
	oldAttempt := newAttempt(ids.next(), old.ID, berth.AttemptAssigned)
	oldWorker := &berth.Worker{ID: ids.next(), Host: "h1", State: berth.WorkerReady, Slots: 1}
	oldQuota := quotaRule("user", "alice", 4, berth.NoLimit, 2, 0)
	write(t, s, &store.Batch{Jobs: []*berth.Job{cloneJob(old)}, Attempts: []*berth.Attempt{oldAttempt},
		Workers: []*berth.Worker{oldWorker}, Quotas: []*berth.QuotaRule{oldQuota},
		Logs: []store.LogChunk{{AttemptID: oldAttempt.ID, Data: []byte("one\n")}}, Events: newEvents(1, 1)})

	var fresh []*berth.Job
	for range 130 { // more than one multi-row insert
		fresh = append(fresh, newJob(ids.next(), "gpu", "bob", berth.JobPending))
	}
	missing := ids.next()
	newAttemptID := ids.next()
	changedAttempt := *oldAttempt
	changedAttempt.State = berth.AttemptRunning
	changedWorker := *oldWorker
	changedWorker.State = berth.WorkerBusy
	bad := &store.Batch{
		Jobs: fresh,
		JobUpdates: []store.JobUpdate{
			{ID: old.ID, State: berth.JobRunning, Attempts: 1, StartedAt: base.Add(1)},
			{ID: fresh[0].ID, State: berth.JobRunning, Attempts: 1, StartedAt: base.Add(1)},
			{ID: missing, State: berth.JobRunning, Attempts: 1, StartedAt: base.Add(1)},
		},
		Attempts: []*berth.Attempt{&changedAttempt, newAttempt(newAttemptID, fresh[0].ID, berth.AttemptAssigned)},
		Workers:  []*berth.Worker{&changedWorker, {ID: ids.next(), Host: "h2", State: berth.WorkerReady}},
		Quotas:   []*berth.QuotaRule{quotaRule("user", "bob", 1, 1, 0, 1), quotaRule("queue", "gpu", 0, berth.NoLimit, 0, 2)},
		// A delete of the rule written before.
		QuotaDeletes: []string{oldQuota.ID()},
		Logs:         []store.LogChunk{{AttemptID: oldAttempt.ID, Offset: 4, Data: []byte("two\n")}},
		Events:       newEvents(2, 130),
	}
	if err := s.Write(ctx, bad); err == nil {
		t.Fatalf("Write with an update of missing job %s succeeded, want an error", missing)
	}

	// Nothing of the failed batch is stored.
	for _, j := range fresh {
		checkNotFound(t, s, j.ID)
	}
	checkNotFound(t, s, missing)
	checkJob(t, s, old)
	checkEqual(t, "Attempts(old)", getAttempts(t, s, old.ID), []*berth.Attempt{oldAttempt})
	if as := getAttempts(t, s, fresh[0].ID); len(as) != 0 {
		t.Errorf("Attempts of a job of the failed batch = %s, want none", dump(as))
	}
	checkEqual(t, "Workers", getWorkers(t, s), []*berth.Worker{oldWorker})
	checkEqual(t, "Quotas", getQuotas(t, s), []*berth.QuotaRule{oldQuota})
	if got := getLogs(t, s, oldAttempt.ID, 0, 100); string(got) != "one\n" {
		t.Errorf("Logs = %q, want %q", got, "one\n")
	}
	if got := listJobs(t, s, store.JobFilter{}); len(got) != 1 {
		t.Errorf("Jobs({}) has %d jobs after the failed batch, want 1", len(got))
	}
	a := loadActive(t, s)
	if a.Counts[berth.JobPending] != 1 || a.Counts[berth.JobRunning] != 0 {
		t.Errorf("Counts = %v, want 1 pending", a.Counts)
	}
	checkEqual(t, "Active.Events", a.Events, newEvents(1, 1))

	// The store still takes writes, the failed batch's seqs too.
	write(t, s, &store.Batch{Jobs: fresh[:1], Events: newEvents(2, 1)})
	checkJob(t, s, fresh[0])
	checkEqual(t, "Active.Events after the next batch", loadActive(t, s).Events, newEvents(1, 2))
}

// filterJobs is what Jobs(f) must return from jobs, given oldest first.
func filterJobs(jobs []*berth.Job, f store.JobFilter) []string {
	var out []string
	for i := len(jobs) - 1; i >= 0; i-- {
		j := jobs[i]
		if len(f.States) > 0 && !slices.Contains(f.States, j.State) ||
			f.Queue != "" && j.Queue != f.Queue ||
			f.User != "" && j.User != f.User ||
			f.Parent != "" && j.Parent != f.Parent ||
			f.Name != "" && j.Name != f.Name ||
			f.Before != "" && j.ID >= f.Before {
			continue
		}
		if f.Limit > 0 && len(out) == f.Limit {
			break
		}
		out = append(out, j.ID)
	}
	return out
}

// listingJobs writes n jobs spread over queues, users and states, every
// seventh after the first a child of the first, in an order other than
// their ids', and returns them oldest first.
func listingJobs(t *testing.T, s store.Store, n int) []*berth.Job {
	t.Helper()
	var ids idSource
	queues, users := []string{"gpu", "cpu", "tpu"}, []string{"alice", "bob"}
	jobs := make([]*berth.Job, n)
	for i := range jobs {
		jobs[i] = newJob(ids.next(), queues[i%3], users[i/3%2], allJobStates[i%5])
		if i > 0 && i%7 == 0 {
			jobs[i].Parent = jobs[0].ID
		}
		if i%4 == 0 {
			jobs[i].Name = "sweep"
		}
	}
	var odd, even []*berth.Job
	for i, j := range jobs {
		if i%2 == 1 {
			odd = append(odd, j)
		} else {
			even = append([]*berth.Job{j}, even...)
		}
	}
	write(t, s, &store.Batch{Jobs: odd})
	write(t, s, &store.Batch{Jobs: even})
	return jobs
}

func testJobsFilter(t *testing.T, s store.Store) {
	if got := listJobs(t, s, store.JobFilter{}); len(got) != 0 {
		t.Errorf("Jobs of an empty store = %s, want none", dump(got))
	}
	jobs := listingJobs(t, s, 40)
	id := func(i int) string { return jobs[i].ID }
	filters := []store.JobFilter{
		{},
		{States: []berth.JobState{berth.JobPending}},
		{States: []berth.JobState{berth.JobRunning, berth.JobFailed}},
		{States: allJobStates},
		{Queue: "gpu"},
		{Queue: "none"},
		{User: "bob"},
		{User: "carol"},
		{Queue: "cpu", User: "alice", States: []berth.JobState{berth.JobPending, berth.JobSucceeded, berth.JobCancelled}},
		{Before: id(20)},
		{Before: id(0)},
		{Before: strings.Repeat("Z", len(id(0)))},
		{Limit: 1},
		{Limit: 5},
		{Limit: 40},
		{Limit: 100},
		{States: []berth.JobState{berth.JobCancelled}, Limit: 3},
		{Queue: "gpu", Before: id(30), Limit: 4},
		{Queue: "tpu", User: "bob", States: []berth.JobState{berth.JobRunning}, Before: id(39), Limit: 2},
		{Parent: id(0)},
		{Parent: id(1)},
		{Parent: id(0), Queue: "cpu", Limit: 2},
		{Name: "sweep"},
		{Name: "sweep", Queue: "gpu", Limit: 2},
		{Name: "none"},
	}
	for _, f := range filters {
		checkIDs(t, fmt.Sprintf("Jobs(%+v)", f), listJobs(t, s, f), filterJobs(jobs, f))
	}
	// Listings return whole jobs.
	want := slices.Clone(jobs)
	slices.Reverse(want)
	checkEqual(t, "Jobs({})", listJobs(t, s, store.JobFilter{}), want)
}

func testJobsPaging(t *testing.T, s store.Store) {
	jobs := listingJobs(t, s, 41)
	for _, f := range []store.JobFilter{{}, {Queue: "gpu"}, {States: []berth.JobState{berth.JobRunning, berth.JobSucceeded}}} {
		want := filterJobs(jobs, f)
		for _, limit := range []int{1, 2, 7, len(want), len(want) + 1} {
			f := f
			f.Limit = limit
			var got []string
			for page := 0; ; page++ {
				if page > len(jobs)+1 {
					t.Fatalf("paging %+v did not end", f)
				}
				list := listJobs(t, s, f)
				if len(list) > limit {
					t.Fatalf("page of %+v has %d jobs, more than the limit", f, len(list))
				}
				got = append(got, jobIDs(list)...)
				if len(list) < limit {
					break
				}
				f.Before = list[len(list)-1].ID
			}
			if !slices.Equal(got, want) {
				t.Errorf("paging %+v by %d: got %v, want each job once, newest first: %v", f, limit, got, want)
			}
		}
	}
}

func testJobsByIdempotencyKey(t *testing.T, s store.Store) {
	ctx := t.Context()
	var ids idSource
	keyed := func(key string) *berth.Job {
		j := newJob(ids.next(), "gpu", "alice", berth.JobPending)
		j.IdempotencyKey = key
		return j
	}
	k1 := []*berth.Job{keyed("sub-1"), keyed("sub-1"), keyed("sub-1")}
	k10 := keyed("sub-10")
	none1, none2 := keyed(""), keyed("")
	// Written out of id order and across batches.
	write(t, s, &store.Batch{Jobs: []*berth.Job{k1[2], none1}})
	write(t, s, &store.Batch{Jobs: []*berth.Job{k10, k1[1], none2, k1[0]}})

	for _, c := range []struct {
		key  string
		want []*berth.Job
	}{
		{"sub-1", k1},
		{"sub-10", []*berth.Job{k10}},
		{"sub-", nil},
		{"SUB-1", nil},
		{"sub-2", nil},
		{"", nil}, // jobs submitted without a key belong to no submission
	} {
		got, err := s.JobsByIdempotencyKey(ctx, c.key)
		if err != nil {
			t.Errorf("JobsByIdempotencyKey(%q): %v", c.key, err)
			continue
		}
		if len(c.want) == 0 {
			if len(got) != 0 {
				t.Errorf("JobsByIdempotencyKey(%q) = %v, want none", c.key, jobIDs(got))
			}
			continue
		}
		checkEqual(t, fmt.Sprintf("JobsByIdempotencyKey(%q)", c.key), got, c.want)
	}
}
