package storetest

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/federation"
	"github.com/berth-dev/berth/store"
)

// federationTests check store.FederationStore and the federation's part
// of Batch and Active: on an origin its peers, handles and cursors, on a
// peer its received jobs, changelog and the acks of its origins.
var federationTests = []test{
	{"PeersLastWins", testPeersLastWins},
	{"PeerDeletes", testPeerDeletes},
	{"Handoffs", testHandoffs},
	{"CursorsAndAcksLastWins", testCursorsAndAcks},
	{"ReceivedUnique", testReceivedUnique},
	{"ReceivedJobs", testReceivedJobs},
	{"Changelog", testChangelog},
	{"PruneKeepsTombstonesUntilAcked", testPruneTombstones},
	{"PruneRaisesPrunedSeq", testPrunedSeq},
	{"PruneMatchesPrunable", testPruneMatchesPrunable},
	{"LoadActive", testFederationLoadActive},
	{"JobClusters", testJobClusters},
}

// peer returns peer name, every field set, updated at base plus n
// nanoseconds.
func peer(name string, n int) *berth.Peer {
	return &berth.Peer{Name: name, URL: "https://" + name + ".example:8443", CAFingerprint: "sha256:ab12",
		SealedToken: []byte{0, 1, 2, 0xff, byte(n)}, RouteTimeout: berth.Duration(time.Minute + time.Duration(n)),
		LostTimeout: berth.Duration(time.Hour + 1), CreatedAt: base, UpdatedAt: base.Add(time.Duration(n))}
}

// handoff returns a handle of incarnation inc of job jobID on peer, every
// field set.
func handoff(jobID string, inc int, peer string, st berth.HandoffState) *berth.Handoff {
	return &berth.Handoff{JobID: jobID, Incarnation: inc, Peer: peer, RemoteID: jobID, Nonce: "nonce-" + jobID[len(jobID)-4:],
		State: st, RemoteJobID: "remote-ünï", Sent: true, CancelVersion: 2, CancelAcked: 1, LastError: "dial: refused \"x\"",
		CreatedAt: base.Add(1), UpdatedAt: base.Add(time.Second + 1),
		CreateRow: berth.ChangeCursor{Epoch: "0123456789abcdef", Seq: 1<<40 + uint64(inc), Tag: "c0ffee01"}, Pinned: true}
}

// changeRow returns changelog row seq of origin's job remoteID (received
// as job jobID), written at base plus at; a tombstone has ended.
func changeRow(seq uint64, origin, remoteID, jobID string, tombstone bool, at time.Duration) berth.ChangelogRow {
	j := berth.RemoteJob{RemoteID: remoteID, Nonce: "n-" + remoteID, JobID: jobID, State: berth.JobRunning,
		Reason: "running on gpu-1", Attempts: 1, StartedAt: base.Add(1), At: base.Add(at)}
	if tombstone {
		j.State, j.Reason, j.ExitCode, j.FinishedAt, j.Tombstone = berth.JobFailed, "exit status 3", intPtr(3), base.Add(at), true
	}
	return berth.ChangelogRow{Seq: seq, Tag: tagOf(seq), Origin: origin, Job: j}
}

// tagOf is the tag the suite gives the row of seq.
func tagOf(seq uint64) string { return "t" + string(rune('a'+seq%26)) + "000000" }

func getPeers(t *testing.T, s store.Store) []*berth.Peer {
	t.Helper()
	ps, err := s.Peers(t.Context())
	if err != nil {
		t.Fatalf("Peers: %v", err)
	}
	return ps
}

func getChangelog(t *testing.T, s store.Store, origin string, after uint64, limit int) []berth.ChangelogRow {
	t.Helper()
	rows, err := s.Changelog(t.Context(), origin, after, limit)
	if err != nil {
		t.Fatalf("Changelog(%s, %d, %d): %v", origin, after, limit, err)
	}
	return rows
}

func getTombstones(t *testing.T, s store.Store, origin string, after uint64) []berth.ChangelogRow {
	t.Helper()
	rows, err := s.Tombstones(t.Context(), origin, after)
	if err != nil {
		t.Fatalf("Tombstones(%s, %d): %v", origin, after, err)
	}
	return rows
}

func getAck(t *testing.T, s store.Store, origin string) store.OriginAck {
	t.Helper()
	ack, err := s.OriginAck(t.Context(), origin)
	if err != nil {
		t.Fatalf("OriginAck(%s): %v", origin, err)
	}
	return ack
}

func prune(t *testing.T, s store.Store, origin string, olderThan time.Time) int {
	t.Helper()
	n, err := s.PruneChangelog(t.Context(), origin, olderThan)
	if err != nil {
		t.Fatalf("PruneChangelog(%s): %v", origin, err)
	}
	return n
}

// seqs returns the seqs of rows.
func seqs(rows []berth.ChangelogRow) []uint64 {
	out := make([]uint64, len(rows))
	for i, r := range rows {
		out[i] = r.Seq
	}
	return out
}

