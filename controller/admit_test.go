package controller

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
)

// TestFitsCountsWorkersSeenInTheLastDay: a job no worker could take is
// refused, naming the field and what the largest worker has, or held with
// a warning; a disconnected worker counts for a day after it was last
// heard from, and once none has been seen for a day nothing is refused.
func TestFitsCountsWorkersSeenInTheLastDay(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	spec := berth.DefaultJobSpec()
	spec.Resources.GPUs = 8
	if warnings, err := h.c.fits(&spec, false); err != nil || len(warnings) != 0 {
		t.Fatalf("no worker ever: fits = %q, %v; want nothing (the queue's warning says it)", warnings, err)
	}

	reg := workerReg()
	for i := range 4 {
		reg.GPUs = append(reg.GPUs, berth.GPU{Index: i, Model: "H100", Memory: 80 << 30})
	}
	s := h.agent(reg)
	const want = "resources.gpus: 8 requested; the largest worker has 4xH100:80GiB"
	refused := func(when string) {
		t.Helper()
		_, err := h.c.fits(&spec, false)
		if berth.ErrorCode(err) != berth.ECodeUnsatisfiable || !strings.HasPrefix(err.Error(), want) ||
			!strings.Contains(err.Error(), "hold_until_fits") {
			t.Fatalf("%s: fits(8 GPUs) = %v; want unsatisfiable %q and the hint", when, err, want)
		}
		warnings, err := h.c.fits(&spec, true)
		if err != nil || len(warnings) != 1 || !strings.HasPrefix(warnings[0], want) {
			t.Fatalf("%s: held: fits(8 GPUs) = %q, %v; want one warning %q", when, warnings, err, want)
		}
	}
	refused("connected")
	spec.Resources.GPUs = 4
	if warnings, err := h.c.fits(&spec, false); err != nil || len(warnings) != 0 {
		t.Fatalf("fits(4 GPUs) = %q, %v; want nothing", warnings, err)
	}
	spec.Resources.GPUs = 8

	h.step(func() { h.c.disconnected(s) })
	h.clock.Advance(SeenWithin - time.Minute)
	refused("disconnected, heard from within the day")

	h.clock.Advance(2 * time.Minute)
	warnings, err := h.c.fits(&spec, false)
	if err != nil || len(warnings) != 1 || !strings.Contains(warnings[0], "no worker has been seen in the last day") {
		t.Fatalf("no worker seen for a day: fits = %q, %v; want accepted with a warning", warnings, err)
	}
}

// BenchmarkFits checks a gang of four 8-GPU members that fits, as
// SubmitFull does on the loop, against 1,000 connected workers of 8 H100s.
func BenchmarkFits(b *testing.B) {
	c := New(Config{})
	now := c.now()
	for i := range 1000 {
		w := &berth.Worker{ID: fmt.Sprintf("w%03d", i), CPUs: 64, Memory: 512 << 30, Slots: 8, LastHeartbeat: now}
		for g := range 8 {
			w.GPUs = append(w.GPUs, berth.GPU{Index: g, Model: "NVIDIA H100", Memory: 80 << 30})
		}
		c.addWorker(newWorkerState(w))
	}
	spec := berth.DefaultJobSpec()
	spec.Resources.GPUs, spec.Nodes = 8, 4
	for b.Loop() {
		if _, err := c.fits(&spec, false); err != nil {
			b.Fatal(err)
		}
	}
}
