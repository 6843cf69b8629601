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
		{1024 * mib, 256 * mib, 100},
	} {
		if got := gcPercentFor(tt.live, tt.floor); got != tt.want {
			t.Errorf("gcPercentFor(%d MiB, %d MiB) = %d, want %d", tt.live/mib, tt.floor/mib, got, tt.want)
		}
	}
}

// TestKeepHeapFloor runs keepHeapFloor in child processes (it changes the
// whole process's collector): with a small live heap it raises GOGC, once
// the live heap passes half the floor it sets it back to 100, and it
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
		{"tuned", "", "raised, then 100"},
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

// TestBurstWatch feeds burstWatch ticks of allocation (MiB per tick) with
// a floor of 256 MiB (idle under 1 MiB a tick) and a live heap of 100 MiB,
// and checks what it asks for at each tick: a collection at the second
// quiet tick after a burst of at least floor/2, never at a steady rate,
// never for a small burst, and not at a pause of one tick (a collection
// slowing the burst), nor at a pause in a burst too small yet, but at its
// end; a release instead when the burst ends in idleness; and a release
// at the second idle tick when the heap holds at least floor/2 more than
// it uses (spare, in MiB), once an idle spell.
func TestBurstWatch(t *testing.T) {
	const mib = 1 << 20
	type at struct {
		tick int
		do   heapAction
	}
	for _, tt := range []struct {
		name  string
		ticks []uint64
		spare []uint64 // MiB held beyond the live heap at each tick; 0 past its end
		want  []at
	}{
		{"steady", []uint64{50, 60, 50, 55, 45, 60, 50, 50, 55, 60, 50, 50}, nil, nil},
		{"idle", []uint64{0, 0, 2, 0, 0, 2, 0, 0}, nil, nil},
		{"a tail that halves each tick", []uint64{400, 200, 100, 50, 25, 12, 6, 3}, nil, []at{{4, heapCollect}}},
		{"a tail to a trickle", []uint64{300, 300, 150, 80, 40, 30, 20, 20, 2, 2}, nil, []at{{5, heapCollect}}},
		{"small burst", []uint64{1, 100, 1, 1, 1}, nil, nil},
		{"burst then quiet", []uint64{1, 200, 200, 200, 10, 1, 1, 1}, nil, []at{{5, heapCollect}}},
		{"burst then slower", []uint64{300, 300, 300, 70, 70, 70, 70}, nil, []at{{4, heapCollect}}},
		{"a one-tick stall", []uint64{200, 200, 40, 200, 200, 5, 5}, nil, []at{{6, heapCollect}}},
		{"pause, then the end", []uint64{100, 10, 10, 100, 5, 5}, nil, []at{{5, heapCollect}}},
		{"two bursts", []uint64{300, 300, 1, 1, 1, 300, 300, 1, 1}, nil, []at{{3, heapCollect}, {8, heapCollect}}},
		{"a burst that ends idle", []uint64{300, 300, 0, 0, 0}, nil, []at{{3, heapRelease}}},
		{"collected, then idle with the heap held", []uint64{300, 300, 2, 2, 0, 0, 0, 0},
			[]uint64{0, 0, 0, 0, 400, 400, 0, 0}, []at{{3, heapCollect}, {5, heapRelease}}},
		{"released once an idle spell", []uint64{0, 0, 0, 0, 5, 0, 0, 0}, []uint64{400, 400, 400, 400, 400, 400, 400, 400},
			[]at{{1, heapRelease}, {6, heapRelease}}},
		{"idle with little held", []uint64{2, 0, 0, 0}, []uint64{0, 100, 100, 100}, nil},
		{"busy with the heap held", []uint64{50, 50, 50, 50}, []uint64{400, 400, 400, 400}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := &burstWatch{floor: 256 * mib}
			var allocs uint64
			var got []at
			for i, tick := range tt.ticks {
				allocs += tick * mib
				var spare uint64
				if i < len(tt.spare) {
					spare = tt.spare[i] * mib
				}
				if do := w.observe(allocs, 100*mib, spare); do != heapKeep {
					got = append(got, at{i, do})
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got %v, want %v (1 collect, 2 release)", got, tt.want)
			}
		})
	}
}
