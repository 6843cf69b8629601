package store_test

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/store"
)

var base = time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.UTC)

func intPtr(n int) *int { return &n }

func TestCompactFoldsUpdatesOfCreatedJobs(t *testing.T) {
	t.Parallel()
	j1 := &berth.Job{ID: "j1", JobSpec: berth.JobSpec{Queue: "gpu"}, State: berth.JobPending, CreatedAt: base}
	j2 := &berth.Job{ID: "j2", JobSpec: berth.JobSpec{Queue: "gpu"}, State: berth.JobPending, CreatedAt: base}
	j2Before := *j2
	last := store.JobUpdate{ID: "j1", State: berth.JobFailed, Reason: "exit status 2", ExitCode: intPtr(2), Attempts: 1,
		StartedAt: base.Add(1), FinishedAt: base.Add(2)}
	oldFirst := store.JobUpdate{ID: "old", State: berth.JobRunning, Attempts: 1, StartedAt: base.Add(3)}
	oldLast := store.JobUpdate{ID: "old", State: berth.JobSucceeded, ExitCode: intPtr(0), Attempts: 1,
		StartedAt: base.Add(3), FinishedAt: base.Add(4)}
	b := &store.Batch{
		Jobs: []*berth.Job{j1, j2},
		JobUpdates: []store.JobUpdate{
			{ID: "j1", State: berth.JobRunning, Attempts: 1, StartedAt: base.Add(1)},
			oldFirst,
			last,
			oldLast,
		},
	}
	b.Compact()

	if len(b.Jobs) != 2 || b.Jobs[0] != j1 || b.Jobs[1] != j2 {
		t.Fatalf("Jobs = %v, want j1 and j2 as they were", b.Jobs)
	}
	want := berth.Job{ID: "j1", JobSpec: berth.JobSpec{Queue: "gpu"}, State: berth.JobFailed, Reason: "exit status 2",
		ExitCode: intPtr(2), Attempts: 1, CreatedAt: base, StartedAt: base.Add(1), FinishedAt: base.Add(2)}
	if !reflect.DeepEqual(*j1, want) {
		t.Errorf("created job after Compact = %+v, want the last update folded in: %+v", *j1, want)
	}
	if !reflect.DeepEqual(*j2, j2Before) {
		t.Errorf("job without updates changed: %+v", *j2)
	}
	if !reflect.DeepEqual(b.JobUpdates, []store.JobUpdate{oldLast}) {
		t.Errorf("JobUpdates = %+v, want only the last update of the job not created in the batch", b.JobUpdates)
	}
}

