package controller

import (
	"strings"
	"testing"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/wire"
)

// TestOOMIsItsOwnEnd: a job's cpus and memory go to its agent with the
// assignment, and the worker keeps the isolation its agent reports; an
// attempt the agent ended with cause oom keeps failure class oom (and no
// readiness phase: it is no service) and exit code 82, on the attempt, the
// job and its job.failed event.
func TestOOMIsItsOwnEnd(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	j := h.submit(func(s *berth.JobSpec) { s.Resources.CPUs, s.Resources.Memory = 0.5, 64<<20 }, "true")
	reg := workerReg()
	reg.Isolation = berth.IsolationCgroupV1
	s := h.agent(reg)
	if got := h.c.workers["w1"].w.Isolation; got != berth.IsolationCgroupV1 {
		t.Fatalf("worker isolation %q, want cgroup-v1", got)
	}
	assign := h.lastSent(s, wire.TypeJobAssign).(*wire.JobAssign)
	if assign.CPUs != 0.5 || assign.Memory != 64<<20 {
		t.Fatalf("assigned cpus %v, memory %v; want the job's 0.5 and 64MiB", assign.CPUs, assign.Memory)
	}
	h.from(s, wire.TypeJobAccepted, &wire.JobAccepted{AttemptID: assign.AttemptID})
	code, _ := berth.CauseExitCode(berth.CauseOOM)
	h.from(s, wire.TypeJobResult, &wire.JobResult{AttemptID: assign.AttemptID, State: berth.AttemptFailed, ExitCode: &code,
		Reason: "oom: killed by the kernel at its memory limit (64MiB); killed by signal SIGKILL", Cause: berth.CauseOOM, Class: berth.FailureOOM})
	if e := h.event(berth.EventJobFailed, j.ID); e.ExitCode == nil || *e.ExitCode != 82 || !strings.HasPrefix(e.Reason, "oom: ") {
		t.Fatalf("job.failed with exit %v, %q; want 82 and the oom reason", e.ExitCode, e.Reason)
	}
	var ended *berth.Attempt
	for _, b := range h.batches {
		for _, a := range b.Attempts {
			if a.ID == assign.AttemptID && a.State.Terminal() {
				ended = a
			}
		}
	}
	if ended == nil || ended.State != berth.AttemptFailed || ended.FailureClass != berth.FailureOOM || ended.Phase != "" ||
		ended.ExitCode == nil || *ended.ExitCode != 82 {
		t.Fatalf("ended attempt %+v, want failed, class oom, no phase, exit 82", ended)
	}
	h.checkEnded(berth.JobFailed)
}

// TestAgentReportsAreValidated: a register with an unknown isolation, and
// a result with an unknown cause or failure class, are protocol errors
// that close the session and change nothing.
func TestAgentReportsAreValidated(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	reg := workerReg()
	reg.Isolation = "chroot"
	bad := newSession(newPipeConn(), "")
	h.from(bad, wire.TypeRegister, reg)
	if bad.worker != nil || h.c.workers["w1"] != nil {
		t.Fatal("a register with isolation chroot was accepted")
	}
	for _, result := range []wire.JobResult{{Cause: "cosmic_ray"}, {Class: "gremlins"}} {
		h := newHarness(t)
		h.submit(nil, "true")
		s := h.agent(workerReg())
		assign := h.lastSent(s, wire.TypeJobAssign).(*wire.JobAssign)
		h.from(s, wire.TypeJobAccepted, &wire.JobAccepted{AttemptID: assign.AttemptID})
		result.AttemptID, result.State = assign.AttemptID, berth.AttemptFailed
		h.from(s, wire.TypeJobResult, &result)
		select {
		case <-s.closed:
		default:
			t.Errorf("result %+v did not close the session", result)
		}
		if as := h.l.attempts[assign.AttemptID]; as == nil || as.a.State != berth.AttemptRunning {
			t.Errorf("result %+v changed the attempt: %+v", result, as)
		}
	}
}
