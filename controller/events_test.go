package controller

import (
	"context"
	"maps"
	"testing"

	"github.com/berth-dev/berth"
)

// TestBusCountsWhatLeftTheRing: a reader that falls behind learns how
// many events of each type it missed, from the counts at its start and
// the evicted counts ReadCounting returns; Read and a reader that kept up
// see no counts.
func TestBusCountsWhatLeftTheRing(t *testing.T) {
	t.Parallel()
	bus := NewBus(4)
	seq := uint64(0)
	publish := func(types ...string) {
		var events []berth.Event
		for _, typ := range types {
			seq++
			events = append(events, berth.Event{Seq: seq, Type: typ})
		}
		bus.Publish(events...)
	}
	publish(berth.EventJobFailed, berth.EventJobFailed)
	after, seen := bus.Counts()
	if after != 2 || !maps.Equal(seen, map[string]uint64{berth.EventJobFailed: 2}) {
		t.Fatalf("Counts = %d, %v; want 2 and 2 job.failed", after, seen)
	}
	publish(berth.EventJobSubmitted, berth.EventJobSucceeded, berth.EventJobSubmitted) // seq 3-5: the ring keeps 2-5
	events, missed, evicted, err := bus.ReadCounting(context.Background(), after)
	if err != nil || len(events) != 3 || missed != 0 || evicted != nil {
		t.Fatalf("a reader that kept up: %d events, %d missed, %v, %v", len(events), missed, evicted, err)
	}
	// Seq 6-12: the ring keeps 9-12; a reader after 5 missed 6-8.
	publish(berth.EventJobSucceeded, berth.EventJobSubmitted, berth.EventJobSucceeded, berth.EventJobRunning,
		berth.EventJobRunning, berth.EventJobRunning, berth.EventJobRunning)
	events, missed, evicted, err = bus.ReadCounting(context.Background(), 5)
	if err != nil || len(events) != 4 || events[0].Seq != 9 || missed != 3 {
		t.Fatalf("a reader behind: %d events from %d, %d missed, %v", len(events), events[0].Seq, missed, err)
	}
	// Evicted: seq 1-8, of which the reader had seen 1-5 (2 failed, 2
	// submitted, 1 succeeded): it missed 2 succeeded and 1 submitted.
	want := map[string]uint64{berth.EventJobFailed: 2, berth.EventJobSubmitted: 3, berth.EventJobSucceeded: 3}
	if !maps.Equal(evicted, want) {
		t.Errorf("evicted = %v, want %v", evicted, want)
	}
	if _, missed, err := bus.Read(context.Background(), 5); err != nil || missed != 3 {
		t.Errorf("Read after 5: %d missed, %v; want 3", missed, err)
	}
	if last, published := bus.Counts(); last != 12 || published[berth.EventJobRunning] != 4 || published[berth.EventJobSubmitted] != 3 {
		t.Errorf("Counts = %d, %v", last, published)
	}
}
