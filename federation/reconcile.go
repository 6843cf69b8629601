package federation

import "github.com/berth-dev/berth"

// MirrorUpdate is what an answer says of a job the origin holds: the
// handle it is of and the job's latest state in the answer, which the
// origin's mirror of the job takes (it ended when Job.Tombstone).
type MirrorUpdate struct {
	Handoff *berth.Handoff
	Job     berth.RemoteJob
}

// handleKey is what a peer's row names a handle by.
type handleKey struct{ remoteID, nonce string }

// Reconcile matches a peer's answer ch with held, the origin's live
// handles on that peer (sent or handed off, their job not ended). A row
// updates the handle of its remote id and nonce only: a row of another
// nonce is of another incarnation and never touches the current one.
// Within one answer, the last row of a job wins; updates come in the
// order of those rows. gone are the handed-off handles the peer no longer
// knows: on a full answer, those in neither its active set nor its
// tombstones; on an incremental one, those whose creation row (CreateRow)
// lies in the span the answer covers without a row of theirs (a peer
// restored from a backup older than the handoff). A handle still being
// delivered is never gone: the delivery creates the job or finds it.
func Reconcile(held []*berth.Handoff, ch *berth.FederationChanges) (updates []MirrorUpdate, gone []*berth.Handoff) {
	byKey := make(map[handleKey]*berth.Handoff, len(held))
	for _, h := range held {
		byKey[handleKey{h.RemoteID, h.Nonce}] = h
	}
	last := map[handleKey]int{} // the index of each held job's last row
	for i, j := range ch.Jobs {
		if k := (handleKey{j.RemoteID, j.Nonce}); byKey[k] != nil {
			last[k] = i
		}
	}
	for i, j := range ch.Jobs {
		if k := (handleKey{j.RemoteID, j.Nonce}); byKey[k] != nil && last[k] == i {
			updates = append(updates, MirrorUpdate{Handoff: byKey[k], Job: j})
		}
	}
	for _, h := range held {
		if _, ok := last[handleKey{h.RemoteID, h.Nonce}]; !ok && unknown(h, ch) {
			gone = append(gone, h)
		}
	}
	return updates, gone
}

// unknown reports whether ch, which has no row of h, shows that the peer
// does not know h's job.
func unknown(h *berth.Handoff, ch *berth.FederationChanges) bool {
	if h.State != berth.HandoffDone {
		return false
	}
	if ch.Full {
		return true
	}
	c := h.CreateRow
	return c.Epoch != "" && c.Epoch == ch.From.Epoch && c.Epoch == ch.Cursor.Epoch &&
		ch.From.Seq < c.Seq && c.Seq <= ch.Cursor.Seq
}

// ResyncNeeded reports whether an origin recording a handoff that the
// peer acknowledged with creation row created (HandoffResponse.CreateRow)
// must reset its mirror's cursor to the zero cursor, in the same batch, so
// that its next pull is full. It must unless the row lies ahead of the
// cursor in the same epoch, where an incremental answer will cover it:
// a row at or behind the cursor, which the cursor may have passed in a
// history of the peer that a restore from a backup has since discarded
// along with the job, or a row not named (a duplicate), could otherwise
// never show that the peer lost the job. (When an answer applied before
// the acknowledgement already showed the job, the reset is needless but
// harmless.)
func ResyncNeeded(cursor, created berth.ChangeCursor) bool {
	if cursor == (berth.ChangeCursor{}) {
		return false // full already
	}
	return created.Epoch != cursor.Epoch || created.Seq <= cursor.Seq
}
