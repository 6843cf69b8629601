package main

import (
	"os"
	"os/exec"
	"runtime/debug"
	"strings"
	"testing"
)

// collectorChildEnv marks the child process a collector test runs itself
// in (inChild).
const collectorChildEnv = "BERTH_TEST_COLLECTOR_CHILD"

// inChild reports whether this is the child process a test of the
// collector's settings runs in. In the parent it runs test name in a
// child of its own, fails t unless it passes there, and reports false:
// the collector is the whole process's, and in this one the heap floor
// an in-process server kept (keepHeapFloor, for the rest of the process)
// resets GOGC after every collection, and the other tests leave more
// than a few MiB of live heap.
func inChild(t *testing.T, name string) bool {
	if os.Getenv(collectorChildEnv) != "" {
		return true
	}
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.v")
	cmd.Env = append(os.Environ(), collectorChildEnv+"=1")
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "--- PASS: "+name) {
		t.Fatalf("child: %v:\n%s", err, out)
	}
	return false
}

// TestDeferCollection raises the collector's goal and sets it back once
// the start's collection is done, and leaves GOGC from the environment
// alone (in a child process: inChild).
func TestDeferCollection(t *testing.T) {
	if !inChild(t, "TestDeferCollection") {
		return
	}
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
// set it otherwise (in a child process: inChild).
func TestSettleCollectsUnderTheRaisedGoal(t *testing.T) {
	if !inChild(t, "TestSettleCollectsUnderTheRaisedGoal") {
		return
	}
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
