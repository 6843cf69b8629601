package main

import (
	"testing"
)

// TestDeferCollection raises the collector's goal and sets it back, and
// leaves GOGC from the environment alone.
func TestDeferCollection(t *testing.T) {
	before := gcPercent()
	restore := deferCollection(1 << 30)
	during := gcPercent()
	restore()
	if after := gcPercent(); after != before {
		t.Errorf("GOGC %d after the start, want %d as before it", after, before)
	}
	if collectorSetByEnv() {
		if during != before {
			t.Errorf("GOGC %d during the start with GOGC or GOMEMLIMIT set, want %d", during, before)
		}
		return
	}
	// A goal of 1 GiB over this test's few MiB of live heap.
	if during <= max(before, 1000) {
		t.Errorf("GOGC %d during the start, want it raised from %d to a goal of 1 GiB", during, before)
	}
}
