// Package scheduler decides where pending jobs run. It is pure: RunPass
// reads a queue and a snapshot of the cluster and returns a plan, with no
// I/O, goroutines or clock of its own; the same input gives the same plan.
//
// Order: every pending task (one per job; a gang is one task of Nodes
// members) has an effective priority
//
//	priority + wait × AgingRate (+ StarvationBoost once wait > StarvationAfter)
//	         − FairShare × dominant share ÷ weight
//
// and ties go to the earlier submission (FIFO). The dominant share is the
// largest fraction of its queue's GPUs, CPUs or memory that the task's user
// holds there (weighted dominant-resource fairness), so one user with
// 10,000 queued jobs cannot lock others out. Because the aging term grows at
// the same rate for every task, the order within one user's tasks never
// changes as time passes, so Queue keeps each (queue, user) list sorted
// once, by priority − submitted × AgingRate, and a pass merges the lists.
package scheduler

import (
	"cmp"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/berth-dev/berth"
)

// Task is one pending job: Nodes members (1 for a single-node job, N for a
// gang) that must all be placed at once, each needing Resources. What it
// asks for is its TaskSpec, which the tasks of an array share.
type Task struct {
	*TaskSpec
	JobID    string
	Priority int
	Seq      uint64 // FIFO tie-break; the controller passes submission order
	// Avoid lists the workers (IDs) where the task's earlier attempts
	// failed: it goes to another worker where one fits now, else to one
	// of these.
	Avoid []string

	// Reason is why the task was still pending after the last pass that
	// examined it, or that left it out as blocked; RunPass sets it.
	// Queue.Reasons says what holds now.
	Reason Reason

	key        float64 // priority − submitted × rate, in hours
	shape      *shape  // interned: tasks alike for feasibility share one
	list       *list
	reasonPass uint64

	// Front puts the task at the front of its priority class among its
	// user's tasks of its queue when pushed: ordered as if submitted with
	// the oldest of them, and first among equals (a resume-style requeue).
	Front   bool
	removed bool
	queued  bool
}

// TaskSpec is what a task asks for and where it belongs, the same for
// every job of an array: the controller makes one per array (a queued job
// holds one Task, and a million of them would otherwise copy it a million
// times). Never changed while a task holding it is queued.
type TaskSpec struct {
	Nodes    int // members; 0 means 1
	Queue    string
	User     string
	Template string
	Model    string // placed preferably where this model is loaded
	// Spread names a set of replicas (a service's): they go to hosts that
	// run none of the set where any fits, else where they fit.
	Spread      string
	MaxRuntime  time.Duration // 0: unknown, never backfills
	Submitted   time.Time
	Resources   berth.Resources
	Constraints berth.Constraints
	// NoImage marks a task whose job names no container image: it never
	// goes to a worker labelled ImageRequiredLabel.
	NoImage bool
}

// ImageRequiredLabel is the label (value "true") of a worker that runs only
// jobs naming a container image: a Kubernetes node of a backend with no
// default image. A task marked NoImage never goes there.
const ImageRequiredLabel = "berth.dev/image-required"

// needsImage reports whether w runs only jobs that name an image.
func (w *Worker) needsImage() bool { return w.Labels[ImageRequiredLabel] == "true" }

// submitted returns Submitted in unix nanos (the lists' order and bounds).
func (t *Task) submitted() int64 { return t.Submitted.UnixNano() }

func (t *Task) nodes() int { return max(t.Nodes, 1) }

// shapeCount returns the count of t's shape in its list, or nil when t is
// not queued.
func (t *Task) shapeCount() *shapeCount {
	if !t.queued {
		return nil
	}
	return t.list.shapes[t.shape]
}

