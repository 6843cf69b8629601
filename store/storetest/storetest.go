// Package storetest is the conformance suite for store.Store drivers. Every
// driver (sqlite, postgres) runs the same checks of the contract documented
// on store.Store and its roles from its own tests, through one entry point:
//
//	func TestConformance(t *testing.T) {
//		storetest.Exercise(t, storetest.Driver{
//			Open:         func(t *testing.T, path string) store.Store { return openAt(t, path) },
//			StoredEvents: func(t *testing.T, path string) (oldest, newest uint64) { return storedSeqs(t, path) },
//		})
//	}
//
// Exercise fans out to one file per area of the store: jobs.go,
// attempts.go, workers.go (workers, quota rules, worker controls),
// logs.go (output and events), lifecycle.go (LoadActive, batches,
// concurrency), credentials.go, arbiter.go, webhooks.go, federation.go
// (peers, handoffs, received jobs, the changelog and its epoch), pools.go
// (cloud pools, their instances and host records) and durable.go
// (reopening). The helpers they share are in this file.
//
// The suite is an ordinary (non-test) package so that drivers in other
// packages can import it; it only calls the store through store.Store.
package storetest

import (
	"encoding/json"
	"fmt"
	"iter"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
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

// Driver is the store driver under test.
type Driver struct {
	// Open opens the store kept at path. The first open of a path must
	// return an empty store, and each later one a store holding everything
	// written before the previous Close. path is a file name in a fresh
	// temporary directory of the subtest; a driver that keeps no files
	// (PostgreSQL) maps it to a database or schema of its own, the same one
	// for the same path. Open fails t itself (t.Fatal) when it cannot. The
	// suite closes every store Open returns, and fails the subtest if Close
	// returns an error, so Open must not close it.
	Open func(t *testing.T, path string) store.Store
	// StoredEvents reads, outside the store, the lowest and highest seq in
	// the events table of the store at path, 0 when it is empty
	// (LoadActive returns at most store.KeptEvents, so only this shows that
	// old events are deleted). It fails t itself when it cannot.
	StoredEvents func(t *testing.T, path string) (oldest, newest uint64)
}

// test is one check of a store, given a new, empty one.
type test struct {
	name string
	fn   func(t *testing.T, s store.Store)
}

// Exercise runs the conformance suite against d as parallel subtests of t,
// one for each area of the store (Jobs, Attempts, …), each with a
// parallel subtest per check on a store of its own. It fails t where the
// store breaks its contract.
func Exercise(t *testing.T, d Driver) {
	t.Helper()
	open := func(t *testing.T) store.Store { return d.Open(t, filepath.Join(t.TempDir(), "berth.db")) }
	areas := []struct {
		name  string
		tests []test
	}{
		{"Jobs", jobTests},
		{"Attempts", attemptTests},
		{"Workers", workerTests},
		{"Logs", logTests},
		{"Lifecycle", lifecycleTests()},
		{"Credentials", credentialTests},
		{"Arbiter", arbiterTests},
		{"Webhooks", webhookTests},
		{"Federation", federationTests},
		{"Pools", poolTests},
		{"Backends", backendTests},
		{"Contracts", contractTests},
	}
	for _, area := range areas {
		t.Run(area.name, func(t *testing.T) {
			t.Parallel()
			for _, tc := range area.tests {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					tc.fn(t, openStore(t, open))
				})
			}
		})
	}
	t.Run("Durable", func(t *testing.T) {
		t.Parallel()
		exerciseDurable(t, d)
	})
	exerciseFederationEpoch(t, d)
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
			Resources: berth.Resources{GPUs: 4, GPUMilli: 250, GPUMemory: 80 << 30, GPUType: "H100", CPUs: 12.25,
				Memory: 3<<40 + 17}, // GPUs and GPUMilli together only to round-trip both (no valid spec has both)
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
			Image:          "nvcr.io/nvidia/pytorch:25.01-py3",
			Origin:         &berth.JobOrigin{Cluster: "origin-ünï", RemoteID: "01JREMOTE0000000000000000", Nonce: "n0nce"},
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
	return &berth.Event{Seq: seq, Time: base.Add(time.Duration(seq)), Type: "job.requeued", JobID: "01JPJOB0000000000000000000", Name: "train-ünï",
		State: berth.JobRunning, WorkerID: "w-7", Host: "gpu-1", Reason: "lost: \"heartbeat\" ünï ☃ \\ nul\x00 <&>",
		Quota: "user:alice", Limits: "gpus<=8 jobs<=4", Actor: "ops", User: "alice", Requested: 4, Limit: 8, Queue: "gpu",
		Desired: berth.DesiredOff, Policy: berth.StopDrain, Attempts: []string{"a1", "a2"}, ExitCode: new(3), Peer: "b",
		Pool: "rent", Instance: "i-1", Count: 2}
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

// loadActive returns what LoadActive returns, with its Members made jobs
// of their own among Jobs (AllJobs), once checkMembers has checked them.
func loadActive(t *testing.T, s store.Store) *store.Active {
	t.Helper()
	a := loadActiveSplit(t, s)
	a.Jobs, a.Members = a.AllJobs(), nil
	return a
}

// loadActiveSplit returns what LoadActive returns, as it returns it, its
// Members checked (checkMembers).
func loadActiveSplit(t *testing.T, s store.Store) *store.Active {
	t.Helper()
	a, err := s.LoadActive(t.Context(), nil)
	if err != nil {
		t.Fatalf("LoadActive: %v", err)
	}
	if a == nil {
		t.Fatal("LoadActive returned nil and no error")
	}
	checkMembers(t, a)
	return a
}

// checkMembers fails t unless a's Jobs and Members are each in id order
// with no id in both, and each member's Like is a pending job with no ID
// or array index of its own.
func checkMembers(t *testing.T, a *store.Active) {
	t.Helper()
	inJobs := map[string]bool{}
	for i, j := range a.Jobs {
		if i > 0 && a.Jobs[i-1].ID >= j.ID {
			t.Fatalf("Active.Jobs not in id order: %s before %s", a.Jobs[i-1].ID, j.ID)
		}
		inJobs[j.ID] = true
	}
	for i, m := range a.Members {
		if i > 0 && a.Members[i-1].ID >= m.ID {
			t.Fatalf("Active.Members not in id order: %s before %s", a.Members[i-1].ID, m.ID)
		}
		if inJobs[m.ID] {
			t.Fatalf("job %s is in both Active.Jobs and Active.Members", m.ID)
		}
		if m.Like == nil || m.Like.ID != "" || m.Like.ArrayIndex != nil || m.Like.State != berth.JobPending {
			t.Fatalf("member %s is like %+v, want a pending job with no ID or index", m.ID, m.Like)
		}
	}
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

func sortByID[T any](list []T, id func(T) string) {
	slices.SortFunc(list, func(a, b T) int { return strings.Compare(id(a), id(b)) })
}
