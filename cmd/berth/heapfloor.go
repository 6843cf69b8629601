package main

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// heapFloor is the heap a server grows to before its garbage collector
// runs, however small its live heap: a busy server with a small live heap
// otherwise collects many times a second (GOGC=100 sets the goal at twice
// the live heap), and that cost falls on every job.
const heapFloor = 256 << 20

var heapFloorOnce sync.Once

// keepHeapFloor sets the garbage collector's goal after every collection
// to the larger of twice the live heap (GOGC=100's goal) and floor bytes,
// for the rest of the process, unless the environment sets GOGC or
// GOMEMLIMIT: a heap above floor/2 live is collected as by default. Only
// the first call does anything.
func keepHeapFloor(floor uint64) {
	heapFloorOnce.Do(func() {
		if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
			return
		}
		t := &floorTuner{floor: floor, sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
		t.tune()
	})
}

// floorTuner sets GOGC after each collection; it runs on the goroutine
// that runs cleanups, one collection at a time.
type floorTuner struct {
	floor   uint64
	sample  []metrics.Sample
	percent int
}

// gcCycle is garbage made to be collected: its cleanup marks a
// collection.
type gcCycle struct{ _ *byte }

// tune sets GOGC for the live heap now and arms itself for the next
// collection.
func (t *floorTuner) tune() {
	metrics.Read(t.sample)
	percent := gcPercentFor(t.sample[0].Value.Uint64(), t.floor)
	if percent != t.percent {
		debug.SetGCPercent(percent)
		t.percent = percent
	}
	runtime.AddCleanup(&gcCycle{}, func(t *floorTuner) { t.tune() }, t)
}

// gcPercentFor returns the GOGC whose goal for a live heap of live bytes
// is floor bytes, or 100 once twice live is more. A live heap under the
// runtime's 4 MiB minimum (0 before the first collection) counts as 4 MiB:
// the runtime scales that minimum by GOGC too, so the goal stays floor.
func gcPercentFor(live, floor uint64) int {
	live = max(live, minHeap)
	if 2*live >= floor {
		return 100
	}
	return int(floor*100/live) - 100
}

// minHeap is the Go runtime's smallest heap goal at GOGC=100.
const minHeap = 4 << 20