// Config holds the scheduling policy.
type Config struct {
	AgingRate       float64       // priority points gained per hour of waiting
	StarvationAfter time.Duration // wait past which a task is boosted
	StarvationBoost float64       // points added to a starving task
	// FairShare is the priority points a user loses at a dominant share of
	// 1 (all of the queue); 0 turns fair share off.
	FairShare float64
	// HeadOfLine stops each queue at its first task that does not fit
	// (strict FIFO, as a scheduler without backfill).
	HeadOfLine bool
	// ReserveAfter is how long a task that does not fit waits before it
	// reserves workers as they free up; 0 never reserves.
	ReserveAfter    time.Duration
	MaxReservations int // reservations held at once; 0 means 8
	// Preemption: a pending task may stop preemptible running attempts of
	// lower priority that have run at least PreemptMinRuntime, at most
	// PreemptLimit per PreemptWindow (the caller counts; see Snapshot).
	Preempt           bool
	PreemptMinRuntime time.Duration
	PreemptLimit      int
	PreemptWindow     time.Duration
	// Placement chooses among the workers a task fits: PlacementDefault,
	// PlacementBestFit or PlacementFGD.
	Placement string
	// MixWindow is how many recent submissions PlacementFGD learns the
	// mix of requests from; 0 means DefaultMixWindow.
	MixWindow int
}

// DefaultConfig ages one point a minute, boosts tasks waiting over an hour
// above every unboosted priority, takes up to 100 points for fair share,
// reserves for tasks blocked over 10 minutes and allows 10 preemptions a
// minute of attempts that have run 5 minutes.
func DefaultConfig() Config {
	return Config{AgingRate: 60, StarvationAfter: time.Hour, StarvationBoost: berth.MaxPriority,
		FairShare: 100, ReserveAfter: 10 * time.Minute, MaxReservations: 8,
		Preempt: true, PreemptMinRuntime: 5 * time.Minute, PreemptLimit: 10, PreemptWindow: time.Minute}
}

// listKey names one user's tasks in one queue.
type listKey struct{ queue, user string }

// list holds one user's tasks of one queue, sorted by key.
type list struct {
	key    listKey
	sorted []*Task  // by key desc, Seq asc; may contain removed tasks
	subs   []int64  // submission times of sorted, read without touching each task
	shps   []*shape // shapes of sorted, likewise
	// sorted[:blockedTo] holds only removed tasks and tasks of the
	// shapes blockedBy, as the last cursor that passed over those found.
	blockedTo int
	blockedBy []*shape
	oldest    int64   // no task was submitted before (removals leave it low)
	newest    int64   // nor after (removals leave it high)
	fresh     []*Task // pushed since the last settle
	removed   int
	live      int

	// shapes counts the queued tasks of each shape, with one of them
	// (rep, perhaps removed since) to judge the shape by.
	shapes    map[*shape]*shapeCount
	templated int // queued tasks that name a template (quota rules may apply)
	// unreasoned are the tasks pushed while their shape was blocked: the
	// next pass that leaves the shape out gives them its reason.
	unreasoned []*Task
}

// shapeCount is the queued tasks of one shape in a list, and whether
// passes may leave them out. A shape is blocked when a pass found, before
// it placed anything, that none of them could run whatever the pass did
// (see pass.blockedNow) and examined all of them, or gave them all a
// static reason (list.reasonAll); key is the reason it found then. A
// later pass that finds the same reason at its start (now) leaves them
// out (skipped is its number).
type shapeCount struct {
	n                  int
	rep                *Task
	key, now           Reason
	qe                 *QuotaExceeded // how the shape was over quota at the last check, if it was
	blocked            bool
	blockedAt, checked uint64 // the pass that blocked it; the last that found it blocked at its start
	skipped            uint64
	seen               int // its tasks examined by pass seenPass
	seenPass           uint64
}

// count adds delta to the tasks of t's shape (and template) in l.
func (l *list) count(t *Task, delta int) {
	if t.Template != "" {
		l.templated += delta
	}
	c := l.shapes[t.shape]
	if c == nil {
		if l.shapes == nil {
			l.shapes = map[*shape]*shapeCount{}
		}
		c = &shapeCount{rep: t}
		l.shapes[t.shape] = c
	}
	if c.n += delta; c.n == 0 {
		delete(l.shapes, t.shape)
	}
}

