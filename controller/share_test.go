package controller

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/sqlite"
	"github.com/berth-dev/berth/wire"
)

// wantJob is what one job of an array should be after a step: gone from
// memory (ended), or active with its state, reason (a prefix) and
// attempts, and shared when it is still as submitted.
type wantJob struct {
	gone     bool
	state    berth.JobState
	reason   string
	attempts int
	shared   bool
}

// checkArray checks each job of ids (an array, in index order) in l
// against want: its own ID and index, and what the step made it, so
// that one job's change shows in no other. After a restart (loaded) a
// changed job may be shared too: the first of its kind that the load
// finds becomes a template.
func checkArray(t *testing.T, when string, l *lifecycle, ids []string, want []wantJob, loaded bool) {
	t.Helper()
	for i, id := range ids {
		js, w := l.jobs[id], want[i]
		if w.gone {
			if js != nil {
				t.Errorf("%s: job %d is %s %q, want it ended and gone", when, i, js.view().State, js.view().Reason)
			}
			continue
		}
		if js == nil {
			t.Errorf("%s: job %d gone, want it %s", when, i, w.state)
			continue
		}
		j := js.clone()
		if j.ID != id || j.ArrayIndex == nil || *j.ArrayIndex != i {
			t.Errorf("%s: job %d has ID %s, index %v; want %s, %d", when, i, j.ID, j.ArrayIndex, id, i)
		}
		if j.State != w.state || !strings.HasPrefix(j.Reason, w.reason) || (w.reason == "" && j.Reason != "") ||
			j.Attempts != w.attempts || js.shared() != w.shared && !(loaded && js.shared()) {
			t.Errorf("%s: job %d %s %q, %d attempts, shared %v; want %s %q, %d, shared %v",
				when, i, j.State, j.Reason, j.Attempts, js.shared(), w.state, w.reason, w.attempts, w.shared)
		}
		if js.task != nil && (js.task.JobID != id || js.task.Queue != j.Queue) {
			t.Errorf("%s: job %d's task is %s in %s", when, i, js.task.JobID, js.task.Queue)
		}
	}
}

// TestArrayJobsShareNothingTheyChange runs an array whose queued jobs
// share one job (and one scheduler spec) while they are as submitted, and
// changes one job at a time: placed, failed and retried, cancelled while
// queued, cancelled while placed. After each step every job must be as
// that step left it, in the live controller, in the store, and in a
// controller rebuilt from the store (a restart), with the untouched jobs
// still sharing.
func TestArrayJobsShareNothingTheyChange(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "berth.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	h := newHarness(t)
	s := h.agent(workerReg()) // one slot: one job placed at a time

	spec := berth.DefaultJobSpec()
	spec.Command, spec.Retries = berth.Argv{"false"}, 1
	req := &berth.SubmitRequest{JobSpec: spec, Array: 5}
	if err := req.Validate(); err != nil {
		t.Fatal(err)
	}
	var jobs []*berth.Job
	h.step(func() { jobs = h.l.createJobs(req, "test") })
	ids := make([]string, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}

	// check checks the step's effects in memory, in the store and after
	// a restart: a controller rebuilt from what was written. A job whose
	// assignment is not yet accepted counts its attempt in memory, not in
	// its row (jobState.update).
	check := func(when string, want []wantJob, placed int) {
		t.Helper()
		checkArray(t, when, h.l, ids, want, false)
		for _, b := range h.batches {
			if err := st.Write(t.Context(), b); err != nil {
				t.Fatalf("%s: write: %v", when, err)
			}
		}
		h.batches = nil
		for i, id := range ids {
			j, err := st.Job(t.Context(), id)
			w := want[i]
			if w.gone {
				if err != nil || !j.State.Terminal() {
					t.Errorf("%s: stored job %d %+v, %v; want ended", when, i, j, err)
				}
				continue
			}
			attempts := w.attempts
			if i == placed {
				attempts--
			}
			if err != nil || j.ID != id || j.ArrayIndex == nil || *j.ArrayIndex != i || j.State != w.state ||
				!strings.HasPrefix(j.Reason, w.reason) || j.Attempts != attempts {
				t.Errorf("%s: stored job %d %+v, %v; want %s, %d attempts", when, i, j, err, w.state, attempts)
			}
		}
		again := New(Config{Now: h.clock.Now})
		ld := &jobLoader{c: again}
		a, err := st.LoadActive(t.Context(), ld.add)
		if err != nil {
			t.Fatal(err)
		}
		again.rebuild(a, ld)
		checkArray(t, when+", restarted", &again.lifecycle, ids, want, true)
	}
	pending := wantJob{state: berth.JobPending, shared: true}
	placed := wantJob{state: berth.JobPending, attempts: 1}
	check("job 0 placed", []wantJob{placed, pending, pending, pending, pending}, 0)

	h.run(s, 1) // job 0 fails: retried after a backoff; job 1 placed
	retrying := wantJob{state: berth.JobPending, reason: "retrying in", attempts: 1}
	check("job 0 failed", []wantJob{retrying, placed, pending, pending, pending}, 1)

	h.step(func() { h.l.stopJob(h.l.jobs[ids[3]], cancelRequestedBy("alice"), h.clock.Now().UTC()) })
	gone := wantJob{gone: true}
	check("job 3 cancelled", []wantJob{retrying, placed, pending, gone, pending}, 1)
	if e := h.event(berth.EventJobCancelled, ids[3]); e.Reason != "cancelled by alice" {
		t.Errorf("job 3 cancelled for %q", e.Reason)
	}

	h.step(func() { h.l.stopJob(h.l.jobs[ids[1]], cancelRequestedBy("bob"), h.clock.Now().UTC()) })
	stopping := wantJob{state: berth.JobPending, reason: ReasonCancelRequested + " by bob", attempts: 1}
	check("job 1 cancel requested", []wantJob{retrying, stopping, pending, gone, pending}, 1)
	assign := h.lastSent(s, wire.TypeJobAssign).(*wire.JobAssign)
	code := 143
	h.from(s, wire.TypeJobResult, &wire.JobResult{AttemptID: assign.AttemptID, State: berth.AttemptFailed, ExitCode: &code})
	// Job 1 ended; the slot goes to job 2, the next in the queue (job 0
	// waits out its backoff).
	check("job 1 cancelled", []wantJob{retrying, gone, placed, gone, pending}, 2)
	if got := h.l.jobs[ids[4]].view(); got.ID != "" || got.State != berth.JobPending || got.Attempts != 0 {
		t.Errorf("the array's shared job changed: %+v", got)
	}
}

