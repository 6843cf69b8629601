package federation

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/store"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// rj is a received job's state.
func rj(remoteID, nonce string, state berth.JobState) berth.RemoteJob {
	return berth.RemoteJob{RemoteID: remoteID, Nonce: nonce, JobID: "b-" + remoteID + "-" + nonce, State: state,
		Tombstone: state.Terminal()}
}

// ids lists the remote id and state of each job of ch.
func ids(ch *berth.FederationChanges) []string {
	var out []string
	for _, j := range ch.Jobs {
		out = append(out, j.RemoteID+":"+string(j.State))
	}
	return out
}

// cursorOf is the cursor naming row r of peer p.
func cursorOf(p *memPeer, r berth.ChangelogRow) berth.ChangeCursor {
	return berth.ChangeCursor{Epoch: p.epoch, Seq: r.Seq, Tag: r.Tag}
}

// fixture is a peer with jobs of origins a and x: a1 running, a2 ended
// (succeeded), a3 pending, and x1's rows between them.
func fixture() (p *memPeer, rows []berth.ChangelogRow) {
	p = newMemPeer("E1")
	for i, w := range []struct {
		origin string
		job    berth.RemoteJob
	}{
		{"a", rj("a1", "n1", berth.JobPending)},   // 1
		{"a", rj("a2", "n1", berth.JobPending)},   // 2
		{"x", rj("x1", "n1", berth.JobPending)},   // 3
		{"a", rj("a1", "n1", berth.JobRunning)},   // 4
		{"a", rj("a2", "n1", berth.JobSucceeded)}, // 5
		{"a", rj("a3", "n1", berth.JobPending)},   // 6
		{"x", rj("x1", "n1", berth.JobRunning)},   // 7
	} {
		rows = append(rows, p.write(w.origin, w.job, t0.Add(time.Duration(i)*time.Minute)))
	}
	return p, rows
}