func checkSeqs(t *testing.T, what string, rows []berth.ChangelogRow, want ...uint64) {
	t.Helper()
	if got := seqs(rows); !slices.Equal(got, want) {
		t.Errorf("%s: got seqs %v, want %v", what, got, want)
	}
}

func testPeersLastWins(t *testing.T, s store.Store) {
	if ps := getPeers(t, s); len(ps) != 0 {
		t.Errorf("Peers of an empty store = %s", dump(ps))
	}
	bare := &berth.Peer{Name: "c-bare", URL: "https://127.0.0.1:1"} // no token, no timeouts
	write(t, s, &store.Batch{Federation: &store.FederationBatch{
		Peers: []*berth.Peer{peer("b", 1), peer("a", 1), bare, peer("b", 2)},
	}})
	checkEqual(t, "Peers (one batch)", getPeers(t, s), []*berth.Peer{peer("a", 1), peer("b", 2), bare})
	a3 := peer("a", 3)
	a3.URL, a3.CAFingerprint, a3.SealedToken = "https://other:1", "", []byte("new")
	write(t, s, &store.Batch{Federation: &store.FederationBatch{Peers: []*berth.Peer{a3}}})
	checkEqual(t, "Peers (a replaced)", getPeers(t, s), []*berth.Peer{a3, peer("b", 2), bare})
}

func testPeerDeletes(t *testing.T, s store.Store) {
	write(t, s, &store.Batch{Federation: &store.FederationBatch{
		Peers: []*berth.Peer{peer("a", 1), peer("b", 1), peer("c", 1)},
	}})
	// Deletes apply after upserts; an unknown name is no error.
	write(t, s, &store.Batch{Federation: &store.FederationBatch{
		Peers:       []*berth.Peer{peer("c", 2), peer("d", 1)},
		PeerDeletes: []string{"b", "c", "nope", "b"},
	}})
	checkEqual(t, "Peers after deletes", getPeers(t, s), []*berth.Peer{peer("a", 1), peer("d", 1)})
	// A batch appended after one that deletes a peer upserts it again.
	b := &store.Batch{Federation: &store.FederationBatch{PeerDeletes: []string{"a"}}}
	b.Append(&store.Batch{Federation: &store.FederationBatch{Peers: []*berth.Peer{peer("a", 5)}}})
	b.Append(&store.Batch{Federation: &store.FederationBatch{PeerDeletes: []string{"d"}}})
	write(t, s, b)
	checkEqual(t, "Peers after appended batches", getPeers(t, s), []*berth.Peer{peer("a", 5)})
}

func testHandoffs(t *testing.T, s store.Store) {
	var ids idSource
	job, other := ids.next(), ids.next()
	h1 := handoff(job, 1, "p1", berth.HandoffLost)
	h2 := handoff(job, 2, "p2", berth.HandoffPending)
	h2.RemoteJobID, h2.Sent, h2.CancelVersion, h2.CancelAcked, h2.LastError = "", false, 0, 0, ""
	h2.CreateRow, h2.Pinned = berth.ChangeCursor{}, false // not known yet; routed, not pinned
	h2done := *h2
	h2done.State, h2done.RemoteJobID, h2done.Sent, h2done.UpdatedAt = berth.HandoffDone, "r-2", true, base.Add(time.Hour)
	h2done.Pinned = true // an upsert sets every column
	h2done.CreateRow = berth.ChangeCursor{Epoch: "fedcba9876543210", Seq: 7, Tag: "0badf00d"}
	write(t, s, &store.Batch{Federation: &store.FederationBatch{
		Handoffs: []*berth.Handoff{h2, handoff(other, 1, "p1", berth.HandoffDone), h1},
	}})
	write(t, s, &store.Batch{Federation: &store.FederationBatch{Handoffs: []*berth.Handoff{&h2done}}})
	hs, err := s.Handoffs(t.Context(), job)
	if err != nil {
		t.Fatalf("Handoffs: %v", err)
	}
	checkEqual(t, "Handoffs("+job+")", hs, []*berth.Handoff{h1, &h2done})
	if hs, err := s.Handoffs(t.Context(), "nope"); err != nil || len(hs) != 0 {
		t.Errorf("Handoffs(unknown job) = %s, %v; want none", dump(hs), err)
	}
}

