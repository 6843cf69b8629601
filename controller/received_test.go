package controller

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/internal/fakeclock"
	"github.com/berth-dev/berth/sqlite"
	"github.com/berth-dev/berth/store"
)

// runWithRetry submits a job (received from origin a when received),
// fails its first attempt, waits out the backoff and succeeds the second:
// creation, running, requeued, running again, succeeded.
func runWithRetry(t *testing.T, received bool) (*harness, *berth.Job) {
	h := newLifecycleHarness(t)
	h.worker(workerReg())
	j := h.submit(func(spec *berth.JobSpec) {
		spec.Retries = 1
		if received {
			spec.Origin = &berth.JobOrigin{Cluster: "a", RemoteID: "a-job", Nonce: "n1"}
		}
	}, "true")
	h.runLaunched(1)
	h.clock.Advance(time.Second)
	h.step(func() { h.l.requeueDue(h.clock.Now().UTC()) })
	h.runLaunched(0)
	return h, j
}

// TestReceivedJobChangesAreLoggedInTheirBatch: every row write of a job
// received from an origin — its creation, each transition, each change of
// its attempts — carries its changelog row in the same batch, with the
// row's state, attempts and reason, seqs increasing from 1 and a tag each;
// its last row is its tombstone, and it is then no longer tracked.
func TestReceivedJobChangesAreLoggedInTheirBatch(t *testing.T) {
	t.Parallel()
	h, j := runWithRetry(t, true)
	var seq uint64
	tags := map[string]bool{}
	var states []berth.JobState
	for i, b := range h.batches {
		var rows []berth.ChangelogRow
		if b.Federation != nil {
			rows = b.Federation.Changelog
		}
		var writes []store.JobUpdate // the job's row writes, as rows see them
		for _, nj := range b.Jobs {
			writes = append(writes, store.JobUpdate{ID: nj.ID, State: nj.State, Reason: nj.Reason})
		}
		writes = append(writes, b.JobUpdates...)
		if len(rows) != len(writes) {
			t.Fatalf("batch %d writes %d job rows and %d changelog rows, want one each", i, len(writes), len(rows))
		}
		for k, r := range rows {
			w := writes[k]
			seq++
			if r.Seq != seq || r.Origin != "a" || len(r.Tag) != 8 || tags[r.Tag] {
				t.Errorf("batch %d row %d: seq %d origin %q tag %q, want seq %d origin a and a new 8-character tag", i, k, r.Seq, r.Origin, r.Tag, seq)
			}
			tags[r.Tag] = true
			rj := r.Job
			if rj.JobID != j.ID || rj.RemoteID != "a-job" || rj.Nonce != "n1" || rj.State != w.State ||
				rj.Attempts != w.Attempts || rj.Reason != w.Reason || rj.Tombstone != w.State.Terminal() {
				t.Errorf("batch %d row %d = %+v, want the job's row %+v", i, k, rj, w)
			}
			states = append(states, rj.State)
		}
	}
	want := []berth.JobState{berth.JobPending, berth.JobRunning, berth.JobPending, berth.JobRunning, berth.JobSucceeded}
	if len(states) != len(want) {
		t.Fatalf("changelog states %v, want %v", states, want)
	}
	for i := range want {
		if states[i] != want[i] {
			t.Fatalf("changelog states %v, want %v", states, want)
		}
	}
	if h.l.fed.head != seq || len(h.l.fed.reasons) != 0 {
		t.Errorf("head %d (want %d), %d received jobs tracked after the end (want none)", h.l.fed.head, seq, len(h.l.fed.reasons))
	}
}

// TestLocalJobsCostNoFederation: a local job's life writes no federation
// rows, tracks nothing, and writing its row allocates nothing more than
// the row. Not parallel: it counts allocations.
func TestLocalJobsCostNoFederation(t *testing.T) {
	h, _ := runWithRetry(t, false)
	for i, b := range h.batches {
		if b.Federation != nil {
			t.Errorf("batch %d of a local job has federation writes %+v", i, b.Federation)
		}
	}
	if h.l.fed.head != 0 || h.l.fed.reasons != nil || h.l.fed.fresh != nil {
		t.Errorf("a local job left federation state %+v", &h.l.fed)
	}
	j := h.submit(nil, "true")
	js := h.l.jobs[j.ID]
	b := &store.Batch{JobUpdates: make([]store.JobUpdate, 0, 1)}
	h.l.fx.batch = b
	if n := testing.AllocsPerRun(100, func() {
		b.JobUpdates = b.JobUpdates[:0]
		h.l.writeJob(js)
	}); n != 0 {
		t.Errorf("writing a local job's row allocates %v times, want 0", n)
	}
}

