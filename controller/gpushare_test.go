package controller

import (
	"slices"
	"strings"
	"testing"

	"github.com/berth-dev/berth"
)

// TestFractionsShareAGPU: two halves share GPU 0 of a one-GPU worker,
// which is busy only once both hold it; the scheduler's view counts 1000
// milli on it and each attempt's share; a third half waits saying why;
// the GPU is untouched again once both end, and a whole GPU then fits.
func TestFractionsShareAGPU(t *testing.T) {
	t.Parallel()
	h := newLifecycleHarness(t)
	reg := workerReg()
	reg.Slots, reg.GPUs = 8, []berth.GPU{{Index: 0, Model: "H100", Memory: 80 << 30}}
	ws := h.worker(reg)
	half := func(spec *berth.JobSpec) { spec.Resources.GPUMilli = 500 }
	h.submit(half, "sleep", "1")
	a := h.launched()
	if st := h.l.observedState(ws); st != berth.WorkerReady || ws.w.GPUsInUse != 1 || ws.sched.GPUMilliUsed[0] != 500 || ws.w.GPUMilliShared != 500 {
		t.Fatalf("one half: %s, %d GPUs in use (%d milli shared free), %v milli; want ready, 1 (500), [500]",
			st, ws.w.GPUsInUse, ws.w.GPUMilliShared, ws.sched.GPUMilliUsed)
	}
	h.submit(half, "sleep", "1")
	b := h.launched()
	if a == b || !slices.Equal(a.a.GPUs, []int{0}) || !slices.Equal(b.a.GPUs, []int{0}) || a.run.GPUMilli != 500 || b.run.GPUMilli != 500 {
		t.Fatalf("attempts %v (%d) and %v (%d); want both on GPU 0 with 500 milli", a.a.GPUs, a.run.GPUMilli, b.a.GPUs, b.run.GPUMilli)
	}
	if st := h.l.observedState(ws); st != berth.WorkerBusy || ws.w.GPUsInUse != 1 || ws.sched.GPUMilliUsed[0] != 1000 || ws.w.GPUMilliShared != 0 {
		t.Fatalf("two halves: %s, %d GPUs in use, %v milli; want busy, 1, [1000]", st, ws.w.GPUsInUse, ws.sched.GPUMilliUsed)
	}
	third := h.submit(half, "sleep", "1")
	if js := h.l.jobs[third.ID]; js.view().State != berth.JobPending || len(h.be.launched) != 2 ||
		!strings.Contains(js.task.Reason.Message, "no GPU with 500 milli free") {
		t.Fatalf("third half: %s (%q), %d launched", js.view().State, js.task.Reason.Message, len(h.be.launched))
	}
	code := 0
	h.step(func() { h.l.endAttempt(a, berth.AttemptSucceeded, &code, "", h.clock.Now().UTC()) })
	c := h.launched() // the third takes the freed half
	h.step(func() { h.l.endAttempt(b, berth.AttemptSucceeded, &code, "", h.clock.Now().UTC()) })
	h.step(func() { h.l.endAttempt(c, berth.AttemptSucceeded, &code, "", h.clock.Now().UTC()) })
	if ws.w.GPUsInUse != 0 || ws.sched.GPUMilliUsed[0] != 0 || h.l.observedState(ws) != berth.WorkerReady {
		t.Fatalf("all ended: %d GPUs in use, %v milli", ws.w.GPUsInUse, ws.sched.GPUMilliUsed)
	}
	h.submit(func(spec *berth.JobSpec) { spec.Resources.GPUs = 1 }, "sleep", "1")
	if w := h.launched(); !slices.Equal(w.a.GPUs, []int{0}) || w.run.GPUMilli != 0 {
		t.Fatalf("whole GPU: %v, %d milli", w.a.GPUs, w.run.GPUMilli)
	}
}