func testCursorsAndAcks(t *testing.T, s store.Store) {
	if ack := getAck(t, s, "o1"); ack != (store.OriginAck{}) {
		t.Errorf("OriginAck of an origin never heard from = %+v, want zero", ack)
	}
	c := func(p string, seq uint64) store.PeerCursor {
		return store.PeerCursor{Peer: p, Cursor: berth.ChangeCursor{Epoch: "ep-" + p, Seq: seq, Tag: tagOf(seq)}}
	}
	write(t, s, &store.Batch{Federation: &store.FederationBatch{
		Cursors: []store.PeerCursor{c("p2", 1), c("p1", 9), c("p2", 7)},
		Acks: []store.OriginAck{{Origin: "o1", Seq: 3, Tag: "x", PrunedSeq: 2},
			{Origin: "o1", Seq: 5, Tag: tagOf(5), PrunedSeq: 4}},
	}})
	write(t, s, &store.Batch{Federation: &store.FederationBatch{Cursors: []store.PeerCursor{c("p1", 1<<40)}}})
	checkEqual(t, "Active.Federation.Cursors", loadActive(t, s).Federation.Cursors,
		[]store.PeerCursor{c("p1", 1<<40), c("p2", 7)})
	checkEqual(t, "OriginAck(o1)", getAck(t, s, "o1"), store.OriginAck{Origin: "o1", Seq: 5, Tag: tagOf(5), PrunedSeq: 4})
	// An ack moves to the cursor written last, back too; PrunedSeq never
	// goes down.
	write(t, s, &store.Batch{Federation: &store.FederationBatch{Acks: []store.OriginAck{{Origin: "o1", Seq: 1, Tag: "y"}}}})
	checkEqual(t, "OriginAck(o1) after an older ack", getAck(t, s, "o1"), store.OriginAck{Origin: "o1", Seq: 1, Tag: "y", PrunedSeq: 4})
}

// receivedJob returns a pending job received from origin as remoteID.
func receivedJob(id, origin, remoteID string) (*berth.Job, store.ReceivedJob) {
	j := newJob(id, "gpu", "alice", berth.JobPending)
	j.Origin = &berth.JobOrigin{Cluster: origin, RemoteID: remoteID, Nonce: "n-" + remoteID}
	return j, store.ReceivedJob{Origin: origin, RemoteID: remoteID, Nonce: "n-" + remoteID, JobID: id}
}

func testReceivedUnique(t *testing.T, s store.Store) {
	ctx := t.Context()
	var ids idSource
	j1, r1 := receivedJob(ids.next(), "o1", "A1")
	write(t, s, &store.Batch{Jobs: []*berth.Job{j1}, Federation: &store.FederationBatch{Received: []store.ReceivedJob{r1},
		Changelog: []berth.ChangelogRow{changeRow(1, "o1", "A1", j1.ID, false, 0)}}})
	if id, err := s.ReceivedJobID(ctx, "o1", "A1", r1.Nonce); err != nil || id != j1.ID {
		t.Errorf("ReceivedJobID = %q, %v; want %q", id, err, j1.ID)
	}
	for _, k := range [][3]string{{"o2", "A1", r1.Nonce}, {"o1", "A2", r1.Nonce}, {"o1", "A1", "other"}} {
		if id, err := s.ReceivedJobID(ctx, k[0], k[1], k[2]); berth.ErrorCode(err) != berth.ECodeNotFound {
			t.Errorf("ReceivedJobID%v = %q, %v; want a not_found error", k, id, err)
		}
	}
	// A repeat of the handoff, in a later batch or twice in one, fails the
	// whole batch: neither its job nor its changelog row is written.
	j2, r2 := receivedJob(ids.next(), "o1", "A1")
	j3, r3 := receivedJob(ids.next(), "o1", "A3")
	for name, received := range map[string][]store.ReceivedJob{"stored": {r2}, "in one batch": {r3, r3}} {
		err := s.Write(ctx, &store.Batch{Jobs: []*berth.Job{j2, j3}, Federation: &store.FederationBatch{
			Received:  received,
			Changelog: []berth.ChangelogRow{changeRow(2, "o1", "A3", j3.ID, false, 0)},
			Acks:      []store.OriginAck{{Origin: "o1", Seq: 1, Tag: tagOf(1)}},
		}})
		if err == nil {
			t.Fatalf("Write of a handoff received again (%s) succeeded", name)
		}
		checkNotFound(t, s, j2.ID)
		checkNotFound(t, s, j3.ID)
		checkSeqs(t, "Changelog after the failed write ("+name+")", getChangelog(t, s, "o1", 0, 0), 1)
		checkEqual(t, "OriginAck after the failed write ("+name+")", getAck(t, s, "o1"), store.OriginAck{})
		if id, err := s.ReceivedJobID(ctx, "o1", "A3", r3.Nonce); berth.ErrorCode(err) != berth.ECodeNotFound {
			t.Errorf("ReceivedJobID of the failed write's handoff (%s) = %q, %v; want a not_found error", name, id, err)
		}
	}
	// Another nonce of the same remote id is another handoff.
	j4, r4 := receivedJob(ids.next(), "o1", "A1")
	r4.Nonce = "n-again"
	write(t, s, &store.Batch{Jobs: []*berth.Job{j4}, Federation: &store.FederationBatch{Received: []store.ReceivedJob{r4}}})
	if id, err := s.ReceivedJobID(ctx, "o1", "A1", "n-again"); err != nil || id != j4.ID {
		t.Errorf("ReceivedJobID(another nonce) = %q, %v; want %q", id, err, j4.ID)
	}
}