// TestReceivedJobsAcrossARestart: a received job that waits gets a
// changelog row saying why, once per change of its reason; after a
// restart its repeat is found in the store, and the changelog's seqs go
// on from the head.
func TestReceivedJobsAcrossARestart(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "berth.db")
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ctx := t.Context()
	spec := berth.DefaultJobSpec()
	spec.Command = []string{"true"}
	req := &berth.HandoffRequest{RemoteID: "r1", Nonce: "n1", Job: spec}
	c, stop := startOn(t, path, now)
	first, err := c.ReceiveHandoff(ctx, "a", req)
	if err != nil || first.Duplicate || first.CreateRow.Seq != 1 || first.CreateRow.Tag == "" || first.CreateRow.Epoch == "" {
		t.Fatalf("handoff: %+v, %v; want a new job and its creation row, seq 1", first, err)
	}
	tick := func(c *Controller) []berth.ChangelogRow {
		t.Helper()
		var written <-chan struct{}
		if err := c.do(ctx, func() { c.housekeep(); written = c.durable() }); err != nil {
			t.Fatal(err)
		}
		<-written
		rows, err := c.store.Changelog(ctx, "a", 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		return rows
	}
	rows := tick(c)
	if len(rows) != 2 || rows[1].Job.State != berth.JobPending || rows[1].Job.Reason == "" || rows[1].Job.JobID != first.JobID {
		t.Fatalf("rows after a tick %+v, want the creation and a row saying why it waits", rows)
	}
	if again := tick(c); len(again) != 2 {
		t.Errorf("%d rows after a tick with nothing changed, want 2", len(again))
	}
	stop()
	c, _ = startOn(t, path, now)
	dup, err := c.ReceiveHandoff(ctx, "a", req)
	if err != nil || !dup.Duplicate || dup.JobID != first.JobID {
		t.Errorf("repeat after a restart: %+v, %v; want a duplicate of %s", dup, err, first.JobID)
	}
	next, err := c.ReceiveHandoff(ctx, "a", &berth.HandoffRequest{RemoteID: "r2", Nonce: "n1", Job: spec})
	if err != nil || next.CreateRow.Seq != 3 {
		t.Errorf("handoff after a restart: %+v, %v; want its creation row at seq 3", next, err)
	}
}

// TestChangelogPruning: the housekeeping tick prunes what the origin
// acknowledged; rows it has not acknowledged go once older than the
// retention, but for tombstones, and never with a retention of 0.
func TestChangelogPruning(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	spec := berth.DefaultJobSpec()
	spec.Command = []string{"true"}
	for _, tt := range []struct {
		name      string
		retention time.Duration
		left      int // rows left once the unacknowledged ones are 2h old
	}{
		{"retention 0", 0, 3},
		{"retention 1h", time.Hour, 1}, // the tombstone
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "berth.db"))
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			clock := fakeclock.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
			c := New(Config{Store: st, Now: clock.Now, ChangelogRetention: tt.retention, Housekeeping: time.Hour})
			if err := c.Start(ctx); err != nil {
				t.Fatal(err)
			}
			defer c.Stop(context.Background())
			// rows counts the rows written before the clock moved on (the
			// tick writes why r1 and r2 wait, now).
			rows := func() int {
				t.Helper()
				rows, err := st.Changelog(ctx, "a", 0, 100)
				if err != nil {
					t.Fatal(err)
				}
				n := 0
				for _, r := range rows {
					if r.Job.At.Before(clock.Now()) {
						n++
					}
				}
				return n
			}
			tick := func() {
				t.Helper()
				if err := c.do(ctx, c.housekeep); err != nil {
					t.Fatal(err)
				}
				c.prune.done.Wait()
			}
			if _, err := c.ReceiveHandoff(ctx, "a", &berth.HandoffRequest{RemoteID: "r1", Nonce: "n", Job: spec}); err != nil {
				t.Fatal(err)
			}
			ch, err := c.Changes(ctx, "a", berth.ChangeCursor{}, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Changes(ctx, "a", ch.Cursor, 0); err != nil { // acknowledges r1's creation
				t.Fatal(err)
			}
			for _, id := range []string{"r2", "r3"} {
				if _, err := c.ReceiveHandoff(ctx, "a", &berth.HandoffRequest{RemoteID: id, Nonce: "n", Job: spec}); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := c.CancelReceived(ctx, "a", &berth.FederationCancel{RemoteID: "r3", Nonce: "n", Version: 1}); err != nil {
				t.Fatal(err)
			}
			clock.Advance(2 * time.Hour)
			before := rows()
			tick()
			if n := rows(); n != tt.left {
				t.Errorf("%d rows left of %d, want %d", n, before, tt.left)
			}
		})
	}
}