func TestAnswerZeroCursorIsFull(t *testing.T) {
	p, rows := fixture()
	ch, ack, err := Answer(context.Background(), p, "a", berth.ChangeCursor{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !ch.Full || ch.More || ch.From != (berth.ChangeCursor{}) {
		t.Errorf("answer = full %v more %v from %+v; want full, no more, no from", ch.Full, ch.More, ch.From)
	}
	// The active set, then the tombstones not acknowledged.
	if got, want := ids(ch), []string{"a1:running", "a3:pending", "a2:succeeded"}; !slices.Equal(got, want) {
		t.Errorf("jobs = %v, want %v", got, want)
	}
	// The head row is x's: the cursor names it all the same.
	if want := cursorOf(p, rows[6]); ch.Cursor != want {
		t.Errorf("cursor = %+v, want the head row %+v", ch.Cursor, want)
	}
	if ack != (store.OriginAck{Origin: "a"}) {
		t.Errorf("a stale cursor acknowledged %+v; want nothing", ack)
	}

	// The next pull with that cursor continues incrementally, and
	// acknowledges it.
	p.acks["a"] = ack
	p.write("a", rj("a3", "n1", berth.JobRunning), t0.Add(time.Hour))
	next, ack, err := Answer(context.Background(), p, "a", ch.Cursor, 0)
	if err != nil {
		t.Fatal(err)
	}
	if next.Full || !slices.Equal(ids(next), []string{"a3:running"}) || next.From != ch.Cursor {
		t.Errorf("pull after full = full %v jobs %v from %+v; want a3 running after %+v", next.Full, ids(next), next.From, ch.Cursor)
	}
	if ack != (store.OriginAck{Origin: "a", Seq: ch.Cursor.Seq, Tag: ch.Cursor.Tag}) {
		t.Errorf("ack = %+v, want the cursor pulled with", ack)
	}
}

func TestAnswerIncrementalPages(t *testing.T) {
	p, rows := fixture()
	from := cursorOf(p, rows[0])
	p.acks["a"] = store.OriginAck{Seq: 0, PrunedSeq: 0}
	ch, ack, err := Answer(context.Background(), p, "a", from, 2)
	if err != nil {
		t.Fatal(err)
	}
	if ch.Full || !ch.More || !slices.Equal(ids(ch), []string{"a2:pending", "a1:running"}) {
		t.Fatalf("first page = full %v more %v %v; want a2 pending, a1 running and more", ch.Full, ch.More, ids(ch))
	}
	if ch.Cursor != cursorOf(p, rows[3]) || ch.From != from {
		t.Errorf("first page covers (%+v, %+v]; want (%+v, %+v]", ch.From, ch.Cursor, from, cursorOf(p, rows[3]))
	}
	if ack != (store.OriginAck{Origin: "a", Seq: from.Seq, Tag: from.Tag}) {
		t.Errorf("ack = %+v, want the cursor pulled with", ack)
	}
	p.acks["a"] = ack
	ch, _, err = Answer(context.Background(), p, "a", ch.Cursor, 2)
	if err != nil {
		t.Fatal(err)
	}
	// The last page ends at the head row, x's: a has no row after its own
	// last one up to the head.
	if ch.Full || ch.More || !slices.Equal(ids(ch), []string{"a2:succeeded", "a3:pending"}) || ch.Cursor != cursorOf(p, rows[6]) {
		t.Errorf("last page = full %v more %v %v to %+v; want a2 succeeded, a3 pending to the head row 7", ch.Full, ch.More, ids(ch), ch.Cursor)
	}
	// Nothing new: the answer is empty and stays where it was.
	at := ch.Cursor
	ch, _, err = Answer(context.Background(), p, "a", at, 2)
	if err != nil || ch.Full || len(ch.Jobs) != 0 || ch.Cursor != at || ch.More {
		t.Errorf("caught-up pull = %+v, %v; want no jobs at %+v", ch, err, at)
	}
}

func TestAnswerLimits(t *testing.T) {
	p := newMemPeer("E1")
	for i := range MaxLimit + 5 {
		p.write("a", rj("a", "n", berth.JobRunning), t0.Add(time.Duration(i)*time.Second))
	}
	zero := berth.ChangeCursor{Epoch: "E1"}
	for _, tc := range []struct{ limit, want int }{{0, DefaultLimit}, {-3, DefaultLimit}, {7, 7}, {MaxLimit + 1, MaxLimit}} {
		ch, _, err := Answer(context.Background(), p, "a", zero, tc.limit)
		if err != nil || ch.Full || len(ch.Jobs) != tc.want || !ch.More {
			t.Errorf("limit %d: %d jobs, full %v, more %v, %v; want %d and more", tc.limit, len(ch.Jobs), ch.Full, ch.More, err, tc.want)
		}
	}
}

// TestAnswerStaleCursors: each cursor that cannot be continued from gets
// a full answer and acknowledges nothing.
func TestAnswerStaleCursors(t *testing.T) {
	for _, tc := range []struct {
		name string
		prep func(p *memPeer, rows []berth.ChangelogRow) berth.ChangeCursor
	}{
		{"another epoch", func(p *memPeer, rows []berth.ChangelogRow) berth.ChangeCursor {
			c := cursorOf(p, rows[3])
			c.Epoch = "E0"
			return c
		}},
		{"beyond the head (a peer restored from a backup)", func(p *memPeer, rows []berth.ChangelogRow) berth.ChangeCursor {
			return berth.ChangeCursor{Epoch: "E1", Seq: p.head + 1, Tag: "ffffffff"}
		}},
		{"a tag that differs (a seq written again after a restore)", func(p *memPeer, rows []berth.ChangelogRow) berth.ChangeCursor {
			c := cursorOf(p, rows[3])
			c.Tag = "ffffffff"
			return c
		}},
		{"below rows pruned", func(p *memPeer, rows []berth.ChangelogRow) berth.ChangeCursor {
			p.acks["a"] = store.OriginAck{PrunedSeq: rows[3].Seq}
			return cursorOf(p, rows[1])
		}},
		{"a row pruned that is not the acknowledgement", func(p *memPeer, rows []berth.ChangelogRow) berth.ChangeCursor {
			c := cursorOf(p, rows[1])
			p.rows = slices.Delete(p.rows, 1, 2)
			return c
		}},
		{"its own row below the acknowledgement (an origin restored from a backup)", func(p *memPeer, rows []berth.ChangelogRow) berth.ChangeCursor {
			p.acks["a"] = store.OriginAck{Seq: rows[5].Seq, Tag: rows[5].Tag}
			return cursorOf(p, rows[1])
		}},
		{"another origin's row below the acknowledgement", func(p *memPeer, rows []berth.ChangelogRow) berth.ChangeCursor {
			p.acks["a"] = store.OriginAck{Seq: rows[4].Seq, Tag: rows[4].Tag}
			return cursorOf(p, rows[2])
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, rows := fixture()
			c := tc.prep(p, rows)
			before := p.acks["a"]
			before.Origin = "a"
			ch, ack, err := Answer(context.Background(), p, "a", c, 0)
			if err != nil {
				t.Fatal(err)
			}
			if !ch.Full {
				t.Errorf("cursor %+v answered incrementally: %v", c, ids(ch))
			}
			if ack != before {
				t.Errorf("ack = %+v, want the stored one %+v", ack, before)
			}
		})
	}
}

// TestAnswerValidCursors: each cursor a peer can continue from exactly
// gets the rows after it.
func TestAnswerValidCursors(t *testing.T) {
	for _, tc := range []struct {
		name string
		prep func(p *memPeer, rows []berth.ChangelogRow) berth.ChangeCursor
		want []string
	}{
		{"its own row", func(p *memPeer, rows []berth.ChangelogRow) berth.ChangeCursor {
			return cursorOf(p, rows[3])
		}, []string{"a2:succeeded", "a3:pending"}},
		{"the acknowledgement, its row pruned", func(p *memPeer, rows []berth.ChangelogRow) berth.ChangeCursor {
			p.acks["a"] = store.OriginAck{Seq: rows[3].Seq, Tag: rows[3].Tag, PrunedSeq: rows[3].Seq}
			p.rows = slices.Delete(p.rows, 0, 4)
			return cursorOf(p, rows[3])
		}, []string{"a2:succeeded", "a3:pending"}},
		{"another origin's row", func(p *memPeer, rows []berth.ChangelogRow) berth.ChangeCursor {
			return cursorOf(p, rows[2])
		}, []string{"a1:running", "a2:succeeded", "a3:pending"}},
		{"the empty peer's start", func(p *memPeer, rows []berth.ChangelogRow) berth.ChangeCursor {
			return berth.ChangeCursor{Epoch: "E1"}
		}, []string{"a1:pending", "a2:pending", "a1:running", "a2:succeeded", "a3:pending"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, rows := fixture()
			c := tc.prep(p, rows)
			ch, ack, err := Answer(context.Background(), p, "a", c, 0)
			if err != nil {
				t.Fatal(err)
			}
			if ch.Full || !slices.Equal(ids(ch), tc.want) {
				t.Errorf("cursor %+v: full %v %v; want incremental %v", c, ch.Full, ids(ch), tc.want)
			}
			if ack.Seq != c.Seq || ack.Tag != c.Tag || ack.PrunedSeq != p.acks["a"].PrunedSeq {
				t.Errorf("ack = %+v; want %+v keeping PrunedSeq %d", ack, c, p.acks["a"].PrunedSeq)
			}
		})
	}
}

// TestAnswerFullTombstones: a full answer leaves out the tombstones at or
// below both the acknowledgement and a cursor of the peer's history, and
// holds every one stored for a cursor of no history here.
func TestAnswerFullTombstones(t *testing.T) {
	p, rows := fixture()
	p.acks["a"] = store.OriginAck{Seq: rows[4].Seq, Tag: rows[4].Tag, PrunedSeq: rows[6].Seq}
	for _, tc := range []struct {
		name   string
		cursor berth.ChangeCursor
		want   []string
	}{
		{"the acknowledgement, below rows pruned", cursorOf(p, rows[4]), []string{"a1:running", "a3:pending"}},
		{"a row above the acknowledgement, below rows pruned", cursorOf(p, rows[5]), []string{"a1:running", "a3:pending"}},
		{"a tag that differs", berth.ChangeCursor{Epoch: "E1", Seq: rows[6].Seq, Tag: "ffffffff"}, []string{"a1:running", "a3:pending", "a2:succeeded"}},
		{"another epoch", berth.ChangeCursor{Epoch: "E0", Seq: rows[6].Seq, Tag: rows[6].Tag}, []string{"a1:running", "a3:pending", "a2:succeeded"}},
		{"the zero cursor", berth.ChangeCursor{}, []string{"a1:running", "a3:pending", "a2:succeeded"}},
	} {
		ch, _, err := Answer(context.Background(), p, "a", tc.cursor, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got := ids(ch); !ch.Full || !slices.Equal(got, tc.want) {
			t.Errorf("%s: full %v %v, want full %v", tc.name, ch.Full, got, tc.want)
		}
	}
}

// TestAnswerFullForARestoredOrigin: an origin restored from a backup,
// whose cursor is below its acknowledgement, gets the tombstones stored
// above its cursor: it sees the ends it forgot.
func TestAnswerFullForARestoredOrigin(t *testing.T) {
	p, rows := fixture()
	p.acks["a"] = store.OriginAck{Seq: rows[5].Seq, Tag: rows[5].Tag}
	ch, _, err := Answer(context.Background(), p, "a", cursorOf(p, rows[1]), 0)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ids(ch), []string{"a1:running", "a3:pending", "a2:succeeded"}; !ch.Full || !slices.Equal(got, want) {
		t.Errorf("full answer = %v, want %v (a2's tombstone is acknowledged but above the cursor)", got, want)
	}
}

// TestAnswerFullWithoutTheHeadRow: a store that pruned its head row
// (against Prunable) gets a full answer whose cursor is the
// acknowledgement, which the next pull continues from; or, with rows
// pruned above the acknowledgement, one that names no row.
func TestAnswerFullWithoutTheHeadRow(t *testing.T) {
	p, rows := fixture()
	p.acks["a"] = store.OriginAck{Seq: rows[3].Seq, Tag: rows[3].Tag}
	p.rows = p.rows[:len(p.rows)-1]
	ch, err := p.answer("a", berth.ChangeCursor{}, 0)
	if err != nil || !ch.Full || ch.Cursor != cursorOf(p, rows[3]) {
		t.Fatalf("full answer = %+v, %v; want the acknowledgement's cursor %+v", ch, err, cursorOf(p, rows[3]))
	}
	ch, err = p.answer("a", ch.Cursor, 0)
	if err != nil || ch.Full || !slices.Equal(ids(ch), []string{"a2:succeeded", "a3:pending"}) {
		t.Fatalf("next pull = %+v, %v; want a2 and a3 again, incrementally", ch, err)
	}

	p.acks["a"] = store.OriginAck{Seq: rows[3].Seq, Tag: rows[3].Tag, PrunedSeq: rows[5].Seq}
	ch, err = p.answer("a", berth.ChangeCursor{}, 0)
	if want := (berth.ChangeCursor{Epoch: "E1", Seq: p.head}); err != nil || !ch.Full || ch.Cursor != want {
		t.Fatalf("full answer = %+v, %v; want the cursor %+v", ch, err, want)
	}
	if ch, err = p.answer("a", ch.Cursor, 0); err != nil || !ch.Full {
		t.Fatalf("next pull = %+v, %v; want full again", ch, err)
	}
}

func TestAnswerEmptyPeer(t *testing.T) {
	p := newMemPeer("E1")
	ch, err := p.answer("a", berth.ChangeCursor{}, 0)
	if err != nil || !ch.Full || len(ch.Jobs) != 0 || ch.Cursor != (berth.ChangeCursor{Epoch: "E1"}) {
		t.Fatalf("first pull of an empty peer = %+v, %v; want full, empty, at E1.0", ch, err)
	}
	r := p.write("a", rj("a1", "n1", berth.JobPending), t0)
	ch, err = p.answer("a", ch.Cursor, 0)
	if err != nil || ch.Full || !slices.Equal(ids(ch), []string{"a1:pending"}) || ch.Cursor != cursorOf(p, r) {
		t.Fatalf("next pull = %+v, %v; want a1's row", ch, err)
	}
}

func TestPrunable(t *testing.T) {
	old, cut := t0, t0.Add(time.Hour)
	row := func(seq uint64, at time.Time, tomb bool) *berth.ChangelogRow {
		return &berth.ChangelogRow{Seq: seq, Tag: "t", Origin: "a", Job: berth.RemoteJob{At: at, Tombstone: tomb}}
	}
	ack := store.OriginAck{Seq: 5, Tag: "t"}
	for _, tc := range []struct {
		name string
		row  *berth.ChangelogRow
		want bool
	}{
		{"acknowledged", row(3, cut, false), true},
		{"old", row(7, old, false), true},
		{"neither acknowledged nor old", row(7, cut, false), false},
		{"a tombstone acknowledged and old", row(5, old, true), true},
		{"a tombstone acknowledged, within the retention", row(5, cut, true), false},
		{"a tombstone old, not acknowledged", row(6, old, true), false},
		{"the head row", row(9, old, false), false},
	} {
		if got := Prunable(tc.row, ack, cut, 9); got != tc.want {
			t.Errorf("%s: Prunable = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// failingPeer is a peer whose store read named fail fails with err.
type failingPeer struct {
	*memPeer
	fail string
	err  error
}

func (f *failingPeer) failing(name string) error {
	if f.fail == name {
		return f.err
	}
	return nil
}

func (f *failingPeer) OriginAck(ctx context.Context, origin string) (store.OriginAck, error) {
	if err := f.failing("OriginAck"); err != nil {
		return store.OriginAck{}, err
	}
	return f.memPeer.OriginAck(ctx, origin)
}

func (f *failingPeer) ChangelogRow(ctx context.Context, seq uint64) (*berth.ChangelogRow, error) {
	if err := f.failing("ChangelogRow"); err != nil {
		return nil, err
	}
	return f.memPeer.ChangelogRow(ctx, seq)
}

func (f *failingPeer) Changelog(ctx context.Context, origin string, after uint64, limit int) ([]berth.ChangelogRow, error) {
	if err := f.failing("Changelog"); err != nil {
		return nil, err
	}
	return f.memPeer.Changelog(ctx, origin, after, limit)
}

func (f *failingPeer) ReceivedJobs(ctx context.Context, origin string) ([]berth.RemoteJob, error) {
	if err := f.failing("ReceivedJobs"); err != nil {
		return nil, err
	}
	return f.memPeer.ReceivedJobs(ctx, origin)
}

func (f *failingPeer) Tombstones(ctx context.Context, origin string, after uint64) ([]berth.ChangelogRow, error) {
	if err := f.failing("Tombstones"); err != nil {
		return nil, err
	}
	return f.memPeer.Tombstones(ctx, origin, after)
}

// TestAnswerStoreErrors: a failing read is Answer's error, wrapped, with
// no answer and nothing to acknowledge.
func TestAnswerStoreErrors(t *testing.T) {
	boom := berth.Errorf(berth.ECodeUnavailable, "store failing")
	for _, tc := range []struct {
		fail   string
		cursor func(p *memPeer, rows []berth.ChangelogRow) berth.ChangeCursor
	}{
		{"OriginAck", func(p *memPeer, rows []berth.ChangelogRow) berth.ChangeCursor { return berth.ChangeCursor{} }},
		{"ChangelogRow", func(p *memPeer, rows []berth.ChangelogRow) berth.ChangeCursor { return cursorOf(p, rows[3]) }},
		{"ChangelogRow", func(p *memPeer, rows []berth.ChangelogRow) berth.ChangeCursor { return berth.ChangeCursor{} }},
		{"Changelog", func(p *memPeer, rows []berth.ChangelogRow) berth.ChangeCursor { return cursorOf(p, rows[3]) }},
		{"ReceivedJobs", func(p *memPeer, rows []berth.ChangelogRow) berth.ChangeCursor { return berth.ChangeCursor{} }},
		{"Tombstones", func(p *memPeer, rows []berth.ChangelogRow) berth.ChangeCursor { return berth.ChangeCursor{} }},
	} {
		p, rows := fixture()
		ch, ack, err := Answer(context.Background(), &failingPeer{memPeer: p, fail: tc.fail, err: boom}, "a", tc.cursor(p, rows), 0)
		if !errors.Is(err, boom) || ch != nil || ack != (store.OriginAck{}) {
			t.Errorf("%s failing: Answer = %+v, %+v, %v; want the error alone", tc.fail, ch, ack, err)
		}
	}
}
