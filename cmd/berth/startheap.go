package main

import (
	"runtime/debug"
	"runtime/metrics"
)

// startHeapGoal is the heap a server's start may grow to before its
// collector runs. A start reads every queued job, and nearly all it makes
// stays live (at a million queued jobs, about 370 MB, beside 200 MB of
// rows read), so collections during it mark a growing heap for little
// garbage: at a million jobs two or three of them, about a second of CPU
// and a fifth of the start's wall time on two cores.
const startHeapGoal = 1 << 30

// deferCollection raises the collector's goal to goal bytes until the
// function it returns is called, which sets the goal back (a heap past it
// is then collected, beside what follows), unless the environment sets
// GOGC or GOMEMLIMIT, as keepHeapFloor. A collection in between (a heap
// past goal) sets the goal as keepHeapFloor does, and the function
// returned leaves that.
func deferCollection(goal uint64) (restore func()) {
	if collectorSetByEnv() {
		return func() {}
	}
	live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(live)
	raised := gcPercentFor(live[0].Value.Uint64(), goal)
	prev := debug.SetGCPercent(raised)
	return func() {
		if now := debug.SetGCPercent(prev); now != raised {
			debug.SetGCPercent(now) // a collection's own setting: keep it
		}
	}
}
