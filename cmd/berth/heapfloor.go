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
// to the larger of twice the live heap (GOGC=100's goal) and floor bytes,
// for the rest of the process, unless the environment sets GOGC or
// GOMEMLIMIT: a heap above floor/2 live is collected as by default. Only
// the first call does anything. It also returns what a burst of
// allocation leaves behind once the burst is over (burstWatch).
func keepHeapFloor(floor uint64) {
	heapFloorOnce.Do(func() {
		if collectorSetByEnv() {
			return
		}
		t := &floorTuner{floor: floor, sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
		t.tune()
		go watchBursts(&burstWatch{floor: floor}, burstTick)
	})
}

// collectorSetByEnv reports whether the environment sets GOGC or
// GOMEMLIMIT: then the server leaves the collector as they say.
func collectorSetByEnv() bool {
	return os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != ""
}

// burstTick is how often watchBursts samples the allocation.
const burstTick = time.Second

// burstWatch tells when a burst of allocation is over and left more
// garbage behind than the heap holds live (a load of a million jobs at a
// start, or a million submitted through the API), and when a server gone
// idle holds much more heap than it uses. The collector's goal is twice
// the live heap it last marked, and a collection in the middle of such a
// burst marks its transient data live (the rows being read, the batch
// being written): the heap grows to twice that, and nothing shrinks it
// until the next collection, which on a server gone quiet the runtime
// forces only after two minutes.
//
// So the watch collects once a burst is over: after two quiet ticks in a
// row, each allocating a quarter of the recent peak or less, or under
// floor/256 (idle), once at least max(floor/2, live/4) was allocated since
// its last collection. One quiet tick is not enough: a collection in the
// middle of a burst slows it for a second. None while a rate holds
// steady, whose collections the heap floor paces. The collection only
// resets the goal; the runtime's scavenger returns the memory above it a
// little at a time.
//
// It returns the heap to the operating system at once
// (debug.FreeOSMemory, a collection and a scavenge of every free page)
// only when the server is idle, at its second idle tick in a row (once an
// idle spell), and when at least max(floor/2, live/4) could be returned: handing back a gigabyte at once
// costs a core for a moment and page faults after, which a server still
// starting jobs would feel in their latency.
type burstWatch struct {
	floor  uint64
	allocs uint64 // bytes allocated by the last sample
	since  uint64 // bytes allocated since the watch last collected
	// peak is the most allocated in one tick, less an eighth each busy
	// tick: a rate that falls by half a tick is seen to fall.
	peak  uint64
	quiet int // quiet ticks in a row
	idle  int // idle ticks in a row
}

// heapAction is what burstWatch asks for after a tick.
type heapAction int

const (
	heapKeep    heapAction = iota // nothing
	heapCollect                   // runtime.GC
	heapRelease                   // debug.FreeOSMemory
)

// observe takes a tick's sample: the bytes allocated since the process
// began, the live heap the last collection marked, and the heap's bytes
// beyond it that are still held from the operating system (what a release
// would return, about).
func (w *burstWatch) observe(allocs, live, spare uint64) heapAction {
	tick := allocs - w.allocs
	w.allocs = allocs
	w.since += tick
	if tick < w.floor/256 {
		w.idle++
	} else {
		w.idle = 0
	}
	if tick*4 <= w.peak || w.idle > 0 {
		w.quiet++ // measured against the peak before the quiet began
	} else {
		w.quiet, w.peak = 0, max(tick, w.peak-w.peak/8)
	}
	enough := max(w.floor/2, live/4)
	switch {
	case w.quiet >= 2 && w.since >= enough:
		w.since, w.quiet, w.peak = 0, 0, tick // the rate now is the next one to fall from
		if w.idle >= 2 {
			return heapRelease
		}
		return heapCollect
	case w.idle == 2 && spare >= enough: // once an idle spell
		w.since = 0
		return heapRelease
	}
	return heapKeep
}

// watchBursts samples the allocation and the heap every tick for the rest
// of the process, and collects or releases when w says so.
func watchBursts(w *burstWatch, tick time.Duration) {
	sample := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}, {Name: "/gc/heap/live:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/unused:bytes"},
		{Name: "/memory/classes/heap/free:bytes"}}
	for range time.Tick(tick) {
		metrics.Read(sample)
		live := sample[1].Value.Uint64()
		held := sample[2].Value.Uint64() + sample[3].Value.Uint64() + sample[4].Value.Uint64()
		switch w.observe(sample[0].Value.Uint64(), live, held-min(held, live)) {
		case heapCollect:
			runtime.GC()
		case heapRelease:
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
