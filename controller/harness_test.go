package controller

import (
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/internal/fakeclock"
	"github.com/berth-dev/berth/scheduler"
	"github.com/berth-dev/berth/store"
	"github.com/berth-dev/berth/wire"
)

// harness drives the controller's lifecycle the way its loop does, on the
// test's goroutine, with a fake clock and no store: each step feeds one
// input (a submission, an agent message, a housekeeping tick), runs the
// scheduling pass it calls for, and records the effects instead of
// committing them: the batches written, the events published and the
// messages sent. Callbacks waiting on durability run at once. In the
// manner of Nomad's scheduler/tests Harness.
//
// newHarness drives a whole Controller, agents' sessions included;
// newLifecycleHarness drives a bare lifecycle, its attempts running on a
// fakeBackend, its inputs the lifecycle's own functions.
type harness struct {
	t     *testing.T
	clock *fakeclock.Clock
	l     *lifecycle
	c     *Controller  // nil for a bare lifecycle
	be    *fakeBackend // nil for a Controller, whose backend is its agent pool
	pass  func()       // the scheduling pass

	batches []*store.Batch
	events  []berth.Event
	sent    []sentMsg
}

// sentMsg is a message the lifecycle sent an agent.
type sentMsg struct {
	to  *session
	typ string
	msg any
}

func newHarness(t *testing.T) *harness {
	clock := fakeclock.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	c := New(Config{Now: clock.Now})
	return &harness{t: t, clock: clock, l: &c.lifecycle, c: c, pass: c.runPass}
}

// newLifecycleHarness returns a harness over a bare lifecycle with the
// default Config, whose pass places the queue on the fakeBackend's
// workers and applies the plan.
func newLifecycleHarness(t *testing.T) *harness {
	return newLifecycleHarnessWith(t, func(*Config) {})
}

// newLifecycleHarnessWith is newLifecycleHarness with the Config edit
// makes before its defaults are set.
func newLifecycleHarnessWith(t *testing.T, edit func(*Config)) *harness {
	clock := fakeclock.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	cfg := Config{Now: clock.Now}
	edit(&cfg)
	cfg.setDefaults()
	l := newLifecycle(&cfg)
	be := &fakeBackend{l: &l}
	l.agents = be
	h := &harness{t: t, clock: clock, l: &l, be: be}
	h.pass = func() {
		l.dirty = false
		now := clock.Now().UTC()
		plan := scheduler.RunPass(l.queue, &scheduler.Snapshot{Now: now, Workers: be.Capacity(nil)})
		l.applyPlan(&plan, now)
	}
	return h
}

// fakeBackend is a Backend that records what the lifecycle asks of it,
// the attempts launched and the stops, and offers the lifecycle's workers
// to the scheduler.
type fakeBackend struct {
	l        *lifecycle
	launched []*berth.Attempt
	stopped  []stopCall
}

// stopCall is one Stop the lifecycle asked of a fakeBackend.
type stopCall struct {
	attempt, reason, cause string
}

func (b *fakeBackend) Capacity(into []*scheduler.Worker) []*scheduler.Worker {
	for _, ws := range b.l.order {
		into = append(into, ws.sched)
	}
	return into
}

func (b *fakeBackend) Launch(_ *berth.Job, a *berth.Attempt, _ map[string]string) {
	b.launched = append(b.launched, a)
}

func (b *fakeBackend) Stop(a *berth.Attempt, reason, cause string) {
	b.stopped = append(b.stopped, stopCall{a.ID, reason, cause})
}

func (b *fakeBackend) Status() berth.BackendStatus { return berth.BackendStatus{Name: "fake"} }

func (b *fakeBackend) Close() {}

// step runs fn as one pass of the loop and records its effects.
func (h *harness) step(fn func()) {
	h.t.Helper()
	fn()
	if h.l.dirty {
		h.pass()
	}
	b, after := h.l.fx.take()
	if b != nil {
		h.batches = append(h.batches, b)
	}
	for _, e := range after {
		switch {
		case e.to != nil:
			h.sent = append(h.sent, sentMsg{e.to, e.typ, e.msg})
		case e.events != nil:
			h.events = append(h.events, e.events...)
		default:
			e.fn()
		}
	}
}

// submit creates the jobs of a command, as a valid submission does.
func (h *harness) submit(edit func(*berth.JobSpec), command ...string) *berth.Job {
	h.t.Helper()
	spec := berth.DefaultJobSpec()
	spec.Command = command
	if edit != nil {
		edit(&spec)
	}
	req := &berth.SubmitRequest{JobSpec: spec}
	if err := req.Validate(); err != nil {
		h.t.Fatal(err)
	}
	var jobs []*berth.Job
	h.step(func() { jobs = h.l.createJobs(req, "test") })
	return jobs[0]
}