func testReceivedJobs(t *testing.T, s store.Store) {
	var ids idSource
	var jobs []*berth.Job
	var received []store.ReceivedJob
	for _, k := range [][2]string{{"o1", "R3"}, {"o1", "R1"}, {"o2", "R2"}, {"o1", "R2"}, {"o1", "R4"}} {
		j, r := receivedJob(ids.next(), k[0], k[1])
		jobs, received = append(jobs, j), append(received, r)
	}
	local := newJob(ids.next(), "gpu", "bob", berth.JobRunning) // not received
	write(t, s, &store.Batch{Jobs: append(slices.Clone(jobs), local), Federation: &store.FederationBatch{Received: received,
		Changelog: []berth.ChangelogRow{changeRow(1, "o1", "R3", jobs[0].ID, false, 5)}}})
	// R3 runs (two rows, the newest wins At), R4 ends; R1 and R2 wait.
	run := store.JobUpdate{ID: jobs[0].ID, State: berth.JobRunning, Reason: "", Attempts: 2, StartedAt: base.Add(7)}
	end := store.JobUpdate{ID: jobs[4].ID, State: berth.JobFailed, Reason: "exit status 3", ExitCode: intPtr(3), Attempts: 1,
		StartedAt: base.Add(1), FinishedAt: base.Add(9)}
	write(t, s, &store.Batch{JobUpdates: []store.JobUpdate{run, end}, Federation: &store.FederationBatch{
		Changelog: []berth.ChangelogRow{changeRow(2, "o1", "R3", jobs[0].ID, false, 8),
			changeRow(3, "o1", "R4", jobs[4].ID, true, 9)}}})
	got, err := s.ReceivedJobs(t.Context(), "o1")
	if err != nil {
		t.Fatalf("ReceivedJobs: %v", err)
	}
	remote := func(j *berth.Job, r store.ReceivedJob, at time.Time) berth.RemoteJob {
		return berth.RemoteJob{RemoteID: r.RemoteID, Nonce: r.Nonce, JobID: j.ID, State: j.State, Reason: j.Reason,
			ExitCode: j.ExitCode, Attempts: j.Attempts, StartedAt: j.StartedAt, FinishedAt: j.FinishedAt, At: at}
	}
	apply(jobs[0], run)
	checkEqual(t, "ReceivedJobs(o1)", got, []berth.RemoteJob{
		remote(jobs[1], received[1], base), remote(jobs[3], received[3], base), remote(jobs[0], received[0], base.Add(8))})
	if got, err := s.ReceivedJobs(t.Context(), "nope"); err != nil || len(got) != 0 {
		t.Errorf("ReceivedJobs(unknown origin) = %s, %v; want none", dump(got), err)
	}
	origins, err := s.Origins(t.Context())
	if err != nil {
		t.Fatalf("Origins: %v", err)
	}
	checkEqual(t, "Origins", origins, []string{"o1", "o2"})
}

func testChangelog(t *testing.T, s store.Store) {
	ctx := t.Context()
	if _, err := s.ChangelogRow(ctx, 1); berth.ErrorCode(err) != berth.ECodeNotFound {
		t.Errorf("ChangelogRow of an empty store: %v, want a not_found error", err)
	}
	// Two batches; o2's rows interleave with o1's. Seqs need not be
	// consecutive.
	r := []berth.ChangelogRow{
		changeRow(1, "o1", "A", "j-a", false, 1), changeRow(2, "o2", "B", "j-b", false, 2),
		changeRow(3, "o1", "A", "j-a", true, 3), changeRow(5, "o1", "C", "j-c", false, 4),
		changeRow(6, "o2", "B", "j-b", true, 5), changeRow(8, "o1", "C", "j-c", false, 6),
		changeRow(9, "o1", "C", "j-c", true, 7),
	}
	r[0].Job.Reason = "ünï ☃ \"quoted\" \\"
	write(t, s, &store.Batch{Federation: &store.FederationBatch{Changelog: r[:3]}})
	write(t, s, &store.Batch{Federation: &store.FederationBatch{Changelog: r[3:]}})
	o1 := []berth.ChangelogRow{r[0], r[2], r[3], r[5], r[6]}
	checkEqual(t, "Changelog(o1, 0, all)", getChangelog(t, s, "o1", 0, 0), o1)
	checkEqual(t, "Changelog(o1, 0, 2)", getChangelog(t, s, "o1", 0, 2), o1[:2])
	checkEqual(t, "Changelog(o1, 3, 2)", getChangelog(t, s, "o1", 3, 2), o1[2:4])
	checkEqual(t, "Changelog(o1, 4, all)", getChangelog(t, s, "o1", 4, 0), o1[2:])
	checkSeqs(t, "Changelog(o1, 9, all)", getChangelog(t, s, "o1", 9, 0))
	checkEqual(t, "Changelog(o2, 0, all)", getChangelog(t, s, "o2", 0, 0), []berth.ChangelogRow{r[1], r[4]})
	checkSeqs(t, "Changelog(o3, 0, all)", getChangelog(t, s, "o3", 0, 0))
	checkEqual(t, "Tombstones(o1, 0)", getTombstones(t, s, "o1", 0), []berth.ChangelogRow{r[2], r[6]})
	checkEqual(t, "Tombstones(o1, 3)", getTombstones(t, s, "o1", 3), []berth.ChangelogRow{r[6]})
	checkEqual(t, "Tombstones(o2, 0)", getTombstones(t, s, "o2", 0), []berth.ChangelogRow{r[4]})
	for _, want := range r {
		got, err := s.ChangelogRow(ctx, want.Seq)
		if err != nil {
			t.Fatalf("ChangelogRow(%d): %v", want.Seq, err)
		}
		checkEqual(t, "ChangelogRow", got, &want)
	}
	for _, seq := range []uint64{4, 7, 10} {
		if got, err := s.ChangelogRow(ctx, seq); berth.ErrorCode(err) != berth.ECodeNotFound {
			t.Errorf("ChangelogRow(%d) = %s, %v; want a not_found error", seq, dump(got), err)
		}
	}
	// A seq already stored fails the batch.
	if err := s.Write(ctx, &store.Batch{Federation: &store.FederationBatch{
		Changelog: []berth.ChangelogRow{changeRow(10, "o1", "D", "j-d", false, 8), changeRow(9, "o1", "D", "j-d", false, 8)},
	}}); err == nil {
		t.Error("Write of a changelog row with a seq already stored succeeded")
	}
	checkSeqs(t, "Changelog(o1, 9, all) after the failed write", getChangelog(t, s, "o1", 9, 0))
	if got := loadActive(t, s).Federation.Head; got != 9 {
		t.Errorf("Active.Federation.Head = %d, want 9", got)
	}
}

