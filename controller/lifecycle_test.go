package controller

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/scheduler"
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
	h.checkEnded(berth.JobSucceeded)
}

// TestLifecycleRefusesIllegalTransitions: an ended job does not run again
// and an attempt does not end twice; the refusal is an error and changes
// nothing, counters included.
func TestLifecycleRefusesIllegalTransitions(t *testing.T) {
	t.Parallel()
	h := newLifecycleHarness(t)
	j := h.submit(nil, "true")
	h.worker(workerReg())
	as := h.runLaunched(0)
	js := as.job
	before := h.counts()
	err := h.l.transitionJob(js, berth.JobRunning, berth.Event{Type: berth.EventJobRunning})
	var e *berth.Error
	if !errors.As(err, &e) || e.Code != berth.ECodeInternal {
		t.Errorf("succeeded → running: %v, want an ECodeInternal error", err)
	}
	if js.view().State != berth.JobSucceeded {
		t.Errorf("job %s is %s after a refused transition, want succeeded", j.ID, js.view().State)
	}
	if err := h.l.transitionAttempt(as, berth.AttemptFailed); !errors.As(err, &e) || e.Code != berth.ECodeInternal {
		t.Errorf("ending an attempt twice: %v, want an ECodeInternal error", err)
	}
	n := len(h.batches)
	h.step(func() { h.l.endAttempt(as, berth.AttemptLost, nil, "again", h.clock.Now()) })
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
	h := newLifecycleHarness(t)
	h.worker(workerReg())
	j := h.submit(nil, "false")
	h.runLaunched(3)
	if e := h.event(berth.EventJobFailed, j.ID); e.ExitCode == nil || *e.ExitCode != 3 {
		t.Fatalf("job.failed event %+v: exit code %v, want 3", e, e.ExitCode)
	}
}

// TestLifecycleRetriesAfterABackoff: a failed job within its retries waits
// out a doubling backoff, out of the queue, prefers other workers from
// then on, and fails once its retries are spent.
func TestLifecycleRetriesAfterABackoff(t *testing.T) {
	t.Parallel()
	h := newLifecycleHarness(t)
	h.worker(workerReg())
	j := h.submit(func(spec *berth.JobSpec) { spec.Retries = 2 }, "false")
	js := h.l.jobs[j.ID]
	for i, delay := range []time.Duration{time.Second, 2 * time.Second} {
		h.runLaunched(1)
		want := fmt.Sprintf("retrying in %v after attempt %d failed: exit code 1", delay, i+1)
		if e := h.event(berth.EventJobRequeued, j.ID); e.Reason != want || js.view().Reason != want {
			t.Errorf("requeued for %q, job says %q; want %q", e.Reason, js.view().Reason, want)
		}
		if _, waiting := h.l.restarting[js]; !waiting || !js.restartAt().Equal(h.clock.Now().UTC().Add(delay)) {
			t.Errorf("after attempt %d: backing off %v until %v, want until %v from now", i+1, waiting, js.restartAt(), delay)
		}
		if got := h.counts(); got[berth.JobPending] != 1 || len(got) != 1 {
			t.Errorf("counts in the backoff %v, want 1 pending", got)
		}
		if !slices.Equal(js.avoid(), []string{"w1"}) {
			t.Errorf("avoids %v, want w1", js.avoid())
		}
		n := len(h.be.launched)
		h.clock.Advance(delay - time.Millisecond)
		h.step(func() { h.l.requeueDue(h.clock.Now().UTC()) })
		if len(h.be.launched) != n {
			t.Fatalf("placed again before its backoff of %v ended", delay)
		}
		h.clock.Advance(time.Millisecond)
		h.step(func() { h.l.requeueDue(h.clock.Now().UTC()) })
		if len(h.be.launched) != n+1 {
			t.Fatalf("not placed again once its backoff of %v ended", delay)
		}
	}
	h.runLaunched(1)
	if e := h.event(berth.EventJobFailed, j.ID); e.Reason != "exit code 1" || js.view().Attempts != 3 {
		t.Errorf("failed for %q after %d attempts, want exit code 1 after 3", e.Reason, js.view().Attempts)
	}
	if got := h.counts(); got[berth.JobFailed] != 1 || len(got) != 1 {
		t.Errorf("counts after the last retry %v, want 1 failed", got)
	}
}

