package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	if os.Getenv(heapFloorChildEnv) != "" {
		os.Exit(heapFloorChild())
	}
	if os.Getenv(asBerthEnv) != "" {
		main() // a test runs this binary as berth (a rented instance's fetched agent)
	}
	if len(os.Args) > 1 && os.Args[1] == watchdogCommand {
		main() // the watchdog of an agent a test runs: this binary is its os.Executable
	}
	os.Exit(m.Run())
}

func TestGCPercentFor(t *testing.T) {
	const mib = 1 << 20
	for _, tt := range []struct {
		live, floor uint64
		want        int
	}{
		{0, 256 * mib, 6300}, // before the first collection
		{1 * mib, 256 * mib, 6300},
		{4 * mib, 256 * mib, 6300},
		{64 * mib, 256 * mib, 300},
		{100 * mib, 256 * mib, 156},
		{128 * mib, 256 * mib, 100},
		{170 * mib, 256 * mib, 50},
		{171 * mib, 256 * mib, 50},
		{1024 * mib, 256 * mib, 50},
	} {
		if got := gcPercentFor(tt.live, tt.floor); got != tt.want {
			t.Errorf("gcPercentFor(%d MiB, %d MiB) = %d, want %d", tt.live/mib, tt.floor/mib, got, tt.want)
		}
	}
}

// TestKeepHeapFloor runs keepHeapFloor in child processes (it changes the
// whole process's collector): with a small live heap it raises GOGC, once
// the live heap passes two thirds of the floor it sets it to 50, and it
// leaves a GOGC from the environment alone.
func TestKeepHeapFloor(t *testing.T) {
	t.Parallel()
	// Clipped: the parallel subtests append to it, and must not share
	// the spare capacity DeleteFunc leaves.
	env := slices.Clip(slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "GOGC=") || strings.HasPrefix(kv, "GOMEMLIMIT=")
	}))
	for _, tt := range []struct {
		name, gogc, want string
	}{
		{"tuned", "", "raised, then 50"},
		{"GOGC set", "50", "50"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(env, heapFloorChildEnv+"=1")
			if tt.gogc != "" {
				cmd.Env = append(cmd.Env, "GOGC="+tt.gogc)
			}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("child: %v: %s", err, out)
			}
			if got := strings.TrimSpace(string(out)); got != tt.want {
				t.Errorf("child says %q, want %q", got, tt.want)
			}
		})
	}
}

const heapFloorChildEnv = "BERTH_TEST_HEAP_FLOOR_CHILD"

// heapFloorChild is the child of TestKeepHeapFloor: it keeps a 64 MiB
// floor and prints GOGC as keepHeapFloor left it ("raised" above 100).
// When raised, it then holds 48 MiB live and prints GOGC once a
// collection's cleanup has changed it, or as it is after 10 s of
// collections.
func heapFloorChild() int {
	keepHeapFloor(64 << 20)
	first := gcPercent()
	if first <= 100 {
		fmt.Println(first)
		return 0
	}
	held := make([]byte, 48<<20)
	for i := range held {
		held[i] = byte(i)
	}
	deadline := time.Now().Add(10 * time.Second)
	for gcPercent() == first && time.Now().Before(deadline) {
		runtime.GC()
		runtime.Gosched()
	}
	runtime.KeepAlive(held)
	fmt.Printf("raised, then %d\n", gcPercent())
	return 0
}

// gcPercent returns the collector's GOGC now.
func gcPercent() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(s[0].Value.Uint64())
}

// TestIdleWatch feeds idleWatch ticks of allocation (MiB per tick) with a
// floor of 256 MiB (idle under 1 MiB a tick), a live heap of 100 MiB and
// spare MiB held beyond it, and checks the ticks it releases at: the
// second idle tick in a row, once an idle spell, when at least floor/2 is
// held beyond the live heap; never while busy, however much is held.
func TestIdleWatch(t *testing.T) {
	const mib = 1 << 20
	for _, tt := range []struct {
		name  string
		ticks []uint64
		spare []uint64 // MiB held beyond the live heap at each tick; 0 past its end
		want  []int
	}{
		{"a burst that ends idle", []uint64{300, 300, 0, 0, 0}, []uint64{900, 900, 900, 900, 900}, []int{3}},
		{"busy with the heap held", []uint64{50, 50, 50, 50, 2, 50}, []uint64{400, 400, 400, 400, 400, 400}, nil},
		{"a trickle is busy", []uint64{300, 1, 1, 1, 1}, []uint64{400, 400, 400, 400, 400}, nil},
		{"released once an idle spell", []uint64{0, 0, 0, 0, 5, 0, 0, 0}, []uint64{400, 400, 400, 400, 400, 400, 400, 400}, []int{1, 6}},
		{"returned by the runtime before the second idle tick", []uint64{300, 0, 0, 0}, []uint64{400, 400, 0, 0}, nil},
		{"idle with little held", []uint64{2, 0, 0, 0}, []uint64{0, 100, 100, 100}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := &idleWatch{floor: 256 * mib}
			var allocs uint64
			var got []int
			for i, tick := range tt.ticks {
				allocs += tick * mib
				var spare uint64
				if i < len(tt.spare) {
					spare = tt.spare[i] * mib
				}
				if w.observe(allocs, 100*mib, spare) {
					got = append(got, i)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("released at ticks %v, want %v", got, tt.want)
			}
		})
	}
}
