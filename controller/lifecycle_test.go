package controller

import (
	"errors"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/wire"
)

// TestLifecycleRunsAJob follows one job through the lifecycle: each
// transition writes its rows, publishes its event, tells the agent and
// keeps the counters.
func TestLifecycleRunsAJob(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	j := h.submit(nil, "true")
	if got := h.counts(); got[berth.JobPending] != 1 || len(got) != 1 {
		t.Fatalf("counts after submit %v, want 1 pending", got)
	}
	h.event(berth.EventJobSubmitted, j.ID)
	s := h.agent(workerReg())
	assign := h.lastSent(s, wire.TypeJobAssign).(*wire.JobAssign)
	if assign.JobID != j.ID {
		t.Fatalf("assigned %s, want %s", assign.JobID, j.ID)
	}
	h.from(s, wire.TypeJobAccepted, &wire.JobAccepted{AttemptID: assign.AttemptID})
	if e := h.event(berth.EventJobRunning, j.ID); e.WorkerID != "w1" {
		t.Errorf("job.running on %q, want w1", e.WorkerID)
	}
	if got := h.counts(); got[berth.JobRunning] != 1 || len(got) != 1 {
		t.Fatalf("counts while running %v, want 1 running", got)
	}
	last := h.batches[len(h.batches)-1]
	if len(last.Attempts) != 1 || last.Attempts[0].State != berth.AttemptRunning || len(last.JobUpdates) != 1 ||
		last.JobUpdates[0].State != berth.JobRunning || last.JobUpdates[0].Attempts != 1 {
		t.Errorf("accept wrote %+v %+v, want the attempt running and the job running with 1 attempt", last.Attempts, last.JobUpdates)
	}
	code := 0
	h.from(s, wire.TypeJobResult, &wire.JobResult{AttemptID: assign.AttemptID, State: berth.AttemptSucceeded, ExitCode: &code})
	h.event(berth.EventJobSucceeded, j.ID)
	if ack := h.lastSent(s, wire.TypeAck).(*wire.Ack); ack.Of != wire.AckResult || ack.AttemptID != assign.AttemptID {
		t.Errorf("result acknowledged with %+v", ack)
	}
	if got := h.counts(); got[berth.JobSucceeded] != 1 || len(got) != 1 {
		t.Errorf("counts after the end %v, want 1 succeeded", got)
	}
	if len(h.c.jobs) != 0 || len(h.c.attempts) != 0 {
		t.Errorf("%d jobs, %d attempts left in memory, want none", len(h.c.jobs), len(h.c.attempts))
	}
}

// TestLifecycleRefusesIllegalTransitions: an ended job does not run again
// and an attempt does not end twice; the refusal is an error and changes
// nothing, counters included.
func TestLifecycleRefusesIllegalTransitions(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	j := h.submit(nil, "true")
	s := h.agent(workerReg())
	var as *attemptState
	for _, a := range h.c.attempts {
		as = a
	}
	js := as.job
	h.run(s, 0)
	before := h.counts()
	err := h.c.transitionJob(js, berth.JobRunning, berth.Event{Type: berth.EventJobRunning})
	var e *berth.Error
	if !errors.As(err, &e) || e.Code != berth.ECodeInternal {
		t.Errorf("succeeded → running: %v, want an ECodeInternal error", err)
	}
	if js.job.State != berth.JobSucceeded {
		t.Errorf("job %s is %s after a refused transition, want succeeded", j.ID, js.job.State)
	}
	if err := h.c.transitionAttempt(as, berth.AttemptFailed); !errors.As(err, &e) || e.Code != berth.ECodeInternal {
		t.Errorf("ending an attempt twice: %v, want an ECodeInternal error", err)
	}
	n := len(h.batches)
	h.step(func() { h.c.endAttempt(as, berth.AttemptLost, nil, "again", h.clock.Now()) })
	if len(h.batches) != n || as.a.State != berth.AttemptSucceeded || as.a.Reason != "" {
		t.Errorf("a second end wrote %d batches, left the attempt %s %q; want nothing changed", len(h.batches)-n, as.a.State, as.a.Reason)
	}
	if got := h.counts(); len(got) != len(before) || got[berth.JobSucceeded] != before[berth.JobSucceeded] {
		t.Errorf("counts %v after refused transitions, want %v", got, before)
	}
}

// TestEndEventsCarryTheExitCode checks that a job's end event names the
// exit code its process reported, for SSE readers and webhooks that act on
// it without fetching the job.
func TestEndEventsCarryTheExitCode(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	s := h.agent(workerReg())
	j := h.submit(nil, "false")
	h.run(s, 3)
	if e := h.event(berth.EventJobFailed, j.ID); e.ExitCode == nil || *e.ExitCode != 3 {
		t.Fatalf("job.failed event %+v: exit code %v, want 3", e, e.ExitCode)
	}
}

// TestAnUnacceptedAssignmentIsWithdrawn: an assignment its agent does not
// accept within AcceptTimeout is cancelled and its job queued again
// without spending a retry, and placed again in the same pass.
func TestAnUnacceptedAssignmentIsWithdrawn(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	s := h.agent(workerReg())
	j := h.submit(nil, "true")
	first := h.lastSent(s, wire.TypeJobAssign).(*wire.JobAssign)
	h.housekeep(h.c.cfg.AcceptTimeout / 2)
	if again := h.lastSent(s, wire.TypeJobAssign).(*wire.JobAssign); again.AttemptID != first.AttemptID {
		t.Fatalf("reassigned before the accept timeout")
	}
	h.housekeep(h.c.cfg.AcceptTimeout/2 + time.Second) // within the worker's lease
	if c := h.lastSent(s, wire.TypeJobCancel).(*wire.JobCancel); c.AttemptID != first.AttemptID || c.Reason != reasonWithdrawn {
		t.Errorf("cancel %+v, want %s withdrawn", c, first.AttemptID)
	}
	if e := h.event(berth.EventJobRequeued, j.ID); e.Reason != reasonWithdrawn {
		t.Errorf("requeued for %q, want %q", e.Reason, reasonWithdrawn)
	}
	again := h.lastSent(s, wire.TypeJobAssign).(*wire.JobAssign)
	if again.AttemptID == first.AttemptID || again.Attempt != 1 {
		t.Errorf("placed again as %s, attempt %d; want a new attempt, still the first that counts", again.AttemptID, again.Attempt)
	}
}

// TestALostWorkerEndsItsAttempts: a worker unheard past its lease and the
// fence margin is lost, and the attempt it ran is lost with it: its job,
// with no retry left, fails.
func TestALostWorkerEndsItsAttempts(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	s := h.agent(workerReg())
	j := h.submit(nil, "sleep", "60")
	assign := h.lastSent(s, wire.TypeJobAssign).(*wire.JobAssign)
	h.from(s, wire.TypeJobAccepted, &wire.JobAccepted{AttemptID: assign.AttemptID})
	h.housekeep(h.c.cfg.Lease + h.c.cfg.FenceMargin + 1)
	for _, e := range h.events {
		if e.Type == berth.EventWorkerLost && e.WorkerID == "w1" {
			if e := h.event(berth.EventJobFailed, j.ID); e.Reason != "worker gpu-1 lost" {
				t.Errorf("job failed for %q, want worker gpu-1 lost", e.Reason)
			}
			if got := h.counts(); got[berth.JobFailed] != 1 || len(got) != 1 {
				t.Errorf("counts %v, want 1 failed", got)
			}
			return
		}
	}
	t.Fatalf("no worker.lost event in %+v", h.events)
}
