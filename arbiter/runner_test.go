package arbiter_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/arbiter"
)

// submitter is a fake Submit: it records every request (and the actor its
// context carries) and answers with a job per request, or with err.
type submitter struct {
	mu     sync.Mutex
	reqs   []berth.SubmitRequest
	actors []string
	err    error
}

func (s *submitter) Submit(ctx context.Context, req *berth.SubmitRequest) ([]*berth.Job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs = append(s.reqs, *req)
	s.actors = append(s.actors, berth.ActorFrom(ctx))
	if s.err != nil {
		return nil, s.err
	}
	return []*berth.Job{{ID: fmt.Sprintf("job-%d", len(s.reqs)), JobSpec: req.JobSpec}}, nil
}

// keys returns the idempotency keys submitted, in order.
func (s *submitter) keys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var keys []string
	for _, r := range s.reqs {
		keys = append(keys, r.IdempotencyKey)
	}
	return keys
}

// testJob returns a valid job spec running argv.
func testJob(argv ...string) *berth.SubmitRequest {
	j := &berth.SubmitRequest{JobSpec: berth.DefaultJobSpec()}
	j.Name, j.User, j.Command = "scheduled", "alice", argv
	return j
}

// runFixture is a registry and a runner on one SQLite store, one clock and
// one fake Submit.
type runFixture struct {
	path  string
	reg   *arbiter.Registry
	run   *arbiter.Runner
	clock *clock
	sub   *submitter
}

func newRunFixture(t *testing.T) *runFixture {
	t.Helper()
	f := &runFixture{path: filepath.Join(t.TempDir(), "berth.db"), clock: newClock(t0), sub: &submitter{}}
	st := openStore(t, f.path)
	f.reg = arbiter.NewRegistry(st)
	f.reg.Now = f.clock.Now
	f.run = &arbiter.Runner{Store: st, Submit: f.sub.Submit, Now: f.clock.Now}
	return f
}

// put registers req, failing t on an error.
func (f *runFixture) put(t *testing.T, req berth.ScheduleRequest) *berth.Schedule {
	t.Helper()
	s, err := f.reg.Put(t.Context(), req)
	if err != nil {
		t.Fatalf("Put(%s): %v", req.ID, err)
	}
	return s
}

// tickAt moves the clock to at and looks once, failing t on an error.
func (f *runFixture) tickAt(t *testing.T, at time.Time) {
	t.Helper()
	if d := at.Sub(f.clock.Now()); d > 0 {
		f.clock.Advance(d)
	}
	if err := f.run.Tick(t.Context()); err != nil {
		t.Fatalf("Tick at %s: %v", at, err)
	}
}

// entry returns entry id as stored.
func (f *runFixture) entry(t *testing.T, id string) *berth.Schedule {
	t.Helper()
	list, err := f.reg.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list {
		if s.ID == id {
			return s
		}
	}
	t.Fatalf("no entry %s", id)
	return nil
}

func key(id string, t time.Time) string {
	return "schedule:" + id + ":" + strconv.FormatInt(t.Unix(), 10)
}

func wantKeys(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s: submitted %q, want %q", what, got, want)
	}
}

// day returns 2026-06-DD hh:mm UTC (t0 is 2026-06-17 12:00:00.123456789).
func day(dd, hh, mm int) time.Time { return time.Date(2026, 6, dd, hh, mm, 0, 0, time.UTC) }

func TestRunnerRunsAtCronTimes(t *testing.T) {
	t.Parallel()
	f := newRunFixture(t)
	f.put(t, berth.ScheduleRequest{ID: "daily", Name: "Daily", Cron: "0 6 * * *", Job: testJob("python", "report.py")})
	// Today's 06:00 passed before the entry was registered: not run.
	f.tickAt(t, t0)
	f.tickAt(t, day(18, 5, 59))
	wantKeys(t, "before the first time", f.sub.keys())

	f.tickAt(t, day(18, 6, 0))
	wantKeys(t, "at 06:00", f.sub.keys(), key("daily", day(18, 6, 0)))
	got := f.sub.reqs[0]
	if !slices.Equal(got.Command, berth.Argv{"python", "report.py"}) || got.User != "alice" || got.Queue != berth.DefaultQueue {
		t.Errorf("submitted %+v; want the entry's job", got)
	}
	if f.sub.actors[0] != "schedule/daily" {
		t.Errorf("actor %q, want schedule/daily", f.sub.actors[0])
	}
	s := f.entry(t, "daily")
	if !s.LastRun.Equal(day(18, 6, 0)) || s.LastJobID != "job-1" || s.LastError != "" {
		t.Errorf("after the run: last_run %s, last_job_id %q, last_error %q", s.LastRun, s.LastJobID, s.LastError)
	}
	if s.Job.IdempotencyKey != "" {
		t.Errorf("the stored job got the run's key %q", s.Job.IdempotencyKey)
	}

	// Later looks of the same minute and day run nothing more.
	f.tickAt(t, day(18, 6, 0).Add(30*time.Second))
	f.tickAt(t, day(19, 5, 59))
	wantKeys(t, "until the next time", f.sub.keys(), key("daily", day(18, 6, 0)))
	f.tickAt(t, day(19, 6, 1)) // a late look still runs it, once
	wantKeys(t, "the next day", f.sub.keys(), key("daily", day(18, 6, 0)), key("daily", day(19, 6, 0)))
}

