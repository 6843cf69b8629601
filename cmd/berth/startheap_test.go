package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// deferCollectionChildEnv marks the child process TestDeferCollection
// runs itself in.
const deferCollectionChildEnv = "BERTH_TEST_DEFER_COLLECTION_CHILD"

// TestDeferCollection raises the collector's goal and sets it back, and
// leaves GOGC from the environment alone. It runs in a child process of
// its own: the collector is the whole process's, and in this one the
// heap floor an in-process server kept (keepHeapFloor, for the rest of
// the process) resets GOGC after every collection, and the other tests
// leave more than this test's few MiB of live heap.
func TestDeferCollection(t *testing.T) {
	if os.Getenv(deferCollectionChildEnv) == "" {
		t.Parallel()
		cmd := exec.Command(os.Args[0], "-test.run=^TestDeferCollection$", "-test.v")
		cmd.Env = append(os.Environ(), deferCollectionChildEnv+"=1")
		if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "--- PASS: TestDeferCollection") {
			t.Fatalf("child: %v:\n%s", err, out)
		}
		return
	}
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
