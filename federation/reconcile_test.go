package federation

import (
	"slices"
	"testing"

	"github.com/berth-dev/berth"
)

// handle is a handed-off handle of remote id, nonce, created at seq.
func handle(remoteID, nonce string, createSeq uint64) *berth.Handoff {
	h := &berth.Handoff{JobID: remoteID, Incarnation: 1, Peer: "b", RemoteID: remoteID, Nonce: nonce, State: berth.HandoffDone, Sent: true}
	if createSeq > 0 {
		h.CreateRow = berth.ChangeCursor{Epoch: "E1", Seq: createSeq, Tag: "t"}
	}
	return h
}

// updated lists each update as job id:state.
func updated(us []MirrorUpdate) []string {
	var out []string
	for _, u := range us {
		if u.Handoff.RemoteID != u.Job.RemoteID || u.Handoff.Nonce != u.Job.Nonce {
			out = append(out, "mismatch")
		}
		out = append(out, u.Handoff.JobID+":"+string(u.Job.State))
	}
	return out
}

// goneIDs lists the job ids of gone.
func goneIDs(gone []*berth.Handoff) []string {
	var out []string
	for _, h := range gone {
		out = append(out, h.JobID)
	}
	return out
}

func TestReconcileIncremental(t *testing.T) {
	j1, j2, j3 := handle("j1", "n2", 3), handle("j2", "n1", 4), handle("j3", "n1", 1)
	ch := &berth.FederationChanges{
		From:   berth.ChangeCursor{Epoch: "E1", Seq: 2, Tag: "t"},
		Cursor: berth.ChangeCursor{Epoch: "E1", Seq: 9, Tag: "t"},
		Jobs: []berth.RemoteJob{
			rj("j1", "n1", berth.JobRunning),   // the old incarnation: not j1's
			rj("j2", "n1", berth.JobPending),   // superseded below
			rj("j1", "n2", berth.JobPending),   //
			rj("j2", "n1", berth.JobRunning),   //
			rj("j1", "n1", berth.JobSucceeded), // the old incarnation again
			rj("zz", "n1", berth.JobRunning),   // a job no handle holds
		},
	}
	ups, gone := Reconcile([]*berth.Handoff{j1, j2, j3}, ch)
	if want := []string{"j1:pending", "j2:running"}; !slices.Equal(updated(ups), want) {
		t.Errorf("updates = %v, want %v", updated(ups), want)
	}
	if len(gone) != 0 {
		t.Errorf("gone = %v; j3 has no row but its creation is before the answer's span", goneIDs(gone))
	}
}

// TestReconcileIncrementalGone: a handed-off job whose creation row lies
// in the span of an incremental answer without a row of it is one the
// peer no longer knows (restored from a backup older than the handoff).
func TestReconcileIncrementalGone(t *testing.T) {
	from := berth.ChangeCursor{Epoch: "E1", Seq: 4, Tag: "t"}
	to := berth.ChangeCursor{Epoch: "E1", Seq: 8, Tag: "t"}
	inSpan, atEnd, atFrom, after := handle("in", "n", 5), handle("end", "n", 8), handle("from", "n", 4), handle("after", "n", 9)
	unknownRow, seen := handle("unknown", "n", 0), handle("seen", "n", 6)
	otherEpoch := handle("epoch", "n", 6)
	otherEpoch.CreateRow.Epoch = "E0"
	pending := handle("pending", "n", 6)
	pending.State = berth.HandoffPending
	ch := &berth.FederationChanges{From: from, Cursor: to, Jobs: []berth.RemoteJob{rj("seen", "n", berth.JobPending)}}
	held := []*berth.Handoff{inSpan, atEnd, atFrom, after, unknownRow, seen, otherEpoch, pending}
	ups, gone := Reconcile(held, ch)
	if want := []string{"in", "end"}; !slices.Equal(goneIDs(gone), want) {
		t.Errorf("gone = %v, want %v", goneIDs(gone), want)
	}
	if want := []string{"seen:pending"}; !slices.Equal(updated(ups), want) {
		t.Errorf("updates = %v, want %v", updated(ups), want)
	}
}

func TestReconcileFull(t *testing.T) {
	active, ended, missing, oldNonce := handle("active", "n", 0), handle("ended", "n", 0), handle("missing", "n", 0), handle("old", "n2", 0)
	pending := handle("pending", "n", 0)
	pending.State = berth.HandoffPending
	ch := &berth.FederationChanges{Full: true, Cursor: berth.ChangeCursor{Epoch: "E1", Seq: 3, Tag: "t"}, Jobs: []berth.RemoteJob{
		rj("active", "n", berth.JobRunning),
		rj("old", "n1", berth.JobRunning), // another incarnation: old's handle is not in the answer
		rj("ended", "n", berth.JobFailed),
	}}
	ups, gone := Reconcile([]*berth.Handoff{active, ended, missing, oldNonce, pending}, ch)
	if want := []string{"active:running", "ended:failed"}; !slices.Equal(updated(ups), want) {
		t.Errorf("updates = %v, want %v", updated(ups), want)
	}
	if !ups[1].Job.Tombstone {
		t.Errorf("ended's update is not a tombstone")
	}
	if want := []string{"missing", "old"}; !slices.Equal(goneIDs(gone), want) {
		t.Errorf("gone = %v, want %v (a handle still being delivered is never gone)", goneIDs(gone), want)
	}
}

func TestResyncNeeded(t *testing.T) {
	at := func(epoch string, seq uint64) berth.ChangeCursor {
		return berth.ChangeCursor{Epoch: epoch, Seq: seq, Tag: "t"}
	}
	for _, tc := range []struct {
		name            string
		cursor, created berth.ChangeCursor
		want            bool
	}{
		{"the row ahead of the cursor", at("E1", 4), at("E1", 5), false},
		{"the row at the cursor", at("E1", 5), at("E1", 5), true},
		{"the row behind the cursor", at("E1", 6), at("E1", 5), true},
		{"the row not named", at("E1", 4), berth.ChangeCursor{}, true},
		{"the row of another epoch", at("E0", 4), at("E1", 5), true},
		{"full already", berth.ChangeCursor{}, at("E1", 5), false},
	} {
		if got := ResyncNeeded(tc.cursor, tc.created); got != tc.want {
			t.Errorf("%s: ResyncNeeded = %v, want %v", tc.name, got, tc.want)
		}
	}
}