// Queue holds pending tasks. It is not safe for concurrent use; the
// controller owns it.
type Queue struct {
	cfg    Config
	mix    *Mix // the requests of recent submissions (PlacementFGD), or nil
	lists  map[listKey]*list
	shapes map[shape]*shape
	live   int
	pass   uint64 // passes run over this queue
}

// NewQueue returns an empty queue ordered by cfg.
func NewQueue(cfg Config) *Queue {
	q := &Queue{cfg: cfg, lists: map[listKey]*list{}, shapes: map[shape]*shape{}}
	if cfg.Placement == PlacementFGD {
		q.mix = NewMix(cmp.Or(cfg.MixWindow, DefaultMixWindow))
	}
	return q
}

// Len returns the number of tasks queued.
func (q *Queue) Len() int { return q.live }

// Push queues t. Pushing a queued task does nothing. Under PlacementFGD
// the mix learns t's request, unless t is a requeue put at the Front.
func (q *Queue) Push(t *Task) {
	if t.queued {
		return
	}
	if q.mix != nil && !t.Front {
		for range t.nodes() {
			q.mix.Observe(demandOf(t))
		}
	}
	k := listKey{t.Queue, t.User}
	l := q.lists[k]
	if l == nil {
		l = &list{key: k, oldest: math.MaxInt64, newest: math.MinInt64}
		q.lists[k] = l
	}
	sh := shapeOf(t)
	t.shape = q.shapes[sh]
	if t.shape == nil { // a new shape: only then is one allocated
		t.shape = new(shape)
		*t.shape = sh
		q.shapes[sh] = t.shape
	}
	sub := t.submitted()
	l.oldest, l.newest = min(l.oldest, sub), max(l.newest, sub)
	aged := t.Submitted
	if t.Front {
		aged = time.Unix(0, l.oldest)
	}
	key := float64(t.Priority) - hours(aged)*q.cfg.AgingRate
	l.live++
	q.live++
	l.count(t, 1)
	if l.shapes[t.shape].blocked { // passes that leave its shape out give t its reason
		l.unreasoned = append(l.unreasoned, t)
	}
	if t.list == l && t.removed {
		// Removed but still held by l (a requeue): restore it in place
		// when its place is unchanged, else drop the old copy first, so
		// that l never holds it twice.
		l.removed--
		if t.key == key {
			t.removed, t.queued = false, true
			l.blockedTo = 0 // t may be in it
			return
		}
		t.removed = true
		l.compact()
	}
	t.key = key
	t.removed, t.queued, t.list = false, true, l
	l.fresh = append(l.fresh, t)
}

// Remove takes t out of the queue. Removing an unqueued task does nothing.
func (q *Queue) Remove(t *Task) {
	if !t.queued {
		return
	}
	t.queued, t.removed = false, true
	t.list.live--
	t.list.removed++
	t.list.count(t, -1)
	q.live--
	if t.list.live == 0 {
		delete(q.lists, t.list.key)
	}
}

// EffectivePriority returns t's priority at now, aging and boost included
// (fair share, which depends on the cluster, is not).
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
	if a.Front != b.Front {
		return a.Front
	}
	return a.Seq < b.Seq
}

// reasonAll gives each queued task of shape sh in l the reason r, as pass
// number pass, as a pass that examined them would.
func (l *list) reasonAll(sh *shape, r Reason, pass uint64) {
	for i, s := range l.shps { // the other shapes' tasks are not read
		if s != sh {
			continue
		}
		if t := l.sorted[i]; !t.removed {
			t.Reason, t.reasonPass = r, pass
		}
	}
	for _, t := range l.fresh {
		if t.shape == sh && !t.removed {
			t.Reason, t.reasonPass = r, pass
		}
	}
}

// compact drops removed tasks from sorted and fresh.
func (l *list) compact() {
	drop := func(list []*Task) []*Task {
		kept := list[:0]
		for _, t := range list {
			if t.removed {
				t.list = nil // no longer held here
			} else {
				kept = append(kept, t)
			}
		}
		clear(list[len(kept):])
		return kept
	}
	l.sorted, l.fresh, l.removed = drop(l.sorted), drop(l.fresh), 0
	l.index()
}

