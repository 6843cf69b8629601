package controller

import (
	"context"
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
}

func newStats() stats {
	return stats{jobs: map[berth.JobState]int{}, placed: newHistogram(), started: newHistogram(), passes: newHistogram()}
}

func (s *stats) loadCounts(counts map[berth.JobState]int) {
	for st, n := range counts {
		s.jobs[st] = n
	}
}

// Metrics is a point-in-time view for /metrics.
type Metrics struct {
	QueueDepth map[string]int // pending jobs by queue
	Jobs       map[berth.JobState]int
	Workers    map[berth.WorkerState]int
	// CapacityGPUs counts the GPUs of workers that take work: parked,
	// disconnected and lost workers and faulty GPUs are not capacity.
	CapacityGPUs   int
	PlaceLatency   Histogram
	StartLatency   Histogram
	ScheduleLength Histogram
}

// Metrics returns the current counters.
func (c *Controller) Metrics(ctx context.Context) (*Metrics, error) {
	m := &Metrics{QueueDepth: map[string]int{}, Jobs: map[berth.JobState]int{}, Workers: map[berth.WorkerState]int{}}
	err := c.do(ctx, func() {
		for _, js := range c.jobs {
			if js.job.State == berth.JobPending {
				m.QueueDepth[js.job.Queue]++
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
		}
		m.PlaceLatency = c.stats.placed.snapshot()
		m.StartLatency = c.stats.started.snapshot()
		m.ScheduleLength = c.stats.passes.snapshot()
	})
	return m, err
}