// testPruneTombstones checks each clause of federation.Prunable on
// tombstones and the rows around them: a tombstone goes only once both
// acknowledged and older than the cut-off; any other row goes when
// either; another origin's rows are never touched; the head row stays.
func testPruneTombstones(t *testing.T, s store.Store) {
	// o1: 1 and 2 old, 2 a tombstone; 3 and 4 new, 4 a tombstone. o2's
	// old rows, the head (6) among them, are not o1's to prune.
	write(t, s, &store.Batch{Federation: &store.FederationBatch{Changelog: []berth.ChangelogRow{
		changeRow(1, "o1", "A", "j-a", false, 0), changeRow(2, "o1", "A", "j-a", true, 1),
		changeRow(3, "o1", "B", "j-b", false, time.Hour), changeRow(4, "o1", "B", "j-b", true, time.Hour),
		changeRow(5, "o2", "C", "j-c", false, 0), changeRow(6, "o2", "C", "j-c", true, 0),
	}}})
	cut := base.Add(time.Minute)
	ackO1 := func(seq uint64) {
		write(t, s, &store.Batch{Federation: &store.FederationBatch{Acks: []store.OriginAck{{Origin: "o1", Seq: seq, Tag: tagOf(seq)}}}})
	}
	// Nothing acknowledged: the old row goes, the old tombstone stays.
	if n := prune(t, s, "o1", cut); n != 1 {
		t.Errorf("PruneChangelog(o1) with nothing acknowledged deleted %d rows, want 1", n)
	}
	checkSeqs(t, "Changelog(o1) after a prune with nothing acknowledged", getChangelog(t, s, "o1", 0, 0), 2, 3, 4)
	checkSeqs(t, "Tombstones(o1)", getTombstones(t, s, "o1", 0), 2, 4)
	// Acknowledging 2 lets its old tombstone go, and nothing above it.
	ackO1(2)
	if n := prune(t, s, "o1", cut); n != 1 {
		t.Errorf("PruneChangelog(o1) acknowledged up to 2 deleted %d rows, want 1", n)
	}
	checkSeqs(t, "Changelog(o1) acknowledged up to 2", getChangelog(t, s, "o1", 0, 0), 3, 4)
	if n := prune(t, s, "o1", cut); n != 0 {
		t.Errorf("PruneChangelog(o1) again deleted %d rows, want 0", n)
	}
	// Acknowledged rows newer than the cut-off go, but not a tombstone:
	// it stays until it is older than the cut-off too.
	ackO1(4)
	if n := prune(t, s, "o1", cut); n != 1 {
		t.Errorf("PruneChangelog(o1) acknowledged up to 4 deleted %d rows, want 1 (3, not the young tombstone 4)", n)
	}
	checkSeqs(t, "Changelog(o1) acknowledged up to 4", getChangelog(t, s, "o1", 0, 0), 4)
	if n := prune(t, s, "o1", base.Add(2*time.Hour)); n != 1 {
		t.Errorf("PruneChangelog(o1) of the acknowledged tombstone once old deleted %d rows, want 1", n)
	}
	checkSeqs(t, "Changelog(o1) acknowledged up to 4, cut after it", getChangelog(t, s, "o1", 0, 0))
	checkSeqs(t, "Changelog(o2)", getChangelog(t, s, "o2", 0, 0), 5, 6)
	// Only the old row above the acknowledgement counts: the rows pruned
	// at or below it do not raise PrunedSeq.
	if ack := getAck(t, s, "o1"); ack.PrunedSeq != 1 {
		t.Errorf("OriginAck(o1).PrunedSeq = %d, want 1 (the row pruned by age)", ack.PrunedSeq)
	}
	// The head row stays, acknowledged and old though it is, until a row
	// (of any origin) is written above it.
	write(t, s, &store.Batch{Federation: &store.FederationBatch{Acks: []store.OriginAck{{Origin: "o2", Seq: 6, Tag: tagOf(6)}}}})
	if n := prune(t, s, "o2", base.Add(time.Hour)); n != 1 {
		t.Errorf("PruneChangelog(o2) acknowledged up to the head deleted %d rows, want 1 (5, not the head row)", n)
	}
	checkSeqs(t, "Changelog(o2) acknowledged up to the head", getChangelog(t, s, "o2", 0, 0), 6)
	write(t, s, &store.Batch{Federation: &store.FederationBatch{Changelog: []berth.ChangelogRow{
		changeRow(7, "o1", "D", "j-d", false, time.Hour)}}})
	if n := prune(t, s, "o2", base.Add(time.Hour)); n != 1 {
		t.Errorf("PruneChangelog(o2) below a new head deleted %d rows, want 1", n)
	}
	checkSeqs(t, "Changelog(o2) below a new head", getChangelog(t, s, "o2", 0, 0))
	if got := loadActive(t, s).Federation.Head; got != 7 {
		t.Errorf("Active.Federation.Head = %d, want 7", got)
	}
}