func TestCompactKeepsLastUpsert(t *testing.T) {
	t.Parallel()
	a1 := &berth.Attempt{ID: "a1", JobID: "j", State: berth.AttemptAssigned}
	a2 := &berth.Attempt{ID: "a2", JobID: "j", State: berth.AttemptAssigned}
	a1Running := &berth.Attempt{ID: "a1", JobID: "j", State: berth.AttemptRunning}
	a3 := &berth.Attempt{ID: "a3", JobID: "j", State: berth.AttemptRunning}
	a1Done := &berth.Attempt{ID: "a1", JobID: "j", State: berth.AttemptSucceeded}
	w1 := &berth.Worker{ID: "w1", State: berth.WorkerReady}
	w2 := &berth.Worker{ID: "w2", State: berth.WorkerReady}
	w1Busy := &berth.Worker{ID: "w1", State: berth.WorkerBusy}
	// One host's queues and its "*" control are different controls.
	gpuOff := &berth.WorkerControl{Host: "h", Queue: "gpu", DesiredState: berth.DesiredOff, StopPolicy: berth.StopHard}
	cpuOff := &berth.WorkerControl{Host: "h", Queue: "cpu", DesiredState: berth.DesiredOff, StopPolicy: berth.StopHard}
	allOff := &berth.WorkerControl{Host: "h", Queue: berth.AllQueues, DesiredState: berth.DesiredOff, StopPolicy: berth.StopHard}
	gpuOn := &berth.WorkerControl{Host: "h", Queue: "gpu", DesiredState: berth.DesiredOn, StopPolicy: berth.StopHard}
	logs := []store.LogChunk{{AttemptID: "a1", Offset: 0, Data: []byte("a")}, {AttemptID: "a1", Offset: 1, Data: []byte("b")}}
	events := []*berth.Event{{Seq: 1, Type: "job.running", JobID: "j"}, {Seq: 2, Type: "job.running", JobID: "j"}}
	b := &store.Batch{
		Attempts: []*berth.Attempt{a1, a2, a1Running, a3, a1Done},
		Workers:  []*berth.Worker{w1, w2, w1Busy},
		Controls: []*berth.WorkerControl{gpuOff, cpuOff, allOff, gpuOn},
		Progress: []store.AttemptProgress{{AttemptID: "a1", Progress: "1"}, {AttemptID: "a2", Progress: "1"}, {AttemptID: "a1", Progress: "2"}},
		Logs:     slices.Clone(logs),
		Events:   slices.Clone(events),
	}
	b.Compact()
	if !slices.Equal(b.Attempts, []*berth.Attempt{a2, a3, a1Done}) {
		t.Errorf("Attempts = %v, want a2, a3 and the last a1", ids(b.Attempts, func(a *berth.Attempt) string { return a.ID + ":" + string(a.State) }))
	}
	if !slices.Equal(b.Workers, []*berth.Worker{w2, w1Busy}) {
		t.Errorf("Workers = %v, want w2 and the last w1", ids(b.Workers, func(w *berth.Worker) string { return w.ID + ":" + string(w.State) }))
	}
	if !slices.Equal(b.Controls, []*berth.WorkerControl{cpuOff, allOff, gpuOn}) {
		t.Errorf("Controls = %v, want h/cpu, h/* and the last h/gpu", ids(b.Controls, func(c *berth.WorkerControl) string { return c.ID() + ":" + c.DesiredState }))
	}
	if want := []store.AttemptProgress{{AttemptID: "a2", Progress: "1"}, {AttemptID: "a1", Progress: "2"}}; !slices.Equal(b.Progress, want) {
		t.Errorf("Progress = %v, want %v", b.Progress, want)
	}
	if !reflect.DeepEqual(b.Logs, logs) {
		t.Errorf("Logs changed: %v", b.Logs)
	}
	if !slices.Equal(b.Events, events) {
		t.Errorf("Events changed: %v", b.Events)
	}

	// Nothing to fold: nothing changes.
	progress := []store.AttemptProgress{{AttemptID: "a1", Progress: "1"}, {AttemptID: "a2", Progress: "1"}}
	c := &store.Batch{Attempts: []*berth.Attempt{a1, a2}, Workers: []*berth.Worker{w1},
		Controls: []*berth.WorkerControl{gpuOff, allOff}, Progress: slices.Clone(progress)}
	c.Compact()
	if !slices.Equal(c.Attempts, []*berth.Attempt{a1, a2}) || !slices.Equal(c.Workers, []*berth.Worker{w1}) ||
		!slices.Equal(c.Controls, []*berth.WorkerControl{gpuOff, allOff}) || !slices.Equal(c.Progress, progress) {
		t.Errorf("Compact of a batch without repeats changed it: %+v", c)
	}
}

func ids[T any](list []T, id func(T) string) []string {
	out := make([]string, len(list))
	for i, v := range list {
		out[i] = id(v)
	}
	return out
}

// model is the state a batch leaves: what applying every write in order
// gives.
type model struct {
	Jobs     map[string]berth.Job
	Attempts map[string]berth.Attempt
	Workers  map[string]berth.Worker
	Controls map[string]berth.WorkerControl
	Logs     []store.LogChunk
	Events   []*berth.Event
}

