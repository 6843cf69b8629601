package controller

import (
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/internal/fakeclock"
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
type harness struct {
	t     *testing.T
	clock *fakeclock.Clock
	c     *Controller

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
	return &harness{t: t, clock: clock, c: New(Config{Now: clock.Now})}
}

// step runs fn as one pass of the loop and records its effects.
func (h *harness) step(fn func()) {
	h.t.Helper()
	fn()
	if h.c.dirty {
		h.c.runPass()
	}
	b, after := h.c.fx.take()
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
	h.step(func() { jobs = h.c.createJobs(req, h.c.pool, "test") })
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

// counts returns the job counters, leaving out zeros.
func (h *harness) counts() map[berth.JobState]int {
	out := map[berth.JobState]int{}
	for st, n := range h.c.stats.jobs {
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