// agent registers reg on a new session and returns the session.
func (h *harness) agent(reg *wire.Register) *session {
	h.t.Helper()
	s := newSession(newPipeConn(), "")
	h.from(s, wire.TypeRegister, reg)
	if s.worker == nil {
		h.t.Fatalf("register %s refused", reg.WorkerID)
	}
	return s
}

// from delivers an agent's message on s.
func (h *harness) from(s *session, typ string, msg any) {
	h.t.Helper()
	h.step(func() { h.c.handle(s, typ, msg) })
}

// housekeep advances the clock by d and runs the housekeeping tick.
func (h *harness) housekeep(d time.Duration) {
	h.t.Helper()
	h.clock.Advance(d)
	h.step(h.c.housekeep)
}

// lastSent returns the last message of type typ sent to s, or fails.
func (h *harness) lastSent(s *session, typ string) any {
	h.t.Helper()
	for i := len(h.sent) - 1; i >= 0; i-- {
		if m := h.sent[i]; m.to == s && m.typ == typ {
			return m.msg
		}
	}
	h.t.Fatalf("no %s sent", typ)
	return nil
}

// event returns the last event of type typ about job id, or fails.
func (h *harness) event(typ, id string) berth.Event {
	h.t.Helper()
	for i := len(h.events) - 1; i >= 0; i-- {
		if e := h.events[i]; e.Type == typ && e.JobID == id {
			return e
		}
	}
	h.t.Fatalf("no %s event for job %s in %+v", typ, id, h.events)
	return berth.Event{}
}

// checkEnded checks that the one job the test ran ended in st: the
// counters hold it alone, and no job or attempt is left in memory.
func (h *harness) checkEnded(st berth.JobState) {
	h.t.Helper()
	if got := h.counts(); got[st] != 1 || len(got) != 1 {
		h.t.Errorf("counts after the end %v, want 1 %s", got, st)
	}
	if len(h.l.jobs) != 0 || len(h.l.attempts) != 0 {
		h.t.Errorf("%d jobs, %d attempts left in memory, want none", len(h.l.jobs), len(h.l.attempts))
	}
}

// counts returns the job counters, leaving out zeros.
func (h *harness) counts() map[berth.JobState]int {
	out := map[berth.JobState]int{}
	for st, n := range h.l.stats.jobs {
		if n != 0 {
			out[st] = n
		}
	}
	return out
}

// run accepts the next assignment sent to s and reports it ended with
// code; it returns the assignment.
func (h *harness) run(s *session, code int) *wire.JobAssign {
	h.t.Helper()
	assign := h.lastSent(s, wire.TypeJobAssign).(*wire.JobAssign)
	h.from(s, wire.TypeJobAccepted, &wire.JobAccepted{AttemptID: assign.AttemptID})
	st := berth.AttemptSucceeded
	if code != 0 {
		st = berth.AttemptFailed
	}
	h.from(s, wire.TypeJobResult, &wire.JobResult{AttemptID: assign.AttemptID, State: st, ExitCode: &code})
	return assign
}

// worker adds a connected worker of reg's capacity to a bare lifecycle,
// taking work from the default queue, and returns it.
func (h *harness) worker(reg *wire.Register) *workerState {
	h.t.Helper()
	ws := newWorkerState(&berth.Worker{ID: reg.WorkerID, Host: reg.Host, Queues: reg.Queues, CPUs: reg.CPUs,
		Memory: reg.Memory, Slots: reg.Slots, GPUs: reg.GPUs, State: berth.WorkerReady})
	ws.sess = newSession(newPipeConn(), reg.Host) // connected: the scheduler places on it
	ws.recompute()
	h.step(func() {
		h.l.addWorker(ws)
		h.l.dirty = true
	})
	return ws
}

// launched returns the attempt the fakeBackend last launched, or fails.
func (h *harness) launched() *attemptState {
	h.t.Helper()
	if len(h.be.launched) == 0 {
		h.t.Fatal("nothing launched")
	}
	as := h.l.attempts[h.be.launched[len(h.be.launched)-1].ID]
	if as == nil {
		h.t.Fatal("the last attempt launched has ended")
	}
	return as
}

// runLaunched starts the attempt last launched and ends it with code; it
// returns the attempt.
func (h *harness) runLaunched(code int) *attemptState {
	h.t.Helper()
	as := h.launched()
	h.step(func() { h.l.markRunning(as, h.clock.Now().UTC()) })
	st := berth.AttemptSucceeded
	if code != 0 {
		st = berth.AttemptFailed
	}
	h.step(func() { h.l.endAttempt(as, st, &code, "", h.clock.Now().UTC()) })
	return as
}
