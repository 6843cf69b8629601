package controller

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/wire"
)

// TestWorkersCountTheGPUsInUse checks a worker's count of the GPUs its
// attempts hold, as berth workers shows it: taken at assignment, given
// back when the attempt ends.
func TestWorkersCountTheGPUsInUse(t *testing.T) {
	t.Parallel()
	c, _ := startOn(t, filepath.Join(t.TempDir(), "berth.db"), time.Now())
	reg := workerReg()
	reg.Slots, reg.GPUs = 2, []berth.GPU{{Index: 0, Model: "T4"}, {Index: 1, Model: "T4"}, {Index: 2, Model: "T4"}}
	agent := registerAgent(t, c, reg)
	inUse := func() int {
		t.Helper()
		ws, err := c.Workers(t.Context())
		if err != nil || len(ws) != 1 {
			t.Fatalf("workers: %v, %v", ws, err)
		}
		return ws[0].GPUsInUse
	}
	spec := berth.DefaultJobSpec()
	spec.Command, spec.Resources.GPUs = berth.Argv{"true"}, 2
	jobs, err := c.Submit(t.Context(), &berth.SubmitRequest{JobSpec: spec})
	if err != nil {
		t.Fatal(err)
	}
	assign := agent.await(wire.TypeJobAssign).(*wire.JobAssign)
	if n := inUse(); n != 2 {
		t.Errorf("GPUs in use while a 2-GPU job is assigned: %d, want 2", n)
	}
	agent.send(wire.TypeJobAccepted, &wire.JobAccepted{AttemptID: assign.AttemptID})
	agent.exit(assign, 0)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if res, err := c.Wait(ctx, []string{jobs[0].ID}, false, ""); err != nil || !res.Done {
		t.Fatalf("wait: %+v, %v", res, err)
	}
	if n := inUse(); n != 0 {
		t.Errorf("GPUs in use once the job ended: %d, want 0", n)
	}
}

// TestControlCountsTheHostsWorkers checks that turning a host off says how
// many workers it has: 1 for a registered one, 0 for a name no agent
// joined as (a typo, most likely).
func TestControlCountsTheHostsWorkers(t *testing.T) {
	t.Parallel()
	c, _ := startOn(t, filepath.Join(t.TempDir(), "berth.db"), time.Now())
	agent := connectAgent(t, c, &wire.Register{Version: wire.Version, WorkerID: "w1", Host: "gpu-1", CPUs: 4, Memory: 8 << 30, Slots: 1})
	if ack := agent.await(wire.TypeAck).(*wire.Ack); ack.Error != "" {
		t.Fatalf("register refused: %s", ack.Error)
	}
	for host, want := range map[string]int{"gpu-1": 1, "gpu1": 0} {
		resp, err := c.SetWorkerControl(t.Context(), host, berth.ControlRequest{DesiredState: berth.DesiredOff, StopPolicy: berth.StopDrain})
		if err != nil || resp.Workers != want {
			t.Errorf("off %s: %+v, %v; want %d workers", host, resp, err, want)
		}
	}
}

// TestWorkerIsBusyWhileFull: a connected worker is busy while every slot,
// or every GPU that is not faulty, is held by its attempts, and ready
// again once one is given back.
func TestWorkerIsBusyWhileFull(t *testing.T) {
	t.Parallel()
	gpus := []berth.GPU{{Index: 0, Model: "T4"}, {Index: 1, Model: "T4"}, {Index: 2, Model: "T4"}}
	for _, tc := range []struct {
		name   string
		slots  int
		faulty []int
		gpus   int // the job's
	}{
		{"every GPU held", 4, nil, 3},
		{"every GPU but the faulty one held", 4, []int{2}, 2},
		{"every slot held", 1, nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newLifecycleHarness(t)
			reg := workerReg()
			reg.Slots, reg.GPUs = tc.slots, gpus
			ws := h.worker(reg)
			ws.faulty = tc.faulty
			ws.recompute()
			if st := h.l.observedState(ws); st != berth.WorkerReady {
				t.Fatalf("idle: %s, want ready", st)
			}
			h.submit(func(spec *berth.JobSpec) { spec.Resources.GPUs = tc.gpus }, "sleep", "1")
			as := h.launched()
			if st := h.l.observedState(ws); st != berth.WorkerBusy {
				t.Errorf("with %d GPUs and 1 of %d slots held: %s, want busy", ws.w.GPUsInUse, tc.slots, st)
			}
			code := 0
			h.step(func() { h.l.endAttempt(as, berth.AttemptSucceeded, &code, "", h.clock.Now().UTC()) })
			if st := h.l.observedState(ws); st != berth.WorkerReady {
				t.Errorf("once the attempt ended: %s, want ready", st)
			}
		})
	}
	h := newLifecycleHarness(t)
	reg := workerReg()
	reg.Slots, reg.GPUs = 4, gpus
	ws := h.worker(reg)
	h.submit(func(spec *berth.JobSpec) { spec.Resources.GPUs = 2 }, "sleep", "1")
	h.launched()
	if st := h.l.observedState(ws); st != berth.WorkerReady {
		t.Errorf("with a GPU and slots free: %s, want ready", st)
	}
}

