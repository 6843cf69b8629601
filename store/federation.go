package store

import (
	"context"
	"strconv"
	"time"

	"github.com/berth-dev/berth"
)

// FederationBatch is a batch's federation writes (docs/federation.md):
// on an origin, its peers, the handles of jobs handed to them and where
// its mirror of each stands; on a peer, the jobs it received, the
// changelog rows of their changes and the cursors origins acknowledged.
// They are written in the batch's transaction, after its jobs, so that a
// changelog row is durable exactly when the change it records is.
type FederationBatch struct {
	Peers       []*berth.Peer        // upserts, by name, with SealedToken (Token is not stored)
	PeerDeletes []string             // names; an unknown name is no error; applied after Peers
	Handoffs    []*berth.Handoff     // upserts, by (JobID, Incarnation)
	Cursors     []PeerCursor         // upserts, by peer: the origin's mirror position
	Received    []ReceivedJob        // inserts; (Origin, RemoteID, Nonce) is unique
	Changelog   []berth.ChangelogRow // appends, each with a new Seq higher than any stored
	Acks        []OriginAck          // upserts, by origin: the cursor an origin acknowledged; a stored PrunedSeq is never lowered
	// JobClusters set the spec.cluster of stored jobs, by job id: a job
	// handed to a peer after it was created, or routed again when its
	// peer lost it ("" for here).
	JobClusters []JobCluster
}

// JobCluster sets job JobID's spec.cluster to Cluster.
type JobCluster struct {
	JobID   string
	Cluster string
}

// Empty reports whether f is nil or writes nothing.
func (f *FederationBatch) Empty() bool {
	return f == nil || len(f.Peers)+len(f.PeerDeletes)+len(f.Handoffs)+len(f.Cursors)+
		len(f.Received)+len(f.Changelog)+len(f.Acks)+len(f.JobClusters) == 0
}

// append adds o's writes after f's and returns the result (a new
// FederationBatch when f is nil). A peer that o upserts is no longer
// deleted by f (deletes apply after upserts).
func (f *FederationBatch) append(o *FederationBatch) *FederationBatch {
	if o.Empty() {
		return f
	}
	if f == nil { // a new one, so that appending later never writes into o's lists
		f = &FederationBatch{}
	}
	f.PeerDeletes = dropSuperseded(f.PeerDeletes, func(name string) string { return name },
		o.Peers, func(p *berth.Peer) string { return p.Name })
	f.Peers = append(f.Peers, o.Peers...)
	f.PeerDeletes = append(f.PeerDeletes, o.PeerDeletes...)
	f.Handoffs = append(f.Handoffs, o.Handoffs...)
	f.Cursors = append(f.Cursors, o.Cursors...)
	f.Received = append(f.Received, o.Received...)
	f.Changelog = append(f.Changelog, o.Changelog...)
	f.Acks = append(f.Acks, o.Acks...)
	f.JobClusters = append(f.JobClusters, o.JobClusters...)
	return f
}

// deduplicated returns f less the writes a later one of the same list
// supersedes: the last upsert of each peer, handle, cursor and ack, the
// last cluster of each job, and each peer delete once. Received jobs and changelog rows are inserts,
// kept whole: a repeat fails the write. f is not changed; nil stays nil.
func (f *FederationBatch) deduplicated() *FederationBatch {
	if f == nil {
		return nil
	}
	d := *f
	d.Peers = lastByID(f.Peers, func(p *berth.Peer) string { return p.Name })
	d.PeerDeletes = lastByID(f.PeerDeletes, func(name string) string { return name })
	d.Handoffs = lastByID(f.Handoffs, func(h *berth.Handoff) string { return h.JobID + "\x00" + strconv.Itoa(h.Incarnation) })
	d.Cursors = lastByID(f.Cursors, func(c PeerCursor) string { return c.Peer })
	d.Acks = lastByID(f.Acks, func(a OriginAck) string { return a.Origin })
	d.JobClusters = lastByID(f.JobClusters, func(c JobCluster) string { return c.JobID })
	return &d
}

// PeerCursor is where an origin's mirror of peer stands.
type PeerCursor struct {
	Peer   string
	Cursor berth.ChangeCursor
}

// ReceivedJob records that the job JobID was created for the handoff
// (Origin, RemoteID, Nonce), so that a repeat delivery finds it.
type ReceivedJob struct {
	Origin   string
	RemoteID string
	Nonce    string
	JobID    string
}

// OriginAck is the cursor origin last pulled changes with, which
// acknowledges every row up to it, and PrunedSeq, the highest seq of a row
// pruned above the acknowledged one (by age): a cursor below it is stale.
type OriginAck struct {
	Origin    string
	Seq       uint64
	Tag       string
	PrunedSeq uint64
}

// FederationState is what the controller rebuilds its federation memory
// from at start (part of Active).
type FederationState struct {
	Epoch    string           // this store's federation epoch
	Head     uint64           // the highest changelog seq stored, acknowledged or pruned (0: none): seqs go on above it
	Peers    []*berth.Peer    // every peer, by name, with SealedToken
	Handoffs []*berth.Handoff // every handle of a job not ended (or not stored), every one with a cancel not acknowledged, every one pending
	Cursors  []PeerCursor     // by peer
}

// FederationStore is the federation's part of a Store: reads of what
// Batch.Federation wrote, and the pruning of the changelog.
type FederationStore interface {
	// ReceivedJobID returns the id of the job created for the handoff
	// (origin, remoteID, nonce); none is ECodeNotFound.
	ReceivedJobID(ctx context.Context, origin, remoteID, nonce string) (string, error)
	// ReceivedJobs returns the current state of origin's received jobs
	// that are not ended, as full-resync members (Tombstone false), by
	// remote id.
	ReceivedJobs(ctx context.Context, origin string) ([]berth.RemoteJob, error)
	// Changelog returns up to limit of origin's changelog rows with a seq
	// above after, oldest first.
	Changelog(ctx context.Context, origin string, after uint64, limit int) ([]berth.ChangelogRow, error)
	// Tombstones returns origin's tombstone rows with a seq above after,
	// oldest first.
	Tombstones(ctx context.Context, origin string, after uint64) ([]berth.ChangelogRow, error)
	// ChangelogRow returns the row of seq; a seq not stored (pruned, or
	// never written) is ECodeNotFound.
	ChangelogRow(ctx context.Context, seq uint64) (*berth.ChangelogRow, error)
	// OriginAck returns what origin last acknowledged; an origin never
	// heard from has the zero OriginAck (no error).
	OriginAck(ctx context.Context, origin string) (OriginAck, error)
	// PruneChangelog deletes origin's rows that federation.Prunable
	// allows: those up to its acknowledged seq and those written before
	// olderThan, but never the head row (the highest seq stored, of any
	// origin), nor a tombstone unless both; it raises its PrunedSeq to the
	// highest seq deleted above the acknowledged one and returns how many
	// rows it deleted. The acknowledgement and the head are those stored
	// when it starts: a row written, or acknowledged, meanwhile waits for
	// the next prune. A transaction of its own.
	PruneChangelog(ctx context.Context, origin string, olderThan time.Time) (int, error)
	// Origins returns the name of every origin that has received jobs or
	// changelog rows, by name.
	Origins(ctx context.Context) ([]string, error)
	// Handoffs returns every handle of job id, by incarnation.
	Handoffs(ctx context.Context, jobID string) ([]*berth.Handoff, error)
	// Peers returns every peer, by name, with SealedToken.
	Peers(ctx context.Context) ([]*berth.Peer, error)
}