func (m *model) apply(b *store.Batch) {
	for _, j := range b.Jobs {
		m.Jobs[j.ID] = *j
	}
	for _, u := range b.JobUpdates {
		j, ok := m.Jobs[u.ID]
		if !ok {
			panic("update of unknown job " + u.ID)
		}
		j.State, j.Reason, j.ExitCode, j.Attempts, j.StartedAt, j.FinishedAt =
			u.State, u.Reason, u.ExitCode, u.Attempts, u.StartedAt, u.FinishedAt
		m.Jobs[u.ID] = j
	}
	for _, a := range b.Attempts {
		m.Attempts[a.ID] = *a
	}
	for _, w := range b.Workers {
		m.Workers[w.ID] = *w
	}
	for _, c := range b.Controls {
		m.Controls[c.ID()] = *c
	}
	for _, p := range b.Progress {
		if a, ok := m.Attempts[p.AttemptID]; ok {
			a.Progress = p.Progress
			m.Attempts[p.AttemptID] = a
		}
	}
	m.Logs = append(m.Logs, b.Logs...)
	m.Events = append(m.Events, b.Events...)
}

func newModel() *model {
	m := &model{Jobs: map[string]berth.Job{}, Attempts: map[string]berth.Attempt{}, Workers: map[string]berth.Worker{},
		Controls: map[string]berth.WorkerControl{}}
	for _, id := range []string{"old0", "old1"} {
		m.Jobs[id] = berth.Job{ID: id, State: berth.JobPending, CreatedAt: base}
	}
	m.Attempts["old"] = berth.Attempt{ID: "old", JobID: "old0", State: berth.AttemptRunning, Progress: "stored"}
	return m
}

// cloneBatch copies b deeply enough that compacting the copy leaves b as
// it was (Compact changes the jobs it folds updates into).
func cloneBatch(b *store.Batch) *store.Batch {
	c := &store.Batch{JobUpdates: slices.Clone(b.JobUpdates), Attempts: slices.Clone(b.Attempts),
		Workers: slices.Clone(b.Workers), Controls: slices.Clone(b.Controls), Progress: slices.Clone(b.Progress),
		Logs: slices.Clone(b.Logs), Events: slices.Clone(b.Events), Federation: b.Federation} // Compact leaves Federation as it is
	for _, j := range b.Jobs {
		cj := *j
		c.Jobs = append(c.Jobs, &cj)
	}
	return c
}