// TestAWorkerReadyWithNothingQueuedRunsNoPass checks that agents
// registering and asking for work while nothing is queued are answered
// no_work without a scheduling pass (a pass costs time in proportion to the
// workers; thousands registering at once would run thousands), and that
// work queued later, or queued when a worker registers, is still placed.
func TestAWorkerReadyWithNothingQueuedRunsNoPass(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	passes := 0
	pass := h.pass
	h.pass = func() { passes++; pass() }
	reg := func(id string) *wire.Register {
		return &wire.Register{Version: wire.Version, WorkerID: id, Host: id, CPUs: 4, Memory: 8 << 30, Slots: 1}
	}
	s1 := h.agent(reg("w1"))
	h.from(s1, wire.TypeReadyForWork, &wire.ReadyForWork{})
	if passes != 0 {
		t.Errorf("%d passes for a worker registering and asking for work with nothing queued; want 0", passes)
	}
	h.lastSent(s1, wire.TypeNoWork)

	first := h.submit(nil, "true")
	if passes != 1 {
		t.Errorf("%d passes after a submit; want 1", passes)
	}
	if a := h.lastSent(s1, wire.TypeJobAssign).(*wire.JobAssign); a.JobID != first.ID {
		t.Errorf("w1 was assigned job %s, want %s", a.JobID, first.ID)
	}
	second := h.submit(nil, "true") // w1's one slot is taken: it waits
	s2 := h.agent(reg("w2"))
	if a := h.lastSent(s2, wire.TypeJobAssign).(*wire.JobAssign); a.JobID != second.ID {
		t.Errorf("w2, registering while job %s waited, was assigned %s", second.ID, a.JobID)
	}
	passesBefore := passes
	h.from(s2, wire.TypeReadyForWork, &wire.ReadyForWork{}) // nothing queued any more
	if passes != passesBefore {
		t.Errorf("a pass ran for ready_for_work with nothing queued")
	}
}

// TestWorkerRunningListFollowsEnds ends a worker's attempts out of the
// order they started in and checks that the scheduler's list of what runs
// there holds exactly the attempts still running after each end: an end
// moves the list's last entry into its place, which that entry must then
// be found at.
func TestWorkerRunningListFollowsEnds(t *testing.T) {
	t.Parallel()
	h := newLifecycleHarness(t)
	reg := workerReg()
	reg.Slots = 5
	ws := h.worker(reg)
	var started []*attemptState
	for range 5 {
		h.submit(nil, "sleep", "1")
		started = append(started, h.launched())
	}
	code := 0
	for _, i := range []int{1, 4, 0, 2, 3} { // the first, the moved last, the first again, …
		as := started[i]
		h.step(func() { h.l.endAttempt(as, berth.AttemptSucceeded, &code, "", h.clock.Now().UTC()) })
		var want, got []string
		for id := range ws.attempts {
			want = append(want, id)
		}
		for _, r := range ws.sched.Running {
			got = append(got, r.AttemptID)
		}
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(got, want) || len(got) != len(ws.attempts) {
			t.Fatalf("after attempt %d ended, Running lists %v; want the attempts running, %v", i, got, want)
		}
		for at, r := range ws.sched.Running {
			if as := ws.attempts[r.AttemptID]; as.runAt != at {
				t.Errorf("after attempt %d ended, %s is at %d of Running but records %d", i, r.AttemptID, at, as.runAt)
			}
		}
	}
}
