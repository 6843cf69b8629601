package controller

import (
	"context"
	"sync"
	"time"

	"github.com/berth-dev/berth"
)

// Event types.
const (
	EventJobSubmitted      = "job.submitted"
	EventJobRunning        = "job.running"
	EventJobRequeued       = "job.requeued"
	EventJobPreempted      = "job.preempted"  // a running attempt is stopped for a waiting job
	EventQuotaExceeded     = "quota.exceeded" // a job is held back by a quota rule
	EventJobSucceeded      = "job.succeeded"
	EventJobFailed         = "job.failed"
	EventJobCancelled      = "job.cancelled"
	EventWorkerRegistered  = "worker.registered"
	EventWorkerLost        = "worker.lost"
	EventWorkerDisconnects = "worker.disconnected"
	EventQuotaSet          = "quota.set"      // a quota rule was created or replaced
	EventQuotaDeleted      = "quota.deleted"  // a quota rule was deleted
	EventWorkerControl     = "worker.control" // an operator turned a host's queue on or off
)

// Event is one thing that happened, published after it is durable.
type Event struct {
	Seq       uint64         `json:"seq"`
	Time      time.Time      `json:"time"`
	Type      string         `json:"type"`
	JobID     string         `json:"job_id,omitempty"`
	State     berth.JobState `json:"state,omitempty"`
	WorkerID  string         `json:"worker_id,omitempty"`
	Host      string         `json:"host,omitempty"`
	Reason    string         `json:"reason,omitempty"`
	Quota     string         `json:"quota,omitempty"`     // id of the rule a quota event is about
	Limits    string         `json:"limits,omitempty"`    // a set rule's limits, e.g. "gpus<=8 jobs<=4"
	Actor     string         `json:"actor,omitempty"`     // who made the change; empty until requests carry a user identity
	User      string         `json:"user,omitempty"`      // the job's user, for quota events
	Requested int            `json:"requested,omitempty"` // what a held-back job asked for
	Limit     int            `json:"limit,omitempty"`     // the rule's limit
	Queue     string         `json:"queue,omitempty"`     // worker control: the queue ("*": every queue)
	Desired   string         `json:"desired,omitempty"`   // worker control: on or off
	Policy    string         `json:"policy,omitempty"`    // worker control: the stop policy
	Attempts  []string       `json:"attempts,omitempty"`  // attempts a control stopped, or the one a requeue follows
}

// Bus keeps the most recent events in a ring and wakes readers when more
// arrive. A reader that falls a whole ring behind is told how many it missed.
type Bus struct {
	mu     sync.Mutex
	ring   []Event
	next   uint64 // seq of the next event
	notify chan struct{}
}

// NewBus returns a bus remembering the last size events.
func NewBus(size int) *Bus {
	return &Bus{ring: make([]Event, size), next: 1, notify: make(chan struct{})}
}

// Publish appends events, numbering them, and wakes readers.
func (b *Bus) Publish(events ...Event) {
	if len(events) == 0 {
		return
	}
	b.mu.Lock()
	for _, e := range events {
		e.Seq = b.next
		b.ring[b.next%uint64(len(b.ring))] = e
		b.next++
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

// Read waits until there are events after seq and returns them, with the
// number of events that had already left the ring. It returns ctx's error
// when ctx ends first.
func (b *Bus) Read(ctx context.Context, after uint64) ([]Event, uint64, error) {
	for {
		b.mu.Lock()
		if after+1 < b.next {
			first := after + 1
			var missed uint64
			if oldest := b.next - min(b.next-1, uint64(len(b.ring))); first < oldest {
				missed, first = oldest-first, oldest
			}
			out := make([]Event, 0, b.next-first)
			for s := first; s < b.next; s++ {
				out = append(out, b.ring[s%uint64(len(b.ring))])
			}
			b.mu.Unlock()
			return out, missed, nil
		}
		ch := b.notify
		b.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
	}
}