func TestCompactKeepsFinalState(t *testing.T) {
	t.Parallel()
	jobStates := []berth.JobState{berth.JobPending, berth.JobRunning, berth.JobSucceeded, berth.JobFailed, berth.JobCancelled}
	attemptStates := []berth.AttemptState{berth.AttemptAssigned, berth.AttemptRunning, berth.AttemptFailed, berth.AttemptLost}
	rapid.Check(t, func(rt *rapid.T) {
		b := &store.Batch{}
		targets := []string{"old0", "old1"}
		for i := range rapid.IntRange(0, 4).Draw(rt, "jobs") {
			id := fmt.Sprint("new", i)
			b.Jobs = append(b.Jobs, &berth.Job{ID: id, State: berth.JobPending, CreatedAt: base, Reason: "created"})
			targets = append(targets, id)
		}
		for i := range rapid.IntRange(0, 12).Draw(rt, "updates") {
			u := store.JobUpdate{
				ID:       rapid.SampledFrom(targets).Draw(rt, "update"),
				State:    rapid.SampledFrom(jobStates).Draw(rt, "state"),
				Reason:   fmt.Sprint("update ", i),
				Attempts: rapid.IntRange(0, 3).Draw(rt, "attempts"),
			}
			if rapid.Bool().Draw(rt, "exited") {
				u.ExitCode = intPtr(rapid.IntRange(-1, 2).Draw(rt, "code"))
			}
			if rapid.Bool().Draw(rt, "started") {
				u.StartedAt = base.Add(time.Duration(i))
			}
			b.JobUpdates = append(b.JobUpdates, u)
		}
		for i := range rapid.IntRange(0, 10).Draw(rt, "attempts") {
			b.Attempts = append(b.Attempts, &berth.Attempt{
				ID:       rapid.SampledFrom([]string{"a0", "a1", "a2"}).Draw(rt, "attempt"),
				JobID:    rapid.SampledFrom(targets).Draw(rt, "job"),
				State:    rapid.SampledFrom(attemptStates).Draw(rt, "attempt state"),
				Reason:   fmt.Sprint("attempt write ", i),
				WorkerID: "w",
			})
		}
		for i := range rapid.IntRange(0, 6).Draw(rt, "workers") {
			b.Workers = append(b.Workers, &berth.Worker{
				ID:      rapid.SampledFrom([]string{"w0", "w1", "w2"}).Draw(rt, "worker"),
				Running: i,
			})
		}
		for i := range rapid.IntRange(0, 6).Draw(rt, "controls") {
			b.Controls = append(b.Controls, &berth.WorkerControl{
				Host:         rapid.SampledFrom([]string{"h0", "h1"}).Draw(rt, "host"),
				Queue:        rapid.SampledFrom([]string{"gpu", "cpu", berth.AllQueues}).Draw(rt, "queue"),
				DesiredState: rapid.SampledFrom([]string{berth.DesiredOn, berth.DesiredOff}).Draw(rt, "desired"),
				RequestedBy:  fmt.Sprint("control write ", i),
			})
		}
		for i := range rapid.IntRange(0, 8).Draw(rt, "progress") {
			b.Progress = append(b.Progress, store.AttemptProgress{
				AttemptID: rapid.SampledFrom([]string{"a0", "a1", "old", "none"}).Draw(rt, "progress of"),
				Progress:  fmt.Sprint("progress ", i),
			})
		}
		for i := range rapid.IntRange(0, 3).Draw(rt, "logs") {
			b.Logs = append(b.Logs, store.LogChunk{AttemptID: "a0", Offset: int64(i), Data: []byte{byte(i)}})
		}
		for i := range rapid.IntRange(0, 3).Draw(rt, "events") {
			b.Events = append(b.Events, &berth.Event{Seq: uint64(i + 1), Type: "job.running", JobID: rapid.SampledFrom(targets).Draw(rt, "event of")})
		}

		want := newModel()
		want.apply(cloneBatch(b))
		compacted := cloneBatch(b)
		compacted.Compact()
		got := newModel()
		got.apply(compacted)
		if !reflect.DeepEqual(got, want) {
			rt.Fatalf("compacted batch leaves\n%+v\nwant\n%+v", got, want)
		}

		// And it is compact: no update of a created job, no id twice.
		if !slices.Equal(ids(compacted.Jobs, func(j *berth.Job) string { return j.ID }), ids(b.Jobs, func(j *berth.Job) string { return j.ID })) {
			rt.Fatalf("Compact changed the created jobs")
		}
		seen := map[string]bool{}
		for _, u := range compacted.JobUpdates {
			if slices.ContainsFunc(b.Jobs, func(j *berth.Job) bool { return j.ID == u.ID }) {
				rt.Fatalf("update of %s, created in the batch, was kept", u.ID)
			}
			if seen["u"+u.ID] {
				rt.Fatalf("two updates of %s kept", u.ID)
			}
			seen["u"+u.ID] = true
		}
		for _, a := range compacted.Attempts {
			if seen["a"+a.ID] {
				rt.Fatalf("two upserts of attempt %s kept", a.ID)
			}
			seen["a"+a.ID] = true
		}
		for _, w := range compacted.Workers {
			if seen["w"+w.ID] {
				rt.Fatalf("two upserts of worker %s kept", w.ID)
			}
			seen["w"+w.ID] = true
		}
		for _, c := range compacted.Controls {
			if seen["c"+c.ID()] {
				rt.Fatalf("two upserts of control %s kept", c.ID())
			}
			seen["c"+c.ID()] = true
		}
		for _, p := range compacted.Progress {
			if seen["p"+p.AttemptID] {
				rt.Fatalf("two progress writes of attempt %s kept", p.AttemptID)
			}
			seen["p"+p.AttemptID] = true
		}
	})
}

