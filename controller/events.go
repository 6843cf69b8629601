package controller

import (
	"context"
	"maps"
	"slices"
	"sync"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/store"
)

// audit records e in the audit log only, with the loop's pending writes.
// Loop only.
func (l *lifecycle) audit(e *berth.Event) {
	if l.audited {
		l.write(&store.Batch{Audit: []*berth.Event{e}})
	}
}

// emit numbers events, stores them with the loop's pending writes when
// Config.StoreEvents says so, and publishes them once those are durable.
// Loop only.
func (l *lifecycle) emit(events ...berth.Event) {
	if len(events) == 0 {
		return
	}
	for i := range events {
		l.eventSeq++
		events[i].Seq = l.eventSeq
		if e := &events[i]; e.JobID != "" && e.Name == "" && l.jobs[e.JobID] != nil {
			e.Name = l.jobs[e.JobID].view().Name // a job event carries the job's name
		}
	}
	if l.audited || l.storeEvents {
		// The batch holds copies: events is published after the commit.
		// Audit and Events share them.
		stored := make([]*berth.Event, len(events))
		copies := slices.Clone(events) // one allocation for them all
		for i := range copies {
			stored[i] = &copies[i]
		}
		b := &store.Batch{}
		if l.audited {
			b.Audit = stored
		}
		if l.storeEvents {
			b.Events = stored
		}
		l.write(b)
	}
	l.fx.after = append(l.fx.after, effect{events: events})
}

// loadEvents restores the newest stored events, at start: they are
// published again and numbering goes on after them.
func (c *Controller) loadEvents(events []*berth.Event) {
	for _, e := range events {
		c.eventSeq = e.Seq
		c.bus.Publish(*e)
	}
}

// Bus keeps the most recent events in a ring and wakes readers when more
// arrive. A reader that falls a whole ring behind is told how many it
// missed and, if it asks (ReadCounting), of which types.
type Bus struct {
	mu     sync.Mutex
	ring   []berth.Event
	next   uint64 // seq of the next event
	notify chan struct{}
	// evicted counts, by type, the events that have left the ring since
	// the bus was made.
	evicted map[string]uint64
}

// NewBus returns a bus remembering the last size events.
func NewBus(size int) *Bus {
	return &Bus{ring: make([]berth.Event, size), next: 1, notify: make(chan struct{}), evicted: map[string]uint64{}}
}

// Publish appends events, numbered in order after those already
// published (the controller numbers them when it stores them), and wakes
// readers.
func (b *Bus) Publish(events ...berth.Event) {
	if len(events) == 0 {
		return
	}
	b.mu.Lock()
	for _, e := range events {
		slot := &b.ring[e.Seq%uint64(len(b.ring))]
		if slot.Seq != 0 {
			b.evicted[slot.Type]++
		}
		*slot = e
		b.next = e.Seq + 1
	}
	close(b.notify)
	b.notify = make(chan struct{})
	b.mu.Unlock()
}

// Last returns the seq of the newest event (0 when none).
func (b *Bus) Last() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.next - 1
}

// Counts returns the seq of the newest event (0 when none) and how many
// events of each type had been published on the bus up to it.
func (b *Bus) Counts() (uint64, map[string]uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	published := maps.Clone(b.evicted)
	for s := b.oldest(); s < b.next; s++ {
		if e := &b.ring[s%uint64(len(b.ring))]; e.Seq == s { // not a slot left empty by a numbering that began after 1
			published[e.Type]++
		}
	}
	return b.next - 1, published
}

// oldest returns the seq of the oldest event the ring keeps (b.next when
// none). b.mu held.
func (b *Bus) oldest() uint64 {
	return b.next - min(b.next-1, uint64(len(b.ring)))
}

// Read waits until there are events after seq and returns them, with the
// number of events that had already left the ring. It returns ctx's error
// when ctx ends first.
func (b *Bus) Read(ctx context.Context, after uint64) ([]berth.Event, uint64, error) {
	events, missed, _, err := b.read(ctx, after, false)
	return events, missed, err
}

// ReadCounting is Read that also returns, when events were missed, how
// many events of each type had left the ring by then, counted like
// Counts: a reader that knows how many of each type there were up to seq
// after (from Counts, then from what it read) knows how many of each type
// it missed.
func (b *Bus) ReadCounting(ctx context.Context, after uint64) ([]berth.Event, uint64, map[string]uint64, error) {
	return b.read(ctx, after, true)
}

func (b *Bus) read(ctx context.Context, after uint64, counting bool) ([]berth.Event, uint64, map[string]uint64, error) {
	for {
		b.mu.Lock()
		if after+1 < b.next {
			first := after + 1
			var missed uint64
			var evicted map[string]uint64
			if oldest := b.oldest(); first < oldest {
				missed, first = oldest-first, oldest
				if counting {
					evicted = maps.Clone(b.evicted)
				}
			}
			out := make([]berth.Event, 0, b.next-first)
			for s := first; s < b.next; s++ {
				out = append(out, b.ring[s%uint64(len(b.ring))])
			}
			b.mu.Unlock()
			return out, missed, evicted, nil
		}
		ch := b.notify
		b.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, 0, nil, ctx.Err()
		}
	}
}
