// Package storetest is the conformance suite for store.Store drivers. Every
// driver (sqlite, postgres) runs the same checks of the contract documented
// on store.Store from its own tests:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) store.Store { return openEmpty(t) })
//	}
//
//	func TestDurable(t *testing.T) {
//		storetest.RunDurable(t, func(t *testing.T, path string) store.Store { return openAt(t, path) },
//			func(t *testing.T, path string) (oldest, newest uint64) { return storedSeqs(t, path) })
//	}
//
// The suite is an ordinary (non-test) package so that drivers in other
// packages can import it; it only calls the store through store.Store.
package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"math"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/store"
)

// base is the time the suite's objects are created at. Its nanoseconds
// check that drivers keep full precision.
var base = time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.UTC)

// allJobStates and allAttemptStates list every state, in lifecycle order.
var (
	allJobStates     = []berth.JobState{berth.JobPending, berth.JobRunning, berth.JobSucceeded, berth.JobFailed, berth.JobCancelled}
	allAttemptStates = []berth.AttemptState{berth.AttemptAssigned, berth.AttemptRunning, berth.AttemptSucceeded,
		berth.AttemptFailed, berth.AttemptCancelled, berth.AttemptLost, berth.AttemptPreempted, berth.AttemptStopped}
)

// Run runs the conformance suite as parallel subtests of t. open is called
// once per subtest with that subtest's t and must return a new, empty store,
// failing the test itself (t.Fatal) when it cannot. The suite closes every
// store open returns, and fails the subtest if Close returns an error, so
// open must not close it.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"JobRoundTrip", testJobRoundTrip},
		{"JobZeroValues", testJobZeroValues},
		{"JobNotFound", testJobNotFound},
		{"JobStates", testJobStates},
		{"JobUpdates", testJobUpdates},
		{"JobUpdatesInBatchOrder", testJobUpdatesInBatchOrder},
		{"UpdateOfMissingJobFailsWholeBatch", testUpdateOfMissingJobFailsWholeBatch},
		{"Attempts", testAttempts},
		{"AttemptUpsertsLastWins", testAttemptUpsertsLastWins},
		{"Workers", testWorkers},
		{"Quotas", testQuotas},
		{"QuotaWritesInBatchOrder", testQuotaWritesInBatchOrder},
		{"WorkerControls", testWorkerControls},
		{"WorkerControlUpsertsLastWins", testWorkerControlUpsertsLastWins},
		{"AttemptProgress", testAttemptProgress},
		{"AttemptProgressInBatchOrder", testAttemptProgressInBatchOrder},
		{"Logs", testLogs},
		{"LogsBinary", testLogsBinary},
		{"Events", testEvents},
		{"JobsFilter", testJobsFilter},
		{"JobsPaging", testJobsPaging},
		{"JobsByIdempotencyKey", testJobsByIdempotencyKey},
		{"LoadActiveEmpty", testLoadActiveEmpty},
		{"LoadActive", testLoadActive},
		{"ConcurrentWritesAndReads", testConcurrent},
		{"Tokens", testTokens},
		{"Secrets", testSecrets},
		{"SwapLock", testSwapLock},
		{"Schedules", testSchedules},
		{"Webhooks", testWebhooks},
		{"Deliveries", testDeliveries},
		{"ScheduleRuns", testScheduleRuns},
	}
	for _, n := range []int{1, 127, 128, 129, 300, 1000} {
		tests = append(tests, struct {
			name string
			fn   func(t *testing.T, s store.Store)
		}{fmt.Sprintf("BatchOf%d", n), func(t *testing.T, s store.Store) { testBatchOf(t, s, n) }})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, openStore(t, open))
		})
	}
}

// RunDurable checks, as parallel subtests of t, that a store keeps every
// acknowledged write across Close and a reopen, and that it keeps the
// newest store.KeptEvents events and deletes older ones. Each subtest
// calls open several times with one path: the first open must return an
// empty store, and each later one a store holding everything written
// before the previous Close. path is a file name in a fresh temporary
// directory of the subtest; a driver that keeps no files (PostgreSQL)
// should map it to a database or schema of its own, the same one for the
// same path. The suite closes every store open returns; open must not.
// storedEvents reads, outside the store, the lowest and highest seq in the
// events table of the store at path, 0 when it is empty (LoadActive
// returns at most store.KeptEvents, so only this shows that old events
// are deleted). It fails t itself when it cannot.
func RunDurable(t *testing.T, open func(t *testing.T, path string) store.Store,
	storedEvents func(t *testing.T, path string) (oldest, newest uint64)) {
	t.Helper()
	t.Run("ReopenKeepsEverything", func(t *testing.T) {
		t.Parallel()
		testReopen(t, reopener(t, open))
	})
	t.Run("KeepsNewestEvents", func(t *testing.T) {
		t.Parallel()
		testKeptEvents(t, reopener(t, open), storedEvents)
	})
}