func testPrunedSeq(t *testing.T, s store.Store) {
	write(t, s, &store.Batch{Federation: &store.FederationBatch{
		Changelog: []berth.ChangelogRow{
			changeRow(1, "o1", "A", "j-a", false, 0), changeRow(2, "o1", "B", "j-b", false, 0),
			changeRow(3, "o1", "B", "j-b", false, 2), changeRow(4, "o1", "A", "j-a", true, 3),
			changeRow(5, "o1", "C", "j-c", false, 9),
		},
		Acks: []store.OriginAck{{Origin: "o1", Seq: 1, Tag: tagOf(1)}},
	}})
	// 1 is acknowledged; 2 and 3 are old; 4 is a tombstone; 5 is new.
	if n := prune(t, s, "o1", base.Add(5)); n != 3 {
		t.Errorf("PruneChangelog deleted %d rows, want 3", n)
	}
	checkSeqs(t, "Changelog(o1)", getChangelog(t, s, "o1", 0, 0), 4, 5)
	checkEqual(t, "OriginAck(o1)", getAck(t, s, "o1"), store.OriginAck{Origin: "o1", Seq: 1, Tag: tagOf(1), PrunedSeq: 3})
	// A later prune with less to prune does not lower it; an origin with
	// nothing to prune gets no ack.
	if n := prune(t, s, "o1", base); n != 0 {
		t.Errorf("PruneChangelog with nothing old deleted %d rows", n)
	}
	if n := prune(t, s, "o9", base.Add(time.Hour)); n != 0 {
		t.Errorf("PruneChangelog of an unknown origin deleted %d rows", n)
	}
	checkEqual(t, "OriginAck(o1) after a prune of nothing", getAck(t, s, "o1"),
		store.OriginAck{Origin: "o1", Seq: 1, Tag: tagOf(1), PrunedSeq: 3})
	checkEqual(t, "OriginAck(o9)", getAck(t, s, "o9"), store.OriginAck{})
	// 5, old now, is the head row: it stays, and PrunedSeq with it.
	if n := prune(t, s, "o1", base.Add(time.Hour)); n != 0 {
		t.Errorf("PruneChangelog of the head row deleted %d rows, want 0", n)
	}
	checkSeqs(t, "Changelog(o1) old up to the head", getChangelog(t, s, "o1", 0, 0), 4, 5)
	if ack := getAck(t, s, "o1"); ack.PrunedSeq != 3 {
		t.Errorf("OriginAck(o1).PrunedSeq = %d after the head row was kept, want 3", ack.PrunedSeq)
	}
	// Once another origin's row is the head, 5 goes and PrunedSeq rises.
	write(t, s, &store.Batch{Federation: &store.FederationBatch{Changelog: []berth.ChangelogRow{
		changeRow(6, "o2", "E", "j-e", false, 0)}}})
	if n := prune(t, s, "o1", base.Add(time.Hour)); n != 1 {
		t.Errorf("PruneChangelog of the former head row deleted %d rows, want 1", n)
	}
	checkSeqs(t, "Changelog(o1) at last", getChangelog(t, s, "o1", 0, 0), 4)
	if ack := getAck(t, s, "o1"); ack.PrunedSeq != 5 {
		t.Errorf("OriginAck(o1).PrunedSeq = %d, want 5", ack.PrunedSeq)
	}
}