// TestSharesTemplateWeighsEveryField changes each field of a job, one at
// a time, and checks that the job then no longer shares its array's
// template: a field added to berth.Job that sharesTemplate leaves out
// fails here.
func TestSharesTemplateWeighsEveryField(t *testing.T) {
	t.Parallel()
	index := 3
	j := &berth.Job{ID: "j1", JobSpec: berth.DefaultJobSpec(), ArrayIndex: &index, State: berth.JobPending,
		CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	j.Command, j.Env = berth.Argv{"true"}, map[string]string{"A": "1"}
	template := arrayTemplate(j)
	if !sharesTemplate(template, j) {
		t.Fatal("a job does not share the template made from it")
	}
	other := *j
	other.ID, other.ArrayIndex = "j2", nil
	if !sharesTemplate(template, &other) {
		t.Error("a job differing only in ID and index does not share")
	}
	var walk func(path string, v reflect.Value)
	walk = func(path string, v reflect.Value) {
		for i := range v.NumField() {
			f, name := v.Field(i), path+v.Type().Field(i).Name
			if name == "ID" || name == "ArrayIndex" {
				continue
			}
			if f.Kind() == reflect.Struct && f.Type() != reflect.TypeFor[time.Time]() {
				walk(name+".", f)
				continue
			}
			k := *j
			k.Env = map[string]string{"A": "1"}
			changeField(t, name, reflect.ValueOf(&k).Elem(), strings.Split(name, "."))
			if sharesTemplate(template, &k) {
				t.Errorf("a job whose %s differs shares the template", name)
			}
		}
	}
	walk("", reflect.ValueOf(j).Elem())
}

// changeField sets the field at path in v to a value other than its own.
func changeField(t *testing.T, name string, v reflect.Value, path []string) {
	t.Helper()
	f := v.FieldByName(path[0])
	if len(path) > 1 {
		changeField(t, name, f, path[1:])
		return
	}
	switch f.Kind() {
	case reflect.String:
		f.SetString(f.String() + "x")
	case reflect.Int, reflect.Int64:
		f.SetInt(f.Int() + 1)
	case reflect.Float64:
		f.SetFloat(f.Float() + 1)
	case reflect.Bool:
		f.SetBool(!f.Bool())
	case reflect.Pointer:
		f.Set(reflect.New(f.Type().Elem()))
	case reflect.Map:
		m := reflect.MakeMap(f.Type())
		m.SetMapIndex(reflect.ValueOf("changed"), reflect.ValueOf("yes"))
		f.Set(m)
	case reflect.Slice:
		f.Set(reflect.Append(f, reflect.ValueOf("changed")))
	case reflect.Struct: // time.Time
		f.Set(reflect.ValueOf(f.Interface().(time.Time).Add(time.Second)))
	default:
		t.Fatalf("%s: no change for a %s", name, f.Kind())
	}
}
