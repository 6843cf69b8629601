package controller

import (
	"container/heap"
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
	jobs map[berth.JobState]int
	// backlogs holds, by queue, the jobs pending here (a job handed to a
	// federation peer waits in the peer's queue), kept as jobs move
	// (counted) so that Metrics walks no job; a queue with none is absent.
	backlogs map[string]*backlog
	placed   *histogram // submit → assigned
	started  *histogram // submit → process started
	passes   *histogram // duration of a scheduling pass
	totals   Totals
}

func newStats() stats {
	return stats{jobs: map[berth.JobState]int{}, backlogs: map[string]*backlog{}, placed: newHistogram(), started: newHistogram(), passes: newHistogram(),
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

// backlog is the jobs pending in one queue: how many, and in which second
// each was submitted, for the oldest: seconds, so that it holds one time
// for the jobs of each second however many there are.
type backlog struct {
	n       int
	created submitTimes
}

// waiting reports whether js counts in its queue's backlog: pending, and
// not handed to a federation peer.
func (js *jobState) waiting() bool { return js.view().State == berth.JobPending && !js.federated() }

// counted counts js in or out of its queue's backlog after its state or
// its cluster changed, or it was created or loaded (was false); was is
// js.waiting() before the change.
func (s *stats) counted(js *jobState, was bool) {
	now := js.waiting()
	if now == was {
		return
	}
	j := js.view()
	b := s.backlogs[j.Queue]
	if now {
		if b == nil {
			b = &backlog{}
			s.backlogs[j.Queue] = b
		}
		b.n++
		b.created.add(j.CreatedAt.Unix())
		return
	}
	b.n--
	b.created.remove(j.CreatedAt.Unix())
	if b.n == 0 {
		delete(s.backlogs, j.Queue)
	}
}

// submitTimes is a multiset of submission times in unix seconds: it adds
// and removes one in O(log k), k the distinct times held, and reads the
// least in O(1). It is a min-heap
// of the distinct times (container/heap) that keeps the index of each.
type submitTimes struct {
	items []timeCount
	at    map[int64]int // a time held → its index in items
}

// timeCount is a time of a submitTimes and how many times it holds it.
type timeCount struct {
	t int64
	n int
}

func (s *submitTimes) add(t int64) {
	if i, ok := s.at[t]; ok {
		s.items[i].n++
		return
	}
	if s.at == nil {
		s.at = map[int64]int{}
	}
	heap.Push(s, timeCount{t: t, n: 1})
}

// remove takes one t out; a t not held is left alone.
func (s *submitTimes) remove(t int64) {
	i, ok := s.at[t]
	if !ok {
		return
	}
	if s.items[i].n--; s.items[i].n == 0 {
		heap.Remove(s, i)
	}
}

// least returns the least time held; false when none is.
func (s *submitTimes) least() (time.Time, bool) {
	if len(s.items) == 0 {
		return time.Time{}, false
	}
	return time.Unix(s.items[0].t, 0).UTC(), true
}

// Len is heap.Interface's, for container/heap only.
func (s *submitTimes) Len() int { return len(s.items) }

// Less is heap.Interface's: the earlier time first.
func (s *submitTimes) Less(i, k int) bool { return s.items[i].t < s.items[k].t }

// Swap is heap.Interface's; it keeps the index of the two times.
func (s *submitTimes) Swap(i, k int) {
	s.items[i], s.items[k] = s.items[k], s.items[i]
	s.at[s.items[i].t], s.at[s.items[k].t] = i, k
}

// Push is heap.Interface's: it appends x, a timeCount.
func (s *submitTimes) Push(x any) {
	tc := x.(timeCount)
	s.at[tc.t] = len(s.items)
	s.items = append(s.items, tc)
}

// Pop is heap.Interface's: it takes the last item off.
func (s *submitTimes) Pop() any {
	last := s.items[len(s.items)-1]
	s.items = s.items[:len(s.items)-1]
	delete(s.at, last.t)
	return last
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
	// submitted, to the second below (the dashboard's longest wait, which
	// it shows in seconds).
	OldestPending map[string]time.Time
	PlaceLatency  Histogram
	StartLatency  Histogram
	PassLength    Histogram
	Totals        Totals
}

// Metrics returns the counters as the loop last published them
// (publishMetrics), without waiting for the loop: it publishes them in
// every pass of the loop that changed something, before its changes are
// made durable, so a change a caller was told of is in them. The value is
// shared: callers only read it.
func (c *Controller) Metrics(ctx context.Context) (*Metrics, error) {
	select {
	case <-c.failed:
		return nil, c.storeFailedError()
	case <-c.stop:
		return nil, errStopped
	case <-ctx.Done():
		return nil, ctx.Err()
	default:
	}
	m := c.metrics.Load()
	if m == nil {
		return nil, berth.Errorf(berth.ECodeUnavailable, "the controller has not started")
	}
	return m, nil
}

// publishMetrics makes the counters what Metrics returns, in time
// proportional to the queues and the workers, never to the jobs: the
// backlog of each queue is kept as jobs move. Loop only.
func (c *Controller) publishMetrics() {
	m := &Metrics{QueueDepth: map[string]int{}, Jobs: map[berth.JobState]int{}, Workers: map[berth.WorkerState]int{},
		GPUsInUse: map[string]int{}, OldestPending: map[string]time.Time{}}
	m.QueueDepth[berth.DefaultQueue] = 0 // a gauge at 0, not missing, while no job waits
	for _, ws := range c.workers {
		for _, q := range ws.w.Queues {
			m.QueueDepth[q] = 0
		}
	}
	for q, b := range c.stats.backlogs {
		m.QueueDepth[q] = b.n
		if t, ok := b.created.least(); ok {
			m.OldestPending[q] = t
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
	c.metrics.Store(m)
	c.pool.publishStatus(c.now().UTC())
}