// testPruneMatchesPrunable ties the drivers' prune to the rule itself:
// over rounds of random rows (of three origins, tombstones among them,
// written around base), random acknowledgements and random cut-offs, each
// prune deletes exactly the rows of its origin that federation.Prunable
// allows, given the origin's acknowledgement and the head, returns their
// number, and raises PrunedSeq to the highest of them above the
// acknowledgement. It also checks that the rounds met every clause.
func testPruneMatchesPrunable(t *testing.T, s store.Store) {
	rng := rand.New(rand.NewPCG(27, 1)) // fixed: a failure repeats
	origins := []string{"o1", "o2", "o3"}
	var (
		rows []berth.ChangelogRow // the model: the rows stored, by seq
		seq  uint64
		acks = map[string]store.OriginAck{}
		met  = map[string]int{} // clauses met, by name
	)
	minutes := func() time.Duration { return time.Duration(rng.IntN(30)) * time.Minute }
	for round := range 60 {
		b := &store.FederationBatch{}
		for range rng.IntN(5) {
			seq += 1 + uint64(rng.IntN(3))
			b.Changelog = append(b.Changelog, changeRow(seq, origins[rng.IntN(3)], "R", "j-r", rng.IntN(3) == 0, minutes()))
		}
		if o := origins[rng.IntN(3)]; rng.IntN(2) == 0 {
			a := store.OriginAck{Origin: o, Seq: uint64(rng.IntN(int(seq) + 1)), Tag: "ack"}
			b.Acks = []store.OriginAck{a}
			a.PrunedSeq = acks[o].PrunedSeq // never lowered
			acks[o] = a
		}
		rows = append(rows, b.Changelog...)
		write(t, s, &store.Batch{Federation: b})

		origin, cut := origins[rng.IntN(3)], base.Add(minutes())
		var head uint64
		if len(rows) > 0 {
			head = rows[len(rows)-1].Seq
		}
		ack, kept, deleted := acks[origin], rows[:0:0], 0
		for _, r := range rows {
			if r.Origin != origin {
				kept = append(kept, r)
				continue
			}
			acked, old := r.Seq <= ack.Seq, r.Job.At.Before(cut)
			switch {
			case !federation.Prunable(&r, ack, cut, head):
				kept = append(kept, r)
				if r.Seq == head && federation.Prunable(&r, ack, cut, head+1) {
					met["head row kept"]++
				}
				if r.Job.Tombstone && acked && !old {
					met["acknowledged young tombstone kept"]++
				}
				if r.Job.Tombstone && !acked && old {
					met["old tombstone not acknowledged kept"]++
				}
				continue
			case r.Job.Tombstone:
				met["tombstone deleted"]++
			case acked && !old:
				met["young acknowledged row deleted"]++
			case !acked && old:
				met["old row not acknowledged deleted"]++
			}
			deleted++
			if r.Seq > ack.Seq && r.Seq > ack.PrunedSeq {
				ack.Origin, ack.PrunedSeq = origin, r.Seq
				acks[origin] = ack
			}
		}
		rows = kept
		if n := prune(t, s, origin, cut); n != deleted {
			t.Fatalf("round %d: PruneChangelog(%s, %s) deleted %d rows, want %d", round, origin, cut, n, deleted)
		}
		for _, o := range origins {
			want := []uint64{}
			for _, r := range rows {
				if r.Origin == o {
					want = append(want, r.Seq)
				}
			}
			if got := seqs(getChangelog(t, s, o, 0, 0)); !slices.Equal(got, want) {
				t.Fatalf("round %d, after PruneChangelog(%s, %s): Changelog(%s) = %v, want %v", round, origin, cut, o, got, want)
			}
			checkEqual(t, fmt.Sprintf("round %d: OriginAck(%s)", round, o), getAck(t, s, o), acks[o])
		}
	}
	for _, clause := range []string{"head row kept", "acknowledged young tombstone kept", "old tombstone not acknowledged kept",
		"tombstone deleted", "young acknowledged row deleted", "old row not acknowledged deleted"} {
		if met[clause] == 0 {
			t.Errorf("no round met the clause %q: draw other rounds", clause)
		}
	}
}

// epochPattern is what a store's federation epoch looks like.
var epochPattern = regexp.MustCompile(`^[0-9a-f]{16}$`)