// settle merges fresh tasks into the sorted list, and drops removed ones
// once they are over half of it.
func (l *list) settle() {
	if l.removed > len(l.sorted)/2 {
		l.compact()
	}
	if len(l.fresh) == 0 {
		return
	}
	fresh := l.fresh
	sort.Slice(fresh, func(i, j int) bool { return before(fresh[i], fresh[j]) })
	// Merge in place from the back: each fresh task goes before the
	// first task of sorted it precedes, found by binary search, so that
	// the tasks already sorted are moved but not read.
	n := len(l.sorted)
	l.sorted = slices.Grow(l.sorted, len(fresh))[:n+len(fresh)]
	l.subs = slices.Grow(l.subs, len(fresh))[:n+len(fresh)]
	l.shps = slices.Grow(l.shps, len(fresh))[:n+len(fresh)]
	i := n
	for j := len(fresh) - 1; j >= 0; j-- {
		t := fresh[j]
		k := sort.Search(i, func(x int) bool { return before(t, l.sorted[x]) })
		copy(l.sorted[k+j+1:], l.sorted[k:i])
		copy(l.subs[k+j+1:], l.subs[k:i])
		copy(l.shps[k+j+1:], l.shps[k:i])
		l.sorted[k+j], l.subs[k+j], l.shps[k+j] = t, t.submitted(), t.shape
		i = k
	}
	l.blockedTo = min(l.blockedTo, i) // fresh[0] went to i: nothing before it moved
	clear(l.fresh)
	l.fresh = l.fresh[:0]
}

// index rebuilds subs and shps.
func (l *list) index() {
	l.subs, l.shps, l.blockedTo = l.subs[:0], l.shps[:0], 0
	for _, t := range l.sorted {
		l.subs = append(l.subs, t.submitted())
		l.shps = append(l.shps, t.shape)
	}
}

// cursor walks one list in effective-priority order at now: two indexes
// over the one sorted slice, for starving tasks and the rest, each already
// in key order, merged by effective priority.
type cursor struct {
	q      *Queue
	l      *list
	now    time.Time
	cutoff int64 // tasks submitted before are starving
	s, r   int
	score  float64  // effective priority of head, less the list's fair-share penalty
	pass   []*shape // shapes whose tasks it passes over
}

// newCursor returns a cursor over l at now that passes over the tasks of
// the shapes in pass.
func (q *Queue) newCursor(l *list, now time.Time, pass []*shape) *cursor {
	l.settle()
	c := &cursor{q: q, l: l, now: now, cutoff: now.Add(-q.cfg.StarvationAfter).UnixNano(), pass: pass}
	if q.cfg.StarvationAfter <= 0 {
		c.cutoff = math.MinInt64
	}
	// Start past the tasks it passes over whatever their kind, resuming
	// where the last cursor that passed over no more shapes stopped.
	from := 0
	if !slices.ContainsFunc(l.blockedBy, func(sh *shape) bool { return !slices.Contains(pass, sh) }) {
		from = l.blockedTo
	}
	for from < len(l.sorted) && (len(pass) > 0 && slices.Contains(pass, l.shps[from]) || l.sorted[from].removed) {
		from++
	}
	l.blockedTo, l.blockedBy = from, slices.Clone(pass)
	// Scan for the first of each kind only where the list may hold one.
	c.s, c.r = len(l.sorted), len(l.sorted)
	if l.oldest < c.cutoff {
		c.s = c.skip(from, true)
	}
	if l.newest >= c.cutoff {
		c.r = c.skip(from, false)
	}
	return c
}

func (c *cursor) skip(i int, starving bool) int {
	subs, shps := c.l.subs, c.l.shps
	for i < len(subs) && ((subs[i] < c.cutoff) != starving || len(c.pass) > 0 && slices.Contains(c.pass, shps[i]) ||
		c.l.sorted[i].removed) {
		i++
	}
	return i
}

