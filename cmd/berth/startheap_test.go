package main

import (
	"runtime/debug"
	"testing"
)

// TestDeferCollection raises the collector's goal and sets it back once
// the start's collection is done, and leaves GOGC from the environment
// alone.
func TestDeferCollection(t *testing.T) {
	before := gcPercent()
	restore := deferCollection(1 << 30)
	during := gcPercent()
	<-restore()
	after := gcPercent()
	if collectorSetByEnv() {
		if during != before || after != before {
			t.Errorf("GOGC %d during the start and %d after it with GOGC or GOMEMLIMIT set, want %d", during, after, before)
		}
		return
	}
	// A goal of 1 GiB over this test's few MiB of live heap.
	if during <= max(before, 1000) {
		t.Errorf("GOGC %d during the start, want it raised from %d to a goal of 1 GiB", during, before)
	}
	// Set back: to before, or to what keepHeapFloor's tuner made of the
	// collection (other tests of this process start servers).
	if after == during {
		t.Errorf("GOGC %d after the start's collection, still the raised goal", after)
	}
}

// TestSettleCollectsUnderTheRaisedGoal: the start's collection runs
// before the goal is set back, so that what serves meanwhile does not
// mark the heap in assists; then GOGC is set back, unless the collection
// set it otherwise.
func TestSettleCollectsUnderTheRaisedGoal(t *testing.T) {
	orig := debug.SetGCPercent(100)
	defer debug.SetGCPercent(orig)

	debug.SetGCPercent(5000)
	var during int
	settle(100, 5000, func() { during = gcPercent() })
	if during != 5000 {
		t.Errorf("GOGC %d while collecting, want the raised 5000", during)
	}
	if after := gcPercent(); after != 100 {
		t.Errorf("GOGC %d after settle, want 100 set back", after)
	}

	debug.SetGCPercent(5000)
	settle(100, 5000, func() { debug.SetGCPercent(150) }) // as keepHeapFloor's tuner after a collection
	if after := gcPercent(); after != 150 {
		t.Errorf("GOGC %d after settle, want the collection's 150 kept", after)
	}
}
