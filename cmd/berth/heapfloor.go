package main

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"
)

// heapFloor is the heap a server grows to before its garbage collector
// runs, however small its live heap: a busy server with a small live heap
// otherwise collects many times a second (GOGC=100 sets the goal at twice
// the live heap), and that cost falls on every job.
const heapFloor = 256 << 20

var heapFloorOnce sync.Once

// keepHeapFloor sets the garbage collector's goal after every collection
// to the larger of one and a half times the live heap (GOGC=50's goal) and
// floor bytes, for the rest of the process, unless the environment sets
// GOGC or GOMEMLIMIT. A large live heap (a million queued jobs hold about
// 0.42 KiB each) so grows by half before it is collected, not by as much
// again as Go's default, and a busy server holds under 1 KiB of memory a
// queued job. Only the first call does anything. It also returns the heap
// a server holds beyond its use once it is idle (idleWatch).
func keepHeapFloor(floor uint64) {
	heapFloorOnce.Do(func() {
		if collectorSetByEnv() {
			return
		}
		t := &floorTuner{floor: floor, sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
		t.tune()
		go watchIdle(&idleWatch{floor: floor}, idleTick)
	})
}

// collectorSetByEnv reports whether the environment sets GOGC or
// GOMEMLIMIT: then the server leaves the collector as they say.
func collectorSetByEnv() bool {
	return os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != ""
}

// idleTick is how often watchIdle samples the allocation.
const idleTick = time.Second

// idleWatch tells when a server gone idle holds much more heap than it
// uses, so that the heap is returned to the operating system then rather
// than minutes later. A burst of allocation (a load of a million jobs at a
// start, or a million submitted through the API) leaves such a heap: the
// collector's goal for a large heap is half as much again as the live heap
// it last marked, a collection in the middle of the burst marks its
// transient data live (the rows being read, the batch being written), and
// on a server gone quiet the runtime forces the next collection only after
// two minutes and returns the free heap a little at a time after it.
//
// The watch asks for a release (debug.FreeOSMemory: a collection and a
// return of every free page) at the second tick in a row that allocates
// under floor/256, once an idle spell, when at least max(floor/2, live/4)
// could be returned. Never while the server is busy: handing back a
// gigabyte at once costs a core for a moment and page faults after, which
// jobs being started would feel in their latency.
type idleWatch struct {
	floor  uint64
	allocs uint64 // bytes allocated by the last sample
	idle   int    // idle ticks in a row
}

// observe takes a tick's sample: the bytes allocated since the process
// began, the live heap the last collection marked, and the heap's bytes
// beyond it still held from the operating system (about what a release
// would return). It reports whether to release now.
func (w *idleWatch) observe(allocs, live, spare uint64) bool {
	tick := allocs - w.allocs
	w.allocs = allocs
	if tick >= w.floor/256 {
		w.idle = 0
		return false
	}
	w.idle++
	return w.idle == 2 && spare >= max(w.floor/2, live/4)
}

// watchIdle samples the allocation and the heap every tick for the rest
// of the process, and releases the heap when w says so.
func watchIdle(w *idleWatch, tick time.Duration) {
	sample := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}, {Name: "/gc/heap/live:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/unused:bytes"},
		{Name: "/memory/classes/heap/free:bytes"}}
	for range time.Tick(tick) {
		metrics.Read(sample)
		live := sample[1].Value.Uint64()
		held := sample[2].Value.Uint64() + sample[3].Value.Uint64() + sample[4].Value.Uint64()
		if w.observe(sample[0].Value.Uint64(), live, held-min(held, live)) {
			debug.FreeOSMemory()
		}
	}
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
// is floor bytes, or 50 once one and a half times live is more. A live
// heap under the runtime's 4 MiB minimum (0 before the first collection)
// counts as 4 MiB: the runtime scales that minimum by GOGC too, so the
// goal stays floor.
func gcPercentFor(live, floor uint64) int {
	live = max(live, minHeap)
	if live+live/2 >= floor {
		return 50
	}
	return int(floor*100/live) - 100
}

// minHeap is the Go runtime's smallest heap goal at GOGC=100.
const minHeap = 4 << 20