// TestLifecycleCancelsARunningJob: a cancel of a running job stops its
// attempt on its backend, naming who asked; the job stays running until
// the attempt ends, then ends cancelled.
func TestLifecycleCancelsARunningJob(t *testing.T) {
	t.Parallel()
	h := newLifecycleHarness(t)
	h.worker(workerReg())
	j := h.submit(nil, "sleep", "60")
	as := h.launched()
	h.step(func() { h.l.markRunning(as, h.clock.Now().UTC()) })
	h.step(func() { h.l.stopJob(as.job, cancelRequestedBy("alice"), h.clock.Now().UTC()) })
	if len(h.be.stopped) != 1 || h.be.stopped[0] != (stopCall{as.a.ID, "cancelled by alice", ""}) {
		t.Errorf("stops %+v, want %s cancelled by alice", h.be.stopped, as.a.ID)
	}
	last := h.batches[len(h.batches)-1]
	if len(last.JobUpdates) != 1 || last.JobUpdates[0].State != berth.JobRunning || last.JobUpdates[0].Reason != "cancel requested by alice" {
		t.Errorf("the cancel wrote %+v, want the job running, its cancel requested by alice", last.JobUpdates)
	}
	if got := h.counts(); got[berth.JobRunning] != 1 || len(got) != 1 {
		t.Errorf("counts while stopping %v, want 1 running", got)
	}
	h.step(func() { h.l.endAttempt(as, berth.AttemptCancelled, nil, "", h.clock.Now().UTC()) })
	if e := h.event(berth.EventJobCancelled, j.ID); e.Reason != "cancelled by alice" {
		t.Errorf("cancelled for %q, want cancelled by alice", e.Reason)
	}
	h.checkEnded(berth.JobCancelled)
}