// head returns the next task, or nil when the list is exhausted.
func (c *cursor) head() *Task {
	n := len(c.l.sorted)
	switch {
	case c.s >= n && c.r >= n:
		return nil
	case c.r >= n:
		return c.l.sorted[c.s]
	case c.s >= n:
		return c.l.sorted[c.r]
	}
	if c.l.sorted[c.s].key+c.q.cfg.StarvationBoost >= c.l.sorted[c.r].key {
		return c.l.sorted[c.s]
	}
	return c.l.sorted[c.r]
}

func (c *cursor) advance() {
	if c.s < len(c.l.sorted) && c.head() == c.l.sorted[c.s] {
		c.s = c.skip(c.s+1, true)
	} else {
		c.r = c.skip(c.r+1, false)
	}
}

// merger yields the tasks of every list in score order: a heap of cursors.
type merger struct {
	heap    []*cursor
	penalty func(listKey) float64 // fair-share points taken from a list
	last    *cursor               // yielded the last task; pushed back at the next call
}

// merger returns a merger over every list at now. skip, if not nil, says
// which lists to leave out (all) and which shapes' tasks to pass over in
// the others.
func (q *Queue) merger(now time.Time, penalty func(listKey) float64, skip func(*list) (all bool, shapes []*shape)) *merger {
	m := &merger{penalty: penalty, heap: make([]*cursor, 0, len(q.lists))}
	keys := make([]listKey, 0, len(q.lists))
	for k := range q.lists {
		keys = append(keys, k)
	}
	// Map order is random; a fixed order keeps plans deterministic.
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].queue != keys[j].queue {
			return keys[i].queue < keys[j].queue
		}
		return keys[i].user < keys[j].user
	})
	for _, k := range keys {
		l := q.lists[k]
		var pass []*shape
		if skip != nil {
			var all bool
			if all, pass = skip(l); all {
				continue
			}
		}
		c := q.newCursor(l, now, pass)
		if c.head() != nil {
			m.push(c)
		}
	}
	return m
}

func (m *merger) rescore(c *cursor) {
	t := c.head()
	c.score = c.q.EffectivePriority(t, c.now)
	if m.penalty != nil {
		c.score -= m.penalty(c.l.key)
	}
}

func (m *merger) less(a, b *cursor) bool {
	if a.score != b.score {
		return a.score > b.score
	}
	return a.head().Seq < b.head().Seq
}

func (m *merger) push(c *cursor) {
	m.rescore(c)
	m.heap = append(m.heap, c)
	i := len(m.heap) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !m.less(m.heap[i], m.heap[p]) {
			break
		}
		m.heap[i], m.heap[p] = m.heap[p], m.heap[i]
		i = p
	}
}

// pop removes and returns the best cursor, or nil.
func (m *merger) pop() *cursor {
	n := len(m.heap)
	if n == 0 {
		return nil
	}
	top := m.heap[0]
	m.heap[0] = m.heap[n-1]
	m.heap[n-1] = nil
	m.heap = m.heap[:n-1]
	i := 0
	for {
		l, r, best := 2*i+1, 2*i+2, i
		if l < len(m.heap) && m.less(m.heap[l], m.heap[best]) {
			best = l
		}
		if r < len(m.heap) && m.less(m.heap[r], m.heap[best]) {
			best = r
		}
		if best == i {
			break
		}
		m.heap[i], m.heap[best] = m.heap[best], m.heap[i]
		i = best
	}
	return top
}

// next returns the next task in order, or nil when all are done. The list
// of the task returned is scored again at the following call, so that a
// placement made in between counts against its fair share.
func (m *merger) next() *Task {
	if c := m.last; c != nil {
		m.last = nil
		if c.head() != nil {
			m.push(c)
		}
	}
	c := m.pop()
	if c == nil {
		return nil
	}
	t := c.head()
	c.advance()
	m.last = c
	return t
}

// Ordered calls fn for each queued task in effective-priority order at now
// (without fair share), until fn returns false.
func (q *Queue) Ordered(now time.Time, fn func(*Task) bool) {
	m := q.merger(now, nil, nil)
	for t := m.next(); t != nil; t = m.next() {
		if !fn(t) {
			return
		}
	}
}