func TestRunnerCollapsesMissedRuns(t *testing.T) {
	t.Parallel()
	f := newRunFixture(t)
	job := testJob("true")
	job.Name = ""
	f.put(t, berth.ScheduleRequest{ID: "hourly", Name: "Hourly", Cron: "0 * * * *", Job: job})
	f.tickAt(t, day(17, 13, 0))
	wantKeys(t, "first hour", f.sub.keys(), key("hourly", day(17, 13, 0)))
	if name := f.sub.reqs[0].Name; name != "Hourly" {
		t.Errorf("a job without a name submitted as %q; want the entry's name", name)
	}
	// Down from 13:00 to 18:30: 14:00 to 18:00 were missed; only 18:00 runs.
	f.tickAt(t, day(17, 18, 30))
	f.tickAt(t, day(17, 18, 59))
	wantKeys(t, "after the gap", f.sub.keys(), key("hourly", day(17, 13, 0)), key("hourly", day(17, 18, 0)))
	// A year down: one run, and it does not take a year of steps.
	f.tickAt(t, time.Date(2027, 6, 17, 18, 30, 0, 0, time.UTC))
	wantKeys(t, "after a year", f.sub.keys()[2:], key("hourly", time.Date(2027, 6, 17, 18, 0, 0, 0, time.UTC)))
}