// TestLifecycleRequeuesAPreemptedJob: a plan's preemption stops its victim
// once, naming the job it makes room for; the victim's end requeues its
// job without spending a retry.
func TestLifecycleRequeuesAPreemptedJob(t *testing.T) {
	t.Parallel()
	h := newLifecycleHarness(t)
	h.worker(workerReg())
	j := h.submit(nil, "sleep", "60")
	as := h.launched()
	h.step(func() { h.l.markRunning(as, h.clock.Now().UTC()) })
	plan := scheduler.Plan{Preemptions: []scheduler.Preemption{{AttemptID: as.a.ID, JobID: j.ID, WorkerID: "w1", For: "j2"}}}
	for range 2 { // the second is a victim already being stopped
		h.step(func() { h.l.applyPlan(&plan, h.clock.Now().UTC()) })
	}
	if len(h.be.stopped) != 1 || h.be.stopped[0] != (stopCall{as.a.ID, "preempted by job j2", ""}) {
		t.Errorf("stops %+v, want %s once, preempted by job j2", h.be.stopped, as.a.ID)
	}
	if e := h.event(berth.EventJobPreempted, j.ID); e.Reason != "preempted by job j2" || e.WorkerID != "w1" {
		t.Errorf("job.preempted %+v, want preempted by job j2 on w1", e)
	}
	if len(h.l.preempted) != 1 {
		t.Errorf("%d preemptions counted, want 1", len(h.l.preempted))
	}
	h.step(func() { h.l.endAttempt(as, berth.AttemptPreempted, nil, "preempted by job j2", h.clock.Now().UTC()) })
	if e := h.event(berth.EventJobRequeued, j.ID); e.Reason != "preempted by job j2" {
		t.Errorf("requeued for %q, want preempted by job j2", e.Reason)
	}
	again := h.launched() // placed again in the same pass: the slot is free
	if again == as || again.job.view().Attempts != 1 {
		t.Errorf("placed again as %s, attempt %d; want a new attempt, still the first that counts", again.a.ID, again.job.view().Attempts)
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

// TestServiceThatCannotStartFailsAtOnce: a service whose first run could
// not start its program (class cannot_start) fails at once with the
// reason, not restarted; one that ran before and then cannot start is
// restarted like any other end.
func TestServiceThatCannotStartFailsAtOnce(t *testing.T) {
	t.Parallel()
	end := func(h *harness, code int, class, reason string) {
		as := h.launched()
		h.step(func() { h.l.markRunning(as, h.clock.Now().UTC()) })
		as.a.FailureClass = class
		h.step(func() { h.l.endAttempt(as, berth.AttemptFailed, &code, reason, h.clock.Now().UTC()) })
	}
	service := func(spec *berth.JobSpec) { spec.Kind, spec.Retries = berth.KindService, 10 }

	h := newLifecycleHarness(t)
	h.worker(workerReg())
	j := h.submit(service, "sh", "-c", "vllm serve m")
	end(h, 127, berth.FailureCannotStart, "exit code 127: sh: 1: vllm: not found")
	e := h.event(berth.EventJobFailed, j.ID)
	if want := "cannot_start: exit code 127: sh: 1: vllm: not found"; e.Reason != want || e.ExitCode == nil || *e.ExitCode != 127 {
		t.Errorf("job.failed %q, exit code %v; want %q, 127", e.Reason, e.ExitCode, want)
	}
	if len(h.be.launched) != 1 {
		t.Errorf("%d attempts launched, want 1: no restart", len(h.be.launched))
	}
	h.checkEnded(berth.JobFailed)

	h = newLifecycleHarness(t)
	h.worker(workerReg())
	j = h.submit(service, "sh", "-c", "vllm serve m")
	end(h, 1, "", "exit code 1")
	h.clock.Advance(time.Second)
	h.step(func() { h.l.requeueDue(h.clock.Now().UTC()) })
	end(h, 127, berth.FailureCannotStart, "exit code 127: sh: 1: vllm: not found")
	if e := h.event(berth.EventJobRequeued, j.ID); !strings.Contains(e.Reason, "restart 2 of 10") {
		t.Errorf("a second run that cannot start: requeued for %q, want a restart", e.Reason)
	}
	if got := h.counts(); got[berth.JobPending] != 1 || len(got) != 1 {
		t.Errorf("counts %v, want the service pending its restart", got)
	}
}

// TestAGoneWorkerRequeuesWithoutSpendingARetry: a worker whose machine
// is known gone (WorkerGone: a rented instance vanished) is lost at once,
// without waiting out its lease; the attempt it ran is lost with it and
// its job, with no retry left, is queued again rather than failed.
func TestAGoneWorkerRequeuesWithoutSpendingARetry(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	s := h.agent(workerReg())
	j := h.submit(nil, "sleep", "60")
	assign := h.lastSent(s, wire.TypeJobAssign).(*wire.JobAssign)
	h.from(s, wire.TypeJobAccepted, &wire.JobAccepted{AttemptID: assign.AttemptID})
	h.step(func() { h.c.workerGone("gpu-1", "instance vanished") })
	var lost bool
	for _, e := range h.events {
		lost = lost || e.Type == berth.EventWorkerLost && e.WorkerID == "w1"
	}
	if !lost {
		t.Fatalf("no worker.lost event in %+v", h.events)
	}
	if e := h.event(berth.EventJobRequeued, j.ID); !strings.Contains(e.Reason, "worker gpu-1 lost") {
		t.Errorf("job requeued for %q, want worker gpu-1 lost", e.Reason)
	}
	if got := h.counts(); got[berth.JobPending] != 1 || len(got) != 1 {
		t.Errorf("counts %v, want the job pending again", got)
	}
	if got := h.l.jobs[j.ID].view().Attempts; got != 0 {
		t.Errorf("attempts counted %d, want 0: no retry spent", got)
	}
	h.step(func() { h.c.workerGone("gpu-1", "instance vanished") }) // again: nothing left to do
	h.step(func() { h.c.workerGone("nobody", "instance vanished") })
}
