package controller

import (
	"context"
	"maps"
	"time"

	"github.com/berth-dev/berth"
)

// histogram is a fixed-bucket latency histogram in seconds, Prometheus style.
type histogram struct {
	bounds []float64
	counts []uint64 // per bucket, not cumulative; last is +Inf
	sum    float64
	n      uint64
}

var latencyBounds = []float64{.001, .002, .005, .01, .02, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

func newHistogram() *histogram {
	return &histogram{bounds: latencyBounds, counts: make([]uint64, len(latencyBounds)+1)}
}

func (h *histogram) observe(d time.Duration) {
	s := d.Seconds()
	i := 0
	for i < len(h.bounds) && s > h.bounds[i] {
		i++
	}
	h.counts[i]++
	h.sum += s
	h.n++
}

func (h *histogram) snapshot() Histogram {
	out := Histogram{Bounds: h.bounds, Counts: make([]uint64, len(h.counts)), Sum: h.sum, Count: h.n}
	var cum uint64
	for i, c := range h.counts {
		cum += c
		out.Counts[i] = cum
	}
	return out
}

// Histogram is a cumulative histogram: Counts[i] observations ≤ Bounds[i],
// the last entry counting all.
type Histogram struct {
	Bounds []float64
	Counts []uint64
	Sum    float64
	Count  uint64
}

type stats struct {
	jobs    map[berth.JobState]int
	placed  *histogram // submit → assigned
	started *histogram // submit → process started
	passes  *histogram // duration of a scheduling pass
	totals  Totals
}

func newStats() stats {
	return stats{jobs: map[berth.JobState]int{}, placed: newHistogram(), started: newHistogram(), passes: newHistogram(),
		totals: Totals{JobsFinished: map[berth.JobState]uint64{}, AttemptsEnded: map[berth.AttemptState]uint64{}}}
}

// Totals count what happened since the server started, Prometheus
// counters: they only grow while it runs and start from 0 when it
// starts (rate() and increase() handle the reset). The lifecycle counts
// them where the move happens, on the loop, with no lock.
type Totals struct {
	JobsSubmitted   uint64                        // jobs created: an array of N counts N
	JobsFinished    map[berth.JobState]uint64     // jobs ended, by final state
	JobsRequeued    uint64                        // moves of a job back to pending: retries, restarts, preemptions, stops
	JobRetries      uint64                        // failed batch attempts run again, spending a retry
	ServiceRestarts uint64                        // services restarted after their attempt ended
	AttemptsStarted uint64                        // attempts whose process started
	AttemptsEnded   map[berth.AttemptState]uint64 // attempts ended, by state (preempted: the preemptions)
}

// clone returns a copy of t that shares no map with it.
func (t *Totals) clone() Totals {
	c := *t
	c.JobsFinished, c.AttemptsEnded = maps.Clone(t.JobsFinished), maps.Clone(t.AttemptsEnded)
	return c
}

func (s *stats) loadCounts(counts map[berth.JobState]int) {
	for st, n := range counts {
		s.jobs[st] = n
	}
}

// Metrics is a point-in-time view for /metrics.
type Metrics struct {
	QueueDepth map[string]int // pending jobs by queue: the default queue, those workers name and those with jobs
	Jobs       map[berth.JobState]int
	Workers    map[berth.WorkerState]int
	// CapacityGPUs counts the GPUs of workers that take work: parked,
	// disconnected and lost workers and faulty GPUs are not capacity.
	CapacityGPUs int
	// GPUsInUse counts, by worker id, the GPUs its active attempts hold
	// (workers holding none are absent).
	GPUsInUse map[string]int
	// OldestPending is, by queue, when its oldest pending job was
	// submitted (the dashboard's longest wait).
	OldestPending map[string]time.Time
	PlaceLatency  Histogram
	StartLatency  Histogram
	PassLength    Histogram
	Totals        Totals
}

// Metrics returns the current counters.
func (c *Controller) Metrics(ctx context.Context) (*Metrics, error) {
	m := &Metrics{QueueDepth: map[string]int{}, Jobs: map[berth.JobState]int{}, Workers: map[berth.WorkerState]int{},
		GPUsInUse: map[string]int{}, OldestPending: map[string]time.Time{}}
	err := c.do(ctx, func() {
		m.QueueDepth[berth.DefaultQueue] = 0 // a gauge at 0, not missing, while no job waits
		for _, ws := range c.workers {
			for _, q := range ws.w.Queues {
				m.QueueDepth[q] = 0
			}
		}
		for _, js := range c.jobs {
			if j := js.job; j.State == berth.JobPending && !js.federated() { // a peer's queue holds a federated job
				m.QueueDepth[j.Queue]++
				if t, ok := m.OldestPending[j.Queue]; !ok || j.CreatedAt.Before(t) {
					m.OldestPending[j.Queue] = j.CreatedAt
				}
			}
		}
		for st, n := range c.stats.jobs {
			m.Jobs[st] = n
		}
		for _, ws := range c.workers {
			m.Workers[c.observedState(ws)]++
			if !ws.sched.Off {
				m.CapacityGPUs += len(ws.w.GPUs) - len(ws.faulty)
			}
			if n := ws.w.GPUsInUse; n > 0 {
				m.GPUsInUse[ws.w.ID] = n
			}
		}
		m.PlaceLatency = c.stats.placed.snapshot()
		m.StartLatency = c.stats.started.snapshot()
		m.PassLength = c.stats.passes.snapshot()
		m.Totals = c.stats.totals.clone()
	})
	return m, err
}