// openStore opens a store with open and closes it when t ends.
func openStore(t *testing.T, open func(t *testing.T) store.Store) store.Store {
	t.Helper()
	s := open(t)
	if s == nil {
		t.Fatal("open returned a nil store")
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// idSource makes ids that sort in the order they are made.
type idSource struct{ gen berth.IDGen }

func (g *idSource) next() string { return g.gen.New(base) }

func intPtr(n int) *int { return &n }

// fullJob returns a job with every field set to a value that is not its
// zero value.
func fullJob(id string) *berth.Job {
	return &berth.Job{
		ID: id,
		JobSpec: berth.JobSpec{
			Name:     "train-llama.v2_7b",
			Model:    "meta-llama/Llama-3.1-8B",
			User:     "alice",
			Queue:    "gpu",
			Kind:     berth.KindService,
			Priority: 737,
			Nodes:    2,
			Resources: berth.Resources{GPUs: 4, GPUMemory: 80 << 30, GPUType: "H100", CPUs: 12.25,
				Memory: 3<<40 + 17},
			Constraints:    berth.Constraints{Host: "node-7", Labels: map[string]string{"zone": "eu-1", "ib": "true"}},
			Command:        berth.Argv{"python", "-c", "print('héllo, \"world\"')\n", "", "a b\tc"},
			Env:            map[string]string{"A": "1", "EMPTY": "", "UNICODE": "ünï ☃", "QUOTE": `'"\`},
			Workdir:        "/srv/job dir",
			Template:       "llm",
			Vars:           map[string]string{"model": "7b"},
			MaxRuntime:     berth.Duration(90*time.Minute + 1),
			StallTimeout:   berth.Duration(5*time.Minute + time.Millisecond),
			Retries:        3,
			Preemptible:    true,
			IdempotencyKey: "key-" + id,
			Parent:         "01JPARENT0000000000000000",
			Backend:        "k8s",
			Cluster:        "peer-1",
		},
		ArrayIndex: intPtr(7),
		State:      berth.JobFailed,
		Reason:     "exit status 247: out of memory",
		ExitCode:   intPtr(-9),
		Attempts:   3,
		CreatedAt:  base,
		StartedAt:  base.Add(1500*time.Millisecond + 1),
		FinishedAt: base.Add(time.Hour + 999_999_999),
	}
}

// newJob returns a pending job with the fields listings filter on.
func newJob(id, queue, user string, state berth.JobState) *berth.Job {
	return &berth.Job{
		ID:        id,
		JobSpec:   berth.JobSpec{Name: "job", User: user, Queue: queue, Kind: berth.KindBatch, Priority: 100, Nodes: 1, Command: berth.Argv{"true"}},
		State:     state,
		CreatedAt: base,
	}
}

func newAttempt(id, jobID string, state berth.AttemptState) *berth.Attempt {
	return &berth.Attempt{ID: id, JobID: jobID, WorkerID: "w-" + id, Host: "host-1", GPUs: []int{0}, State: state,
		CreatedAt: base.Add(time.Second)}
}

func cloneJob(j *berth.Job) *berth.Job {
	c := *j
	return &c
}

// apply sets the fields u updates on j, as Write must.
func apply(j *berth.Job, u store.JobUpdate) {
	j.State, j.Reason, j.ExitCode, j.Attempts, j.StartedAt, j.FinishedAt =
		u.State, u.Reason, u.ExitCode, u.Attempts, u.StartedAt, u.FinishedAt
}

func write(t *testing.T, s store.Store, b *store.Batch) {
	t.Helper()
	if err := s.Write(t.Context(), b); err != nil {
		t.Fatalf("Write: %v", err)
	}
}

func getJob(t *testing.T, s store.Store, id string) *berth.Job {
	t.Helper()
	j, err := s.Job(t.Context(), id)
	if err != nil {
		t.Fatalf("Job(%s): %v", id, err)
	}
	return j
}

func checkJob(t *testing.T, s store.Store, want *berth.Job) {
	t.Helper()
	checkEqual(t, "Job("+want.ID+")", getJob(t, s, want.ID), want)
}

func checkNotFound(t *testing.T, s store.Store, id string) {
	t.Helper()
	j, err := s.Job(t.Context(), id)
	if err == nil {
		t.Errorf("Job(%s) = %s, want a not_found error", id, dump(j))
		return
	}
	if code := berth.ErrorCode(err); code != berth.ECodeNotFound {
		t.Errorf("Job(%s): error %q has code %q, want %q", id, err, code, berth.ECodeNotFound)
	}
}

func getAttempts(t *testing.T, s store.Store, jobID string) []*berth.Attempt {
	t.Helper()
	as, err := s.Attempts(t.Context(), jobID)
	if err != nil {
		t.Fatalf("Attempts(%s): %v", jobID, err)
	}
	return as
}

func getWorkers(t *testing.T, s store.Store) []*berth.Worker {
	t.Helper()
	ws, err := s.Workers(t.Context())
	if err != nil {
		t.Fatalf("Workers: %v", err)
	}
	return ws
}

func getQuotas(t *testing.T, s store.Store) []*berth.QuotaRule {
	t.Helper()
	qs, err := s.Quotas(t.Context())
	if err != nil {
		t.Fatalf("Quotas: %v", err)
	}
	return qs
}

// quotaRule returns a rule with the given caps, updated at base plus n
// nanoseconds.
func quotaRule(scope, name string, gpus, jobs int, weight float64, n int) *berth.QuotaRule {
	return &berth.QuotaRule{Scope: scope, Name: name, MaxGPUs: gpus, MaxJobs: jobs, Weight: weight,
		UpdatedAt: base.Add(time.Duration(n))}
}

func getControls(t *testing.T, s store.Store) []*berth.WorkerControl {
	t.Helper()
	cs, err := s.WorkerControls(t.Context())
	if err != nil {
		t.Fatalf("WorkerControls: %v", err)
	}
	return cs
}

// control returns a control of queue on host, updated at base plus n
// nanoseconds.
func control(host, queue, desired, policy, by string, n int) *berth.WorkerControl {
	return &berth.WorkerControl{Host: host, Queue: queue, DesiredState: desired, StopPolicy: policy, RequestedBy: by,
		UpdatedAt: base.Add(time.Duration(n))}
}

// fullEvent returns event seq with every field set to a value that is not
// its zero value.
func fullEvent(seq uint64) *berth.Event {
	return &berth.Event{Seq: seq, Time: base.Add(time.Duration(seq)), Type: "job.requeued", JobID: "01JPJOB0000000000000000000",
		State: berth.JobRunning, WorkerID: "w-7", Host: "gpu-1", Reason: "lost: \"heartbeat\" ünï ☃ \\ nul\x00 <&>",
		Quota: "user:alice", Limits: "gpus<=8 jobs<=4", Actor: "ops", User: "alice", Requested: 4, Limit: 8, Queue: "gpu",
		Desired: berth.DesiredOff, Policy: berth.StopDrain, Attempts: []string{"a1", "a2"}, ExitCode: new(3)}
}

// newEvents returns n events of jobs, numbered from first.
func newEvents(first uint64, n int) []*berth.Event {
	events := make([]*berth.Event, n)
	for i := range events {
		seq := first + uint64(i)
		events[i] = &berth.Event{Seq: seq, Time: base.Add(time.Duration(seq)), Type: "job.succeeded",
			JobID: fmt.Sprintf("job-%d", seq), State: berth.JobSucceeded}
	}
	return events
}

func getLogs(t *testing.T, s store.Store, attemptID string, offset int64, limit int) []byte {
	t.Helper()
	data, err := s.Logs(t.Context(), attemptID, offset, limit)
	if err != nil {
		t.Fatalf("Logs(%s, %d, %d): %v", attemptID, offset, limit, err)
	}
	return data
}

func listJobs(t *testing.T, s store.Store, f store.JobFilter) []*berth.Job {
	t.Helper()
	jobs, err := s.Jobs(t.Context(), f)
	if err != nil {
		t.Fatalf("Jobs(%+v): %v", f, err)
	}
	return jobs
}

func loadActive(t *testing.T, s store.Store) *store.Active {
	t.Helper()
	a, err := s.LoadActive(t.Context())
	if err != nil {
		t.Fatalf("LoadActive: %v", err)
	}
	if a == nil {
		t.Fatal("LoadActive returned nil and no error")
	}
	return a
}

// checkEqual fails t unless got and want are deeply equal. Times must be in
// UTC (a time.Time in another location, or with a monotonic reading, is not
// equal to its UTC value) and nil pointers must stay nil.
func checkEqual(t *testing.T, what string, got, want any) {
	t.Helper()
	if reflect.DeepEqual(got, want) {
		return
	}
	g, w := dump(got), dump(want)
	note := ""
	if g == w {
		note = "\n(same JSON: they differ in a time's location or monotonic reading, or nil versus empty)"
	}
	t.Errorf("%s:\n got %s\nwant %s%s", what, g, w, note)
}

func dump(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%#v", v)
	}
	return string(b)
}

func jobIDs(jobs []*berth.Job) []string {
	ids := make([]string, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	return ids
}

func checkIDs(t *testing.T, what string, got []*berth.Job, want []string) {
	t.Helper()
	if g := jobIDs(got); !slices.Equal(g, want) {
		t.Errorf("%s: got ids %v, want %v", what, g, want)
	}
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
		if v.IsZero() {
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

// fields yields every field of struct v by name, descending into embedded
// and nested structs other than time.Time.
func fields(v reflect.Value) iter.Seq2[string, reflect.Value] {
	return func(yield func(string, reflect.Value) bool) {
		for i := range v.NumField() {
			f, name := v.Field(i), v.Type().Field(i).Name
			if f.Kind() == reflect.Struct && f.Type() != reflect.TypeFor[time.Time]() {
				for sub, sv := range fields(f) {
					if !yield(name+"."+sub, sv) {
						return
					}
				}
				continue
			}
			if !yield(name, f) {
				return
			}
		}
	}
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

func testWorkers(t *testing.T, s store.Store) {
	var ids idSource
	if ws := getWorkers(t, s); len(ws) != 0 {
		t.Errorf("Workers of an empty store = %s, want none", dump(ws))
	}
	w1 := &berth.Worker{
		ID: ids.next(), Host: "gpu-1", Queues: []string{"gpu", "cpu"},
		GPUs: []berth.GPU{
			{Index: 0, UUID: "GPU-6b5c2f1e-0000", Model: "NVIDIA H100 80GB HBM3", Memory: 80 << 30},
			{Index: 1, UUID: "GPU-6b5c2f1e-0001", Model: "NVIDIA H100 80GB HBM3", Memory: 80<<30 + 1},
		},
		CPUs: 63.5, Memory: 512 << 30, Slots: 8, Labels: map[string]string{"zone": "a", "rack": "7"},
		Version: "v1.2.3", State: berth.WorkerReady, Running: 2,
		LastHeartbeat: base.Add(7), RegisteredAt: base,
	}
	w2 := &berth.Worker{ID: ids.next(), Host: "cpu-1", State: berth.WorkerLost}
	// Written out of id order: Workers returns them by id.
	write(t, s, &store.Batch{Workers: []*berth.Worker{w2, w1}})
	checkEqual(t, "Workers", getWorkers(t, s), []*berth.Worker{w1, w2})

	busy := *w1
	busy.State, busy.Running, busy.LastHeartbeat = berth.WorkerBusy, 8, base.Add(time.Minute+9)
	busy.GPUs = busy.GPUs[:1]
	busy.Labels = map[string]string{"zone": "b"}
	write(t, s, &store.Batch{Workers: []*berth.Worker{&busy}})
	checkEqual(t, "Workers after update", getWorkers(t, s), []*berth.Worker{&busy, w2})

	// A later upsert of the same id in one batch wins.
	back := *w2
	back.State, back.LastHeartbeat = berth.WorkerReady, base.Add(time.Hour)
	parked := back
	parked.State = berth.WorkerParked
	w3 := &berth.Worker{ID: ids.next(), Host: "cpu-2", State: berth.WorkerReady, RegisteredAt: base.Add(3)}
	write(t, s, &store.Batch{Workers: []*berth.Worker{&back, w3, &parked}})
	checkEqual(t, "Workers after batch", getWorkers(t, s), []*berth.Worker{&busy, &parked, w3})
}

func testQuotas(t *testing.T, s store.Store) {
	if qs := getQuotas(t, s); len(qs) != 0 {
		t.Errorf("Quotas of an empty store = %s, want none", dump(qs))
	}
	// Every field, full time precision, fractional weights, NoLimit and 0.
	alice := quotaRule("user", "alice", 8, berth.NoLimit, 2.625, 1)
	gpu := quotaRule("queue", "gpu", 0, 0, 0, 2)
	tmpl := quotaRule("template", "jupyter.v2", berth.NoLimit, 3, 0, 3)
	bob := quotaRule("user", "bob@example.org", berth.MaxQuotaValue, berth.MaxQuotaValue, 1000, 4)
	// Written out of id order: Quotas returns them by id.
	write(t, s, &store.Batch{Quotas: []*berth.QuotaRule{tmpl, bob, gpu, alice}})
	checkEqual(t, "Quotas", getQuotas(t, s), []*berth.QuotaRule{gpu, tmpl, alice, bob})

	// An upsert of the same id replaces every field.
	aliceLater := quotaRule("user", "alice", berth.NoLimit, 4, 0, 5)
	// A time in another location is stored as the same instant, read in UTC.
	in := *aliceLater
	in.UpdatedAt = in.UpdatedAt.In(time.FixedZone("UTC-7", -7*3600))
	write(t, s, &store.Batch{Quotas: []*berth.QuotaRule{&in}})
	checkEqual(t, "Quotas after update", getQuotas(t, s), []*berth.QuotaRule{gpu, tmpl, aliceLater, bob})

	// Deletes: a known id goes, an unknown one is no error and changes
	// nothing, in a batch with other writes too.
	var ids idSource
	job := newJob(ids.next(), "gpu", "alice", berth.JobPending)
	write(t, s, &store.Batch{Jobs: []*berth.Job{job}, QuotaDeletes: []string{tmpl.ID(), "user:nobody"}})
	checkEqual(t, "Quotas after delete", getQuotas(t, s), []*berth.QuotaRule{gpu, aliceLater, bob})
	checkJob(t, s, job)
	write(t, s, &store.Batch{QuotaDeletes: []string{tmpl.ID(), "queue:none", ""}})
	checkEqual(t, "Quotas after deletes of unknown ids", getQuotas(t, s), []*berth.QuotaRule{gpu, aliceLater, bob})

	// A deleted rule can be written again.
	tmplAgain := quotaRule("template", "jupyter.v2", 1, berth.NoLimit, 0, 6)
	write(t, s, &store.Batch{Quotas: []*berth.QuotaRule{tmplAgain}})
	checkEqual(t, "Quotas after rewrite", getQuotas(t, s), []*berth.QuotaRule{gpu, tmplAgain, aliceLater, bob})
	checkEqual(t, "Active.Quotas", loadActive(t, s).Quotas, []*berth.QuotaRule{gpu, tmplAgain, aliceLater, bob})
}

func testQuotaWritesInBatchOrder(t *testing.T, s store.Store) {
	a1, a2 := quotaRule("user", "alice", 1, berth.NoLimit, 0, 1), quotaRule("user", "alice", 2, berth.NoLimit, 0, 2)
	b1 := quotaRule("user", "bob", 1, berth.NoLimit, 0, 1)
	c1, c2 := quotaRule("queue", "cpu", berth.NoLimit, 1, 0, 1), quotaRule("queue", "cpu", berth.NoLimit, 2, 0, 2)
	write(t, s, &store.Batch{Quotas: []*berth.QuotaRule{b1, c1}})

	// In one batch a later upsert of the same id wins, and deletes apply
	// after upserts: a rule both upserted and deleted is gone.
	write(t, s, &store.Batch{Quotas: []*berth.QuotaRule{a1, b1, a2}, QuotaDeletes: []string{b1.ID()}})
	checkEqual(t, "Quotas after upserts and a delete", getQuotas(t, s), []*berth.QuotaRule{c1, a2})

	// Batches merged with Append keep the order of each rule's writes:
	// upsert then delete deletes, delete then upsert keeps the upsert, and
	// the last of several wins.
	merged := &store.Batch{}
	for _, w := range []*store.Batch{
		{Quotas: []*berth.QuotaRule{b1}}, {QuotaDeletes: []string{b1.ID()}}, // new, then deleted
		{QuotaDeletes: []string{c1.ID()}}, {Quotas: []*berth.QuotaRule{c2}}, // stored, deleted, then upserted
		// stored, deleted, upserted, deleted, upserted again: a2 wins
		{QuotaDeletes: []string{a1.ID()}}, {Quotas: []*berth.QuotaRule{a1}},
		{QuotaDeletes: []string{a1.ID()}}, {Quotas: []*berth.QuotaRule{a2}},
		{QuotaDeletes: []string{"user:none"}}, // unknown: no effect
	} {
		merged.Append(w)
	}
	write(t, s, merged)
	checkEqual(t, "Quotas after merged batches", getQuotas(t, s), []*berth.QuotaRule{c2, a2})

	// The same through Compact, as the committer writes them.
	merged = &store.Batch{}
	merged.Append(&store.Batch{QuotaDeletes: []string{a2.ID()}})
	merged.Append(&store.Batch{Quotas: []*berth.QuotaRule{b1}})
	merged.Append(&store.Batch{Quotas: []*berth.QuotaRule{a1}})
	merged.Append(&store.Batch{QuotaDeletes: []string{c2.ID(), b1.ID()}})
	merged.Compact()
	write(t, s, merged)
	checkEqual(t, "Quotas after compacted batches", getQuotas(t, s), []*berth.QuotaRule{a1})
}

func testWorkerControls(t *testing.T, s store.Store) {
	if cs := getControls(t, s); len(cs) != 0 {
		t.Errorf("WorkerControls of an empty store = %s, want none", dump(cs))
	}
	// Every field, full time precision. One host's queues, its "*" control
	// and a host whose label is a prefix of another's are kept apart.
	// Order is by host, then queue, byte-wise: "gpu" before "gpu-1" (by
	// ID() it would be after), and "*" before any queue name.
	gpuAll := control("gpu", berth.AllQueues, berth.DesiredOff, berth.StopHard, "ops", 1)
	gpuGPU := control("gpu", "gpu", berth.DesiredOn, berth.StopDrain, "alice@example.org", 2)
	gpuCPU := control("gpu", "cpu", berth.DesiredOff, berth.StopPause, "", 3)
	gpu1 := control("gpu-1", "gpu", berth.DesiredOff, "custom_policy-2", "rails", 4)
	spark := control("Spark.lan", "ingest-0", berth.DesiredOn, berth.StopHard, "", 5)
	// Written out of order.
	write(t, s, &store.Batch{Controls: []*berth.WorkerControl{gpu1, gpuGPU, spark, gpuAll, gpuCPU}})
	want := []*berth.WorkerControl{spark, gpuAll, gpuCPU, gpuGPU, gpu1}
	checkEqual(t, "WorkerControls", getControls(t, s), want)
	checkEqual(t, "Active.Controls", loadActive(t, s).Controls, want)

	// An upsert of the same host and queue replaces every field, and
	// touches no other control of the host. A time in another location is
	// stored as the same instant, read in UTC.
	gpuGPUOff := control("gpu", "gpu", berth.DesiredOff, berth.StopHard, "", 6)
	in := *gpuGPUOff
	in.UpdatedAt = in.UpdatedAt.In(time.FixedZone("UTC+9", 9*3600))
	var ids idSource
	job := newJob(ids.next(), "gpu", "alice", berth.JobPending)
	write(t, s, &store.Batch{Jobs: []*berth.Job{job}, Controls: []*berth.WorkerControl{&in}})
	want = []*berth.WorkerControl{spark, gpuAll, gpuCPU, gpuGPUOff, gpu1}
	checkEqual(t, "WorkerControls after upsert", getControls(t, s), want)
	checkJob(t, s, job)

	// Turning the "*" control on leaves the per-queue ones as they are; a
	// zero time stays zero.
	gpuAllOn := control("gpu", berth.AllQueues, berth.DesiredOn, berth.StopHard, "ops", 0)
	gpuAllOn.UpdatedAt = time.Time{}
	write(t, s, &store.Batch{Controls: []*berth.WorkerControl{gpuAllOn}})
	want = []*berth.WorkerControl{spark, gpuAllOn, gpuCPU, gpuGPUOff, gpu1}
	checkEqual(t, "WorkerControls after turning * on", getControls(t, s), want)
	checkEqual(t, "Active.Controls after turning * on", loadActive(t, s).Controls, want)
}

func testWorkerControlUpsertsLastWins(t *testing.T, s store.Store) {
	first := control("gpu-1", "gpu", berth.DesiredOff, berth.StopHard, "ops", 1)
	other := control("gpu-1", "cpu", berth.DesiredOff, berth.StopHard, "ops", 2)
	second := control("gpu-1", "gpu", berth.DesiredOn, berth.StopDrain, "alice", 3)
	write(t, s, &store.Batch{Controls: []*berth.WorkerControl{first, other, second}})
	checkEqual(t, "WorkerControls", getControls(t, s), []*berth.WorkerControl{other, second})

	// Batches merged with Append, compacted or not, keep the last.
	third := control("gpu-1", "gpu", berth.DesiredOff, berth.StopPause, "bob", 4)
	otherOn := control("gpu-1", "cpu", berth.DesiredOn, berth.StopHard, "", 5)
	for _, compact := range []bool{false, true} {
		merged := &store.Batch{}
		merged.Append(&store.Batch{Controls: []*berth.WorkerControl{first}})
		merged.Append(&store.Batch{Controls: []*berth.WorkerControl{otherOn, third}})
		if compact {
			merged.Compact()
		}
		write(t, s, merged)
		checkEqual(t, fmt.Sprintf("WorkerControls after merged batches (compacted %v)", compact), getControls(t, s),
			[]*berth.WorkerControl{otherOn, third})
		write(t, s, &store.Batch{Controls: []*berth.WorkerControl{other, second}})
	}
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

func testLogs(t *testing.T, s store.Store) {
	var ids idSource
	job := newJob(ids.next(), "gpu", "alice", berth.JobRunning)
	att, other := newAttempt(ids.next(), job.ID, berth.AttemptRunning), newAttempt(ids.next(), job.ID, berth.AttemptRunning)
	write(t, s, &store.Batch{Jobs: []*berth.Job{job}, Attempts: []*berth.Attempt{att, other}})
	if got := getLogs(t, s, att.ID, 0, 100); len(got) != 0 {
		t.Errorf("Logs before any output = %q, want empty", got)
	}

	// Chunks "hello " | "world" | "!\n" | "x", in three writes.
	write(t, s, &store.Batch{Logs: []store.LogChunk{{AttemptID: att.ID, Offset: 0, Data: []byte("hello ")}}})
	write(t, s, &store.Batch{Logs: []store.LogChunk{
		{AttemptID: other.ID, Offset: 0, Data: []byte("OTHER ATTEMPT")},
		{AttemptID: att.ID, Offset: 6, Data: []byte("world")},
		{AttemptID: att.ID, Offset: 11, Data: []byte("!\n")},
	}})
	write(t, s, &store.Batch{Logs: []store.LogChunk{{AttemptID: att.ID, Offset: 13, Data: []byte("x")}}})
	full := "hello world!\nx"

	limits := []int{1 << 20, math.MaxInt32, math.MaxInt}
	for l := range len(full) + 2 {
		limits = append(limits, l)
	}
	for off := range int64(len(full) + 3) {
		for _, limit := range limits {
			start, end := min(int(off), len(full)), len(full)
			if limit < len(full) {
				end = min(int(off)+limit, len(full))
			}
			want := full[start:end]
			if got := getLogs(t, s, att.ID, off, limit); string(got) != want {
				t.Errorf("Logs(offset %d, limit %d) = %q, want %q", off, limit, got, want)
			}
		}
	}
	// A negative limit is no bytes (or an error), never a panic.
	if got, _ := s.Logs(t.Context(), att.ID, 3, -1); len(got) != 0 {
		t.Errorf("Logs(offset 3, limit -1) = %q, want no bytes", got)
	}
	if got := getLogs(t, s, other.ID, 0, 100); string(got) != "OTHER ATTEMPT" {
		t.Errorf("Logs(other) = %q, want %q", got, "OTHER ATTEMPT")
	}
	if got := getLogs(t, s, ids.next(), 0, 100); len(got) != 0 {
		t.Errorf("Logs(unknown attempt) = %q, want empty", got)
	}
	a := loadActive(t, s)
	if a.LogSizes[att.ID] != int64(len(full)) || a.LogSizes[other.ID] != int64(len("OTHER ATTEMPT")) {
		t.Errorf("LogSizes = %v, want %s: %d, %s: %d", a.LogSizes, att.ID, len(full), other.ID, len("OTHER ATTEMPT"))
	}
}

func testLogsBinary(t *testing.T, s store.Store) {
	var ids idSource
	job := newJob(ids.next(), "gpu", "alice", berth.JobRunning)
	att := newAttempt(ids.next(), job.ID, berth.AttemptRunning)
	write(t, s, &store.Batch{Jobs: []*berth.Job{job}, Attempts: []*berth.Attempt{att}})

	// Every byte value, NULs and invalid UTF-8 included, in 64 KiB chunks.
	var full []byte
	for i := range 3 * 64 << 10 {
		full = append(full, byte(i*7+i>>8))
	}
	const chunk = 64 << 10
	for off := 0; off < len(full); off += chunk {
		write(t, s, &store.Batch{Logs: []store.LogChunk{{AttemptID: att.ID, Offset: int64(off), Data: full[off : off+chunk]}}})
	}
	for _, r := range []struct{ off, limit int }{
		{0, len(full)}, {0, len(full) + 1}, {1, chunk}, {chunk - 3, 7}, {chunk - 1, chunk + 2}, {2*chunk + 5, 1 << 30}, {len(full) - 1, 10},
	} {
		want := full[r.off:min(r.off+r.limit, len(full))]
		if got := getLogs(t, s, att.ID, int64(r.off), r.limit); !bytes.Equal(got, want) {
			t.Errorf("Logs(offset %d, limit %d): got %d bytes, want %d (equal prefix %d)", r.off, r.limit, len(got), len(want), commonPrefix(got, want))
		}
	}
}

func testEvents(t *testing.T, s store.Store) {
	if a := loadActive(t, s); len(a.Events) != 0 {
		t.Errorf("Active.Events of an empty store = %s, want none", dump(a.Events))
	}
	full := fullEvent(1)
	// A field added to berth.Event must be added to fullEvent too, so that
	// this test covers it.
	for name, v := range fields(reflect.ValueOf(*full)) {
		if v.IsZero() {
			t.Errorf("fullEvent leaves %s zero: give it a value so that its round trip is checked", name)
		}
	}
	// Zero fields stay zero: a zero time, nil attempts.
	minimal := &berth.Event{Seq: 2, Type: "job.submitted"}
	// A time in another location is stored as the same instant and read
	// back in UTC.
	local := newEvents(3, 1)[0]
	want := []*berth.Event{full, minimal, local}
	inZone := *local
	inZone.Time = local.Time.In(time.FixedZone("UTC+5:30", 5*3600+1800))
	write(t, s, &store.Batch{Events: []*berth.Event{full, minimal, &inZone}})
	checkEqual(t, "Active.Events", loadActive(t, s).Events, want)

	// A later batch appends, here with other writes; events of one batch
	// come back in seq order, whatever their order in it.
	var ids idSource
	job := newJob(ids.next(), "gpu", "alice", berth.JobPending)
	att := newAttempt(ids.next(), job.ID, berth.AttemptRunning)
	more := newEvents(4, 3)
	write(t, s, &store.Batch{
		Jobs:       []*berth.Job{job},
		JobUpdates: []store.JobUpdate{{ID: job.ID, State: berth.JobRunning, Attempts: 1, StartedAt: base.Add(1)}},
		Attempts:   []*berth.Attempt{att},
		Logs:       []store.LogChunk{{AttemptID: att.ID, Data: []byte("started\n")}},
		Events:     []*berth.Event{more[2], more[0], more[1]},
	})
	write(t, s, &store.Batch{Events: newEvents(7, 1)})
	want = append(append(want, more...), newEvents(7, 1)...)
	a := loadActive(t, s)
	checkEqual(t, "Active.Events after more batches", a.Events, want)
	apply(job, store.JobUpdate{ID: job.ID, State: berth.JobRunning, Attempts: 1, StartedAt: base.Add(1)})
	checkEqual(t, "Active.Jobs", a.Jobs, []*berth.Job{job})
	checkEqual(t, "Active.Attempts", a.Attempts, []*berth.Attempt{att})
	if a.LogSizes[att.ID] != 8 {
		t.Errorf("LogSizes[%s] = %d, want 8", att.ID, a.LogSizes[att.ID])
	}
}

func commonPrefix(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
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

func sortByID[T any](list []T, id func(T) string) {
	slices.SortFunc(list, func(a, b T) int { return strings.Compare(id(a), id(b)) })
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
				a, err := s.LoadActive(ctx)
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