// TestCompactOnEachDriver writes one batch as it is to one store and
// compacted to another: both must hold the same.
func TestCompactOnEachDriver(t *testing.T) {
	t.Parallel()
	onEachDriver(t, testCompactOnStores)
}

func testCompactOnStores(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := t.Context()
	var gen berth.IDGen
	b := &store.Batch{}
	var jobIDs []string
	for i := range 200 {
		j := &berth.Job{ID: gen.New(base), JobSpec: berth.JobSpec{Queue: "gpu"}, State: berth.JobPending, CreatedAt: base}
		b.Jobs = append(b.Jobs, j)
		jobIDs = append(jobIDs, j.ID)
		if i%3 == 0 {
			b.JobUpdates = append(b.JobUpdates, store.JobUpdate{ID: j.ID, State: berth.JobRunning, Attempts: 1, StartedAt: base.Add(time.Duration(i))})
		}
	}
	var attemptIDs []string
	for i := range 150 {
		a := &berth.Attempt{ID: gen.New(base), JobID: jobIDs[i], State: berth.AttemptAssigned, CreatedAt: base}
		b.Attempts = append(b.Attempts, a)
		attemptIDs = append(attemptIDs, a.ID)
	}
	for i := range 150 {
		if i%2 == 0 {
			b.Attempts = append(b.Attempts, &berth.Attempt{ID: attemptIDs[i], JobID: jobIDs[i], State: berth.AttemptRunning,
				CreatedAt: base, StartedAt: base.Add(1)})
			b.JobUpdates = append(b.JobUpdates, store.JobUpdate{ID: jobIDs[i], State: berth.JobSucceeded, ExitCode: intPtr(0),
				Attempts: 1, StartedAt: base.Add(1), FinishedAt: base.Add(2)})
		}
	}
	b.Workers = []*berth.Worker{{ID: "w1", State: berth.WorkerReady}, {ID: "w2"}, {ID: "w1", State: berth.WorkerBusy, Running: 3}}
	for i := range 150 {
		b.Progress = append(b.Progress, store.AttemptProgress{AttemptID: attemptIDs[i%50], Progress: fmt.Sprint("step ", i)})
	}
	for i := range 20 {
		b.Controls = append(b.Controls, &berth.WorkerControl{Host: fmt.Sprint("h", i%4), Queue: []string{"gpu", berth.AllQueues}[i/4%2],
			DesiredState: []string{berth.DesiredOff, berth.DesiredOn}[i%3%2], StopPolicy: berth.StopHard, UpdatedAt: base.Add(time.Duration(i))})
	}
	for i, id := range jobIDs {
		b.Events = append(b.Events, &berth.Event{Seq: uint64(i + 1), Time: base, Type: "job.submitted", JobID: id})
	}
	b.Federation = &store.FederationBatch{PeerDeletes: []string{"p2", "p9", "p2"}}
	for i := range 12 {
		b.Federation.Peers = append(b.Federation.Peers, &berth.Peer{Name: fmt.Sprint("p", i%3), URL: fmt.Sprint("https://h", i)})
		b.Federation.Handoffs = append(b.Federation.Handoffs, &berth.Handoff{JobID: jobIDs[i%4], Incarnation: 1 + i%2,
			State: berth.HandoffPending, LastError: fmt.Sprint("write ", i)})
		b.Federation.Cursors = append(b.Federation.Cursors, store.PeerCursor{Peer: fmt.Sprint("p", i%3),
			Cursor: berth.ChangeCursor{Epoch: "e", Seq: uint64(i)}})
	}

	plain, compacted := open(t), open(t)
	if err := plain.Write(ctx, cloneBatch(b)); err != nil {
		t.Fatalf("Write as is: %v", err)
	}
	c := cloneBatch(b)
	c.Compact()
	if len(c.JobUpdates) != 0 || len(c.Attempts) != 150 || len(c.Workers) != 2 || len(c.Progress) != 50 || len(c.Controls) != 8 ||
		len(c.Events) != 200 {
		t.Errorf("compacted batch has %d updates, %d attempts, %d workers, %d progress, %d controls, %d events; want 0, 150, 2, 50, 8, 200",
			len(c.JobUpdates), len(c.Attempts), len(c.Workers), len(c.Progress), len(c.Controls), len(c.Events))
	}
	if f := c.Federation; len(f.Peers) != 3 || len(f.PeerDeletes) != 2 || len(f.Handoffs) != 4 || len(f.Cursors) != 3 {
		t.Errorf("compacted federation has %d peers, %d peer deletes, %d handoffs, %d cursors; want 3, 2, 4, 3",
			len(f.Peers), len(f.PeerDeletes), len(f.Handoffs), len(f.Cursors))
	}
	if err := compacted.Write(ctx, c); err != nil {
		t.Fatalf("Write compacted: %v", err)
	}
	a1, err := plain.LoadActive(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	a2, err := compacted.LoadActive(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a1.Federation.Epoch == a2.Federation.Epoch {
		t.Errorf("two stores have one federation epoch, %q", a1.Federation.Epoch)
	}
	a2.Federation.Epoch = a1.Federation.Epoch // each store has its own
	if len(a1.Federation.Peers) != 2 || a1.Federation.Peers[1].URL != "https://h10" || len(a1.Federation.Handoffs) != 4 ||
		a1.Federation.Handoffs[0].LastError != "write 8" || len(a1.Federation.Cursors) != 3 || a1.Federation.Cursors[2].Cursor.Seq != 11 {
		t.Errorf("LoadActive's federation = %+v; want the last upsert of each", a1.Federation)
	}
	if !reflect.DeepEqual(a1, a2) {
		t.Errorf("LoadActive differs:\n as is     %+v\n compacted %+v", a1, a2)
	}
	if a1.Counts[berth.JobSucceeded] != 75 {
		t.Errorf("Counts = %v, want 75 succeeded", a1.Counts)
	}
	if len(a1.Controls) != 8 || a1.Attempts[0].Progress != "step 100" || len(a1.Events) != 200 {
		t.Errorf("LoadActive has %d controls, %d events and the first attempt's progress %q; want 8, 200 and %q",
			len(a1.Controls), len(a1.Events), a1.Attempts[0].Progress, "step 100")
	}
	j1, err := plain.Jobs(ctx, store.JobFilter{})
	if err != nil {
		t.Fatal(err)
	}
	j2, err := compacted.Jobs(ctx, store.JobFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(j1) != 200 || !reflect.DeepEqual(j1, j2) {
		t.Errorf("Jobs differ: %d as is, %d compacted", len(j1), len(j2))
	}
}

// TestQuotaWritesKeepOrderAcrossAppend checks that merging batches with
// Append, and compacting the result, leaves the quota rules that writing
// each batch in turn leaves: deletes after upserts within a batch, and
// each rule's writes in order across batches.
func TestQuotaWritesKeepOrderAcrossAppend(t *testing.T) {
	t.Parallel()
	ids := []string{"user:a", "user:b", "queue:c"}
	apply := func(m map[string]int, b *store.Batch) {
		for _, q := range b.Quotas {
			m[q.ID()] = q.MaxJobs
		}
		for _, id := range b.QuotaDeletes {
			delete(m, id)
		}
	}
	rapid.Check(t, func(rt *rapid.T) {
		want := map[string]int{"user:a": -2, "queue:c": -2} // stored before
		merged := &store.Batch{}
		for i := range rapid.IntRange(1, 6).Draw(rt, "batches") {
			b := &store.Batch{}
			for k := range rapid.IntRange(0, 3).Draw(rt, "upserts") {
				scope, name, _ := strings.Cut(rapid.SampledFrom(ids).Draw(rt, "upsert"), ":")
				b.Quotas = append(b.Quotas, &berth.QuotaRule{Scope: scope, Name: name, MaxGPUs: berth.NoLimit, MaxJobs: i*10 + k})
			}
			for range rapid.IntRange(0, 2).Draw(rt, "deletes") {
				b.QuotaDeletes = append(b.QuotaDeletes, rapid.SampledFrom(ids).Draw(rt, "delete"))
			}
			apply(want, b)
			merged.Append(&store.Batch{Quotas: slices.Clone(b.Quotas), QuotaDeletes: slices.Clone(b.QuotaDeletes)})
		}
		got := map[string]int{"user:a": -2, "queue:c": -2}
		apply(got, &store.Batch{Quotas: slices.Clone(merged.Quotas), QuotaDeletes: slices.Clone(merged.QuotaDeletes)})
		if !reflect.DeepEqual(got, want) {
			rt.Fatalf("merged batch leaves %v, want %v", got, want)
		}
		merged.Compact()
		got = map[string]int{"user:a": -2, "queue:c": -2}
		apply(got, merged)
		if !reflect.DeepEqual(got, want) {
			rt.Fatalf("compacted batch leaves %v, want %v", got, want)
		}
		seen := map[string]bool{}
		for _, q := range merged.Quotas {
			if seen[q.ID()] {
				rt.Fatalf("compacted batch upserts %s twice", q.ID())
			}
			seen[q.ID()] = true
		}
		for _, id := range merged.QuotaDeletes {
			if seen[id] {
				rt.Fatalf("compacted batch writes %s twice (upsert and delete, or two deletes)", id)
			}
			seen[id] = true
		}
	})
}

// TestControlAndProgressWritesKeepOrderAcrossAppend checks that merging
// batches with Append, and compacting the result, leaves the worker
// controls and attempt progress that writing each batch in turn leaves:
// the last control of each host and queue, and each attempt's progress
// from its last write, whether an attempt upsert or a progress entry
// (which within one batch applies after the upserts).
func TestControlAndProgressWritesKeepOrderAcrossAppend(t *testing.T) {
	t.Parallel()
	attempts := []string{"old", "a1", "none"}
	rapid.Check(t, func(rt *rapid.T) {
		want := newModel()
		merged := &store.Batch{}
		for i := range rapid.IntRange(1, 6).Draw(rt, "batches") {
			b := &store.Batch{}
			for k := range rapid.IntRange(0, 2).Draw(rt, "upserts") {
				b.Attempts = append(b.Attempts, &berth.Attempt{ID: rapid.SampledFrom(attempts[:2]).Draw(rt, "upsert"),
					JobID: "old0", State: berth.AttemptRunning, Progress: fmt.Sprint("upsert ", i, k)})
			}
			for k := range rapid.IntRange(0, 3).Draw(rt, "progress") {
				b.Progress = append(b.Progress, store.AttemptProgress{AttemptID: rapid.SampledFrom(attempts).Draw(rt, "progress of"),
					Progress: fmt.Sprint("progress ", i, k)})
			}
			for k := range rapid.IntRange(0, 3).Draw(rt, "controls") {
				b.Controls = append(b.Controls, &berth.WorkerControl{
					Host:         rapid.SampledFrom([]string{"h0", "h1"}).Draw(rt, "host"),
					Queue:        rapid.SampledFrom([]string{"gpu", berth.AllQueues}).Draw(rt, "queue"),
					DesiredState: rapid.SampledFrom([]string{berth.DesiredOn, berth.DesiredOff}).Draw(rt, "desired"),
					RequestedBy:  fmt.Sprint("control ", i, k),
				})
			}
			want.apply(cloneBatch(b))
			merged.Append(cloneBatch(b))
		}
		got := newModel()
		got.apply(cloneBatch(merged))
		if !reflect.DeepEqual(got, want) {
			rt.Fatalf("merged batch leaves\n%+v\nwant\n%+v", got, want)
		}
		merged.Compact()
		got = newModel()
		got.apply(merged)
		if !reflect.DeepEqual(got, want) {
			rt.Fatalf("compacted batch leaves\n%+v\nwant\n%+v", got, want)
		}
		seen := map[string]bool{}
		for _, c := range merged.Controls {
			if seen[c.ID()] {
				rt.Fatalf("compacted batch upserts control %s twice", c.ID())
			}
			seen[c.ID()] = true
		}
		for _, p := range merged.Progress {
			if seen[p.AttemptID] {
				rt.Fatalf("compacted batch sets the progress of %s twice", p.AttemptID)
			}
			seen[p.AttemptID] = true
		}
	})
}

func TestEmptyCountsEveryList(t *testing.T) {
	t.Parallel()
	for _, b := range []*store.Batch{
		{Jobs: []*berth.Job{{ID: "j"}}},
		{JobUpdates: []store.JobUpdate{{ID: "j"}}},
		{Attempts: []*berth.Attempt{{ID: "a"}}},
		{Workers: []*berth.Worker{{ID: "w"}}},
		{Quotas: []*berth.QuotaRule{{Scope: "user", Name: "a"}}},
		{QuotaDeletes: []string{"user:a"}},
		{Controls: []*berth.WorkerControl{{Host: "h", Queue: berth.AllQueues}}},
		{Progress: []store.AttemptProgress{{AttemptID: "a"}}},
		{Logs: []store.LogChunk{{AttemptID: "a"}}},
		{Events: []*berth.Event{{Seq: 1}}},
	} {
		if b.Empty() {
			t.Errorf("Empty() of %+v = true", b)
		}
	}
	if b := (&store.Batch{}); !b.Empty() {
		t.Error("Empty() of an empty batch = false")
	}
}

// TestFederationAppend checks that Append keeps the order of peer
// upserts and deletes across batches, and never writes into the lists of
// a batch it appended.
func TestFederationAppend(t *testing.T) {
	t.Parallel()
	a, x := &berth.Peer{Name: "a"}, &berth.Peer{Name: "x"}
	first := &store.FederationBatch{Peers: append(make([]*berth.Peer, 0, 4), x), PeerDeletes: []string{"a", "b"}}
	b := &store.Batch{}
	b.Append(&store.Batch{Federation: first})
	b.Append(&store.Batch{Federation: &store.FederationBatch{Peers: []*berth.Peer{a}}})
	b.Append(&store.Batch{})
	if f := b.Federation; !slices.Equal(f.Peers, []*berth.Peer{x, a}) || !slices.Equal(f.PeerDeletes, []string{"b"}) {
		t.Errorf("appended: peers %v, deletes %v; want x, a and b", ids(f.Peers, func(p *berth.Peer) string { return p.Name }), f.PeerDeletes)
	}
	if !slices.Equal(first.PeerDeletes, []string{"a", "b"}) || !slices.Equal(first.Peers[:cap(first.Peers)][:2], []*berth.Peer{x, nil}) {
		t.Errorf("Append wrote into the appended batch: deletes %v, peers %v", first.PeerDeletes, first.Peers[:2])
	}
	if b.Empty() {
		t.Error("a batch of peer writes is empty")
	}
	e := &store.Batch{}
	e.Append(&store.Batch{Federation: &store.FederationBatch{}})
	if e.Federation != nil || !e.Empty() {
		t.Errorf("appending no federation writes gave %+v", e.Federation)
	}
}