func TestRunnerRestartDoesNotRerun(t *testing.T) {
	t.Parallel()
	f := newRunFixture(t)
	f.put(t, berth.ScheduleRequest{ID: "nightly", Name: "Nightly", Cron: "0 2 * * *", Job: testJob("true")})
	f.tickAt(t, day(18, 2, 0))
	wantKeys(t, "first run", f.sub.keys(), key("nightly", day(18, 2, 0)))

	// A new runner on the store reopened (a restart), within the same
	// minute and later that day: nothing runs again.
	again := &arbiter.Runner{Store: openStore(t, f.path), Submit: f.sub.Submit, Now: f.clock.Now}
	for _, at := range []time.Time{day(18, 2, 0).Add(59 * time.Second), day(18, 23, 0)} {
		f.clock.Advance(at.Sub(f.clock.Now()))
		if err := again.Tick(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	wantKeys(t, "after the restart", f.sub.keys(), key("nightly", day(18, 2, 0)))
	f.clock.Advance(day(19, 2, 0).Sub(f.clock.Now()))
	if err := again.Tick(t.Context()); err != nil {
		t.Fatal(err)
	}
	wantKeys(t, "the next night", f.sub.keys(), key("nightly", day(18, 2, 0)), key("nightly", day(19, 2, 0)))
}

func TestRunnersRacingNeverDoubleSubmit(t *testing.T) {
	t.Parallel()
	f := newRunFixture(t)
	f.put(t, berth.ScheduleRequest{ID: "a", Name: "every minute", Cron: "* * * * *", Job: testJob("true")})
	f.put(t, berth.ScheduleRequest{ID: "b", Name: "every other minute", Cron: "*/2 * * * *", Job: testJob("true")})
	// Four runners, as four servers: two on their own handles of the file.
	runners := []*arbiter.Runner{f.run, f.run,
		{Store: openStore(t, f.path), Submit: f.sub.Submit, Now: f.clock.Now},
		{Store: openStore(t, f.path), Submit: f.sub.Submit, Now: f.clock.Now}}
	var want []string
	for m := 1; m <= 20; m++ {
		at := t0.Truncate(time.Minute).Add(time.Duration(m) * time.Minute)
		f.clock.Advance(at.Sub(f.clock.Now()))
		var wg sync.WaitGroup
		for _, r := range runners {
			wg.Go(func() {
				if err := r.Tick(t.Context()); err != nil {
					t.Errorf("Tick: %v", err)
				}
			})
		}
		wg.Wait()
		want = append(want, key("a", at))
		if at.Minute()%2 == 0 {
			want = append(want, key("b", at))
		}
	}
	got := map[string]int{}
	for _, k := range f.sub.keys() {
		got[k]++
	}
	for _, k := range want {
		if got[k] != 1 {
			t.Errorf("run %s submitted %d times; want once", k, got[k])
		}
	}
	if len(got) != len(want) {
		t.Errorf("submitted %d distinct runs, want %d: %v", len(got), len(want), got)
	}
}

func TestRunnerSkipsDisplayOnlyEntries(t *testing.T) {
	t.Parallel()
	f := newRunFixture(t)
	f.put(t, berth.ScheduleRequest{ID: "display", Name: "Daily Vol", Cron: "* * * * *", NextRun: "2026-06-18T06:00:00Z"})
	for d := 1; d <= 3; d++ {
		f.tickAt(t, t0.Add(time.Duration(d)*24*time.Hour))
	}
	wantKeys(t, "display-only", f.sub.keys())
	if s := f.entry(t, "display"); !s.LastRun.IsZero() || s.Job != nil {
		t.Errorf("display-only entry after looks: %+v", s)
	}
}

func TestRunnerFailedSubmitIsRecordedNotRetried(t *testing.T) {
	t.Parallel()
	f := newRunFixture(t)
	f.put(t, berth.ScheduleRequest{ID: "flaky", Name: "Flaky", Cron: "0 * * * *", Job: testJob("true")})
	f.sub.err = berth.Invalidf("template", "no template vllm2")
	f.tickAt(t, day(17, 13, 0))
	f.tickAt(t, day(17, 13, 30))
	wantKeys(t, "failed run", f.sub.keys(), key("flaky", day(17, 13, 0)))
	s := f.entry(t, "flaky")
	if !s.LastRun.Equal(day(17, 13, 0)) || s.LastJobID != "" || s.LastError != "template: no template vllm2" {
		t.Errorf("after a failed run: last_run %s, last_job_id %q, last_error %q", s.LastRun, s.LastJobID, s.LastError)
	}
	f.sub.err = nil
	f.tickAt(t, day(17, 14, 0))
	wantKeys(t, "the next run", f.sub.keys(), key("flaky", day(17, 13, 0)), key("flaky", day(17, 14, 0)))
	if s := f.entry(t, "flaky"); s.LastError != "" || s.LastJobID != "job-2" {
		t.Errorf("after a good run: last_job_id %q, last_error %q", s.LastJobID, s.LastError)
	}
}

func TestRunnerChangeStartsAfresh(t *testing.T) {
	t.Parallel()
	f := newRunFixture(t)
	req := berth.ScheduleRequest{ID: "e", Name: "E", Cron: "0 * * * *", Job: testJob("true")}
	f.put(t, req)
	f.tickAt(t, day(17, 13, 0))
	// Re-registered unchanged (a scheduler's startup) while 14:00 and
	// 15:00 were missed: the latest is still caught up.
	f.clock.Advance(day(17, 15, 10).Sub(f.clock.Now()))
	f.put(t, req)
	f.tickAt(t, day(17, 15, 20))
	wantKeys(t, "unchanged entry", f.sub.keys(), key("e", day(17, 13, 0)), key("e", day(17, 15, 0)))
	// A changed cron starts afresh: 16:00 and 16:30, missed before the
	// change, are not caught up.
	f.clock.Advance(day(17, 16, 40).Sub(f.clock.Now()))
	req.Cron = "*/30 * * * *"
	f.put(t, req)
	f.tickAt(t, day(17, 16, 50))
	f.tickAt(t, day(17, 17, 0))
	wantKeys(t, "changed cron", f.sub.keys()[2:], key("e", day(17, 17, 0)))
	// A display-only entry given a job runs from then on.
	f.put(t, berth.ScheduleRequest{ID: "later", Name: "L", Cron: "0 * * * *"})
	f.tickAt(t, day(17, 18, 30))
	f.put(t, berth.ScheduleRequest{ID: "later", Name: "L", Cron: "0 * * * *", Job: testJob("true")})
	f.tickAt(t, day(17, 18, 40))
	f.tickAt(t, day(17, 19, 0))
	var later []string
	for _, k := range f.sub.keys() {
		if strings.HasPrefix(k, "schedule:later:") {
			later = append(later, k)
		}
	}
	wantKeys(t, "job added later", later, key("later", day(17, 19, 0)))
}

func TestScheduleJobValidation(t *testing.T) {
	t.Parallel()
	g, _ := newRegistry(t, filepath.Join(t.TempDir(), "berth.db"))
	for _, tc := range []struct {
		name  string
		edit  func(r *berth.ScheduleRequest)
		field string
	}{
		{"job without a cron", func(r *berth.ScheduleRequest) { r.Cron = "" }, "cron"},
		{"bad cron", func(r *berth.ScheduleRequest) { r.Cron = "0 25 * * *" }, "cron"},
		{"no command", func(r *berth.ScheduleRequest) { r.Job.Command = nil }, "job.command"},
		{"bad queue", func(r *berth.ScheduleRequest) { r.Job.Queue = "Bad Queue" }, "job.queue"},
		{"bad gpus", func(r *berth.ScheduleRequest) { r.Job.Resources.GPUs = -1 }, "job.resources.gpus"},
		{"bad array", func(r *berth.ScheduleRequest) { r.Job.Array = -1 }, "job.array"},
		{"own idempotency key", func(r *berth.ScheduleRequest) { r.Job.IdempotencyKey = "k" }, "job.idempotency_key"},
	} {
		r := berth.ScheduleRequest{ID: "x", Name: "n", Cron: "0 6 * * *", Job: testJob("true")}
		tc.edit(&r)
		_, err := g.Put(t.Context(), r)
		wantCode(t, tc.name, err, berth.ECodeInvalid, tc.field)
	}
	if list, _ := g.List(t.Context()); len(list) != 0 {
		t.Fatalf("refused requests registered %+v", list)
	}
}

func TestLatestDue(t *testing.T) {
	t.Parallel()
	c, err := arbiter.ParseCron("30 6 * * MON")
	if err != nil {
		t.Fatal(err)
	}
	mon := time.Date(2026, 6, 15, 6, 30, 0, 0, time.UTC) // a Monday
	for _, tc := range []struct {
		after, now, want time.Time
	}{
		{mon.Add(-time.Hour), mon.Add(-time.Minute), time.Time{}},
		{mon.Add(-time.Hour), mon, mon},
		{mon, mon, time.Time{}},                                   // not after after
		{mon, mon.Add(7*24*time.Hour - time.Second), time.Time{}}, // the next is a week later
		{mon.Add(-time.Second), mon.Add(3 * 7 * 24 * time.Hour), mon.Add(3 * 7 * 24 * time.Hour)},
		{mon.Add(-time.Second), mon.Add(3*7*24*time.Hour - time.Minute), mon.Add(2 * 7 * 24 * time.Hour)},
		{time.Time{}, mon.Add(time.Minute), mon}, // from the beginning of time
		{mon.Add(time.Hour), mon, time.Time{}},   // now before after
	} {
		if got := arbiter.LatestDue(c, tc.after, tc.now); !got.Equal(tc.want) {
			t.Errorf("LatestDue(after %s, now %s) = %s, want %s", tc.after, tc.now, got, tc.want)
		}
	}
	if k := arbiter.RunKey("daily-vol", mon); k != "schedule:daily-vol:"+strconv.FormatInt(mon.Unix(), 10) {
		t.Errorf("RunKey = %q", k)
	}
}

func TestRunnerStartStop(t *testing.T) {
	t.Parallel()
	f := newRunFixture(t)
	f.put(t, berth.ScheduleRequest{ID: "s", Name: "S", Cron: "0 * * * *", Job: testJob("true")})
	f.clock.Advance(day(17, 13, 0).Sub(f.clock.Now()))
	f.run.Every = 10 * time.Millisecond
	if err := (&arbiter.Runner{}).Start(t.Context()); err == nil {
		t.Error("Start without Store and Submit: no error")
	}
	if err := f.run.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := f.run.Start(t.Context()); err == nil {
		t.Error("second Start: no error")
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(f.sub.keys()) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	f.clock.Advance(time.Hour) // 14:00: run by a later look
	for len(f.sub.keys()) < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if err := f.run.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := f.run.Stop(t.Context()); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	wantKeys(t, "started runner", f.sub.keys(), key("s", day(17, 13, 0)), key("s", day(17, 14, 0)))
}

// TestScheduleJobName: a schedule's jobs are named after the entry's name,
// made a valid job name, else its id.
func TestScheduleJobName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ id, name, want string }{
		{"nightly", "Nightly", "Nightly"},
		{"eval", "Nightly eval: all models", "Nightly-eval--all-models"},
		{"sweep", " ünï", "n-"},
		{"daily", "", "daily"},
		{"daily", "---", "daily"},
		{"bad id", "☃", ""},
		{"long", strings.Repeat("x", 200), strings.Repeat("x", 128)},
	} {
		if got := arbiter.JobName(&berth.Schedule{ID: tc.id, Name: tc.name}); got != tc.want {
			t.Errorf("JobName(id %q, name %q) = %q, want %q", tc.id, tc.name, got, tc.want)
		}
	}
}
