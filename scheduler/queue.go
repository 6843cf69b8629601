// Package scheduler decides where pending tasks run. It is pure: Schedule
// reads a queue, a set of workers and a time and returns a plan, with no I/O,
// goroutines or clock of its own; the same input gives the same plan.
//
// Order: every task has an effective priority
//
//	priority + wait × AgingRate (+ StarvationBoost once wait > StarvationAfter)
//
// and ties go to the earlier submission (FIFO). Because the aging term grows
// at the same rate for every task, the order without the boost never changes
// as time passes, so Queue keeps tasks sorted once, by
// priority − submitted × AgingRate, and only the boost is applied per plan.
package scheduler

import (
	"sort"
	"time"

	"github.com/berth-dev/berth"
)

// Config holds the ordering policy.
type Config struct {
	AgingRate       float64       // priority points gained per hour of waiting
	StarvationAfter time.Duration // wait past which a task is boosted
	StarvationBoost float64       // points added to a starving task
}

// DefaultConfig ages one point a minute and boosts tasks waiting over an hour
// above every unboosted priority.
func DefaultConfig() Config {
	return Config{AgingRate: 60, StarvationAfter: time.Hour, StarvationBoost: berth.MaxPriority}
}

// Task is one pending task of a job.
type Task struct {
	JobID       string
	Index       int
	Queue       string
	Priority    int
	Submitted   time.Time
	Seq         uint64 // FIFO tie-break; the controller passes submission order
	Resources   berth.Resources
	Constraints berth.Constraints

	key     float64 // priority − submitted × rate, in hours
	removed bool
	queued  bool
}

// Queue holds pending tasks in effective-priority order. It is not safe for
// concurrent use; the controller owns it.
type Queue struct {
	cfg     Config
	sorted  []*Task // by key desc, Seq asc; may contain removed tasks
	fresh   []*Task // pushed since the last sort
	removed int
	live    int
}

// NewQueue returns an empty queue ordered by cfg.
func NewQueue(cfg Config) *Queue { return &Queue{cfg: cfg} }

// Len returns the number of tasks queued.
func (q *Queue) Len() int { return q.live }

// Push queues t. Pushing a queued task does nothing.
func (q *Queue) Push(t *Task) {
	if t.queued {
		return
	}
	t.key = float64(t.Priority) - hours(t.Submitted)*q.cfg.AgingRate
	t.removed, t.queued = false, true
	q.fresh = append(q.fresh, t)
	q.live++
}

// Remove takes t out of the queue. Removing an unqueued task does nothing.
func (q *Queue) Remove(t *Task) {
	if !t.queued {
		return
	}
	t.queued, t.removed = false, true
	q.live--
	q.removed++
}

// EffectivePriority returns t's priority at now, aging and boost included.
func (q *Queue) EffectivePriority(t *Task, now time.Time) float64 {
	p := t.key + hours(now)*q.cfg.AgingRate
	if q.starving(t, now) {
		p += q.cfg.StarvationBoost
	}
	return p
}

func (q *Queue) starving(t *Task, now time.Time) bool {
	return q.cfg.StarvationAfter > 0 && now.Sub(t.Submitted) > q.cfg.StarvationAfter
}

func hours(t time.Time) float64 { return float64(t.UnixNano()) / float64(time.Hour) }

func before(a, b *Task) bool {
	if a.key != b.key {
		return a.key > b.key
	}
	return a.Seq < b.Seq
}

// settle merges fresh tasks into the sorted list and drops removed ones.
func (q *Queue) settle() {
	if q.removed > 0 && (q.removed > len(q.sorted)/2 || len(q.fresh) > 0) {
		kept := q.sorted[:0]
		for _, t := range q.sorted {
			if !t.removed {
				kept = append(kept, t)
			}
		}
		clear(q.sorted[len(kept):])
		q.sorted, q.removed = kept, 0
	}
	if len(q.fresh) == 0 {
		return
	}
	fresh := q.fresh[:0]
	for _, t := range q.fresh {
		if !t.removed {
			fresh = append(fresh, t)
		}
	}
	sort.Slice(fresh, func(i, j int) bool { return before(fresh[i], fresh[j]) })
	merged := make([]*Task, 0, len(q.sorted)+len(fresh))
	i, j := 0, 0
	for i < len(q.sorted) && j < len(fresh) {
		if before(fresh[j], q.sorted[i]) {
			merged = append(merged, fresh[j])
			j++
		} else {
			merged = append(merged, q.sorted[i])
			i++
		}
	}
	merged = append(merged, q.sorted[i:]...)
	merged = append(merged, fresh[j:]...)
	q.sorted, q.fresh = merged, q.fresh[:0]
}

// Ordered calls fn for each queued task in effective-priority order at now,
// until fn returns false. Starving tasks come first among equals of their
// boosted priority.
func (q *Queue) Ordered(now time.Time, fn func(*Task) bool) {
	q.settle()
	if q.cfg.StarvationAfter <= 0 {
		for _, t := range q.sorted {
			if !t.removed && !fn(t) {
				return
			}
		}
		return
	}
	// Two cursors over the one sorted list: starving tasks and the rest,
	// each already in key order; merge them by effective priority.
	var s, r int
	next := func(i int, starving bool) int {
		for i < len(q.sorted) && (q.sorted[i].removed || q.starving(q.sorted[i], now) != starving) {
			i++
		}
		return i
	}
	s, r = next(0, true), next(0, false)
	for s < len(q.sorted) || r < len(q.sorted) {
		var t *Task
		if r >= len(q.sorted) || (s < len(q.sorted) && q.sorted[s].key+q.cfg.StarvationBoost >= q.sorted[r].key) {
			t, s = q.sorted[s], next(s+1, true)
		} else {
			t, r = q.sorted[r], next(r+1, false)
		}
		if !fn(t) {
			return
		}
	}
}
