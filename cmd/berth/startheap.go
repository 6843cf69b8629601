package main

import (
	"runtime"
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
// function it returns is called. That function returns at once: on a
// goroutine of its own it collects what the start left, with the goal
// still raised, then sets the goal back (settle), and it closes the
// channel it returned once it has. Unless the environment sets GOGC or
// GOMEMLIMIT, as keepHeapFloor: then the collector is left alone.
//
// The collection runs under the raised goal because a heap past the
// collector's goal is marked by the goroutines that allocate meanwhile
// (assists, in proportion to how far past it is), not by the collector's
// own workers on the idle cores. With the goal set back first, the
// collection after a start at a million queued jobs (770 MB of heap, 350
// MB live) took 1.5 s of assists from the goroutines serving the first
// requests, and an agent's register waited for it.
func deferCollection(goal uint64) (restore func() <-chan struct{}) {
	if collectorSetByEnv() {
		return func() <-chan struct{} {
			done := make(chan struct{})
			close(done)
			return done
		}
	}
	live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(live)
	raised := gcPercentFor(live[0].Value.Uint64(), goal)
	prev := debug.SetGCPercent(raised)
	return func() <-chan struct{} {
		done := make(chan struct{})
		go func() {
			defer close(done)
			settle(prev, raised, runtime.GC)
		}()
		return done
	}
}

// settle ends a raised goal: it runs collect while GOGC is still raised,
// then sets GOGC back to prev, unless a collection has set it otherwise
// since (keepHeapFloor's tuner, after each collection), which it leaves.
func settle(prev, raised int, collect func()) {
	collect()
	if now := debug.SetGCPercent(prev); now != raised {
		debug.SetGCPercent(now) // a collection's own setting: keep it
	}
}