func testFederationLoadActive(t *testing.T, s store.Store) {
	empty := loadActive(t, s).Federation
	epoch := empty.Epoch
	if !epochPattern.MatchString(epoch) {
		t.Errorf("Active.Federation.Epoch = %q, want 16 hex digits", epoch)
	}
	empty.Epoch = ""
	checkEqual(t, "Active.Federation of an empty store", empty, store.FederationState{})

	var ids idSource
	var jobs []*berth.Job
	for _, st := range []berth.JobState{berth.JobRunning, berth.JobSucceeded, berth.JobCancelled, berth.JobPending,
		berth.JobFailed, berth.JobCancelled} {
		jobs = append(jobs, newJob(ids.next(), "gpu", "alice", st))
	}
	acked := func(h *berth.Handoff) *berth.Handoff { h.CancelAcked = h.CancelVersion; return h }
	hs := []*berth.Handoff{
		acked(handoff(jobs[0].ID, 1, "p1", berth.HandoffDone)), // job running: live
		acked(handoff(jobs[1].ID, 1, "p1", berth.HandoffDone)), // ended, cancel acknowledged: not live
		handoff(jobs[2].ID, 1, "p2", berth.HandoffDone),        // ended, cancel not acknowledged: live
		acked(handoff(jobs[3].ID, 1, "p1", berth.HandoffLost)), // job pending (routed again): both live
		acked(handoff(jobs[3].ID, 2, "p2", berth.HandoffDone)),
		acked(handoff(jobs[4].ID, 1, "p2", berth.HandoffRejected)), // ended: not live
		acked(handoff(jobs[5].ID, 1, "p2", berth.HandoffPending)),  // cancelled, never sent: still pending, live
		acked(handoff(ids.next(), 1, "p1", berth.HandoffDone)),     // no job row: live
	}
	cursor := store.PeerCursor{Peer: "p1", Cursor: berth.ChangeCursor{Epoch: "0123456789abcdef", Seq: 12, Tag: "deadbeef"}}
	write(t, s, &store.Batch{Jobs: jobs, Federation: &store.FederationBatch{
		Peers: []*berth.Peer{peer("p2", 1), peer("p1", 1)}, Handoffs: hs, Cursors: []store.PeerCursor{cursor},
		Changelog: []berth.ChangelogRow{changeRow(41, "o1", "A", "j-a", false, 0)},
	}})
	got := loadActive(t, s).Federation
	checkEqual(t, "Active.Federation", got, store.FederationState{Epoch: epoch,
		Head: 41, Peers: []*berth.Peer{peer("p1", 1), peer("p2", 1)}, Handoffs: []*berth.Handoff{hs[0], hs[2], hs[3], hs[4], hs[6], hs[7]},
		Cursors: []store.PeerCursor{cursor}})
}

// exerciseFederationEpoch checks that a store's federation epoch stays
// the same across reopens and that two stores have different ones.
func exerciseFederationEpoch(t *testing.T, d Driver) {
	t.Helper()
	t.Run("FederationEpoch", func(t *testing.T) {
		t.Parallel()
		reopen := reopener(t, d.Open)
		s, _ := reopen()
		first := loadActive(t, s).Federation.Epoch
		write(t, s, &store.Batch{Federation: &store.FederationBatch{
			Changelog: []berth.ChangelogRow{changeRow(3, "o1", "A", "j-a", false, 0)}}})
		s, _ = reopen()
		if got := loadActive(t, s).Federation; got.Epoch != first || got.Head != 3 {
			t.Errorf("after a reopen, epoch %q and head %d; want %q and 3", got.Epoch, got.Head, first)
		}
		other, _ := reopener(t, d.Open)()
		if e := loadActive(t, other).Federation.Epoch; e == first || !epochPattern.MatchString(e) {
			t.Errorf("another store's epoch is %q, the first's %q: want another of 16 hex digits", e, first)
		}
	})
}

// testJobClusters sets the cluster of stored jobs, the last of a batch
// winning, and back to none; the rest of the spec and the job's other
// fields stay, and a job created in the same batch gets it too.
func testJobClusters(t *testing.T, s store.Store) {
	var ids idSource
	a, b := newJob(ids.next(), "default", "alice", berth.JobPending), newJob(ids.next(), "default", "bob", berth.JobPending)
	a.Env = map[string]string{"K": "v"}
	write(t, s, &store.Batch{Jobs: []*berth.Job{a}})
	write(t, s, &store.Batch{Jobs: []*berth.Job{b}, Federation: &store.FederationBatch{JobClusters: []store.JobCluster{
		{JobID: a.ID, Cluster: "p1"}, {JobID: b.ID, Cluster: "p2"}, {JobID: a.ID, Cluster: "p3"},
	}}})
	wantA, wantB := cloneJob(a), cloneJob(b)
	wantA.Cluster, wantB.Cluster = "p3", "p2"
	checkEqual(t, "job a after its cluster was set", getJob(t, s, a.ID), wantA)
	checkEqual(t, "job b, created with its cluster set", getJob(t, s, b.ID), wantB)
	write(t, s, &store.Batch{Federation: &store.FederationBatch{JobClusters: []store.JobCluster{{JobID: a.ID}}}})
	checkEqual(t, "job a back here", getJob(t, s, a.ID), a)
}
