package federation

import (
	"context"
	"fmt"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/store"
)

// Limits of an incremental answer's rows.
const (
	DefaultLimit = 1000  // rows of an answer when the pull names no limit
	MaxLimit     = 10000 // the most rows of one answer
)

// PeerView is what a peer answers a changes pull from: its store's
// federation epoch, the highest changelog seq it stored, and the reads of
// store.FederationStore (a small adapter over a real store satisfies it).
// Answer's reads must see one state of the changelog: the caller keeps
// a prune of the origin's rows, and another pull of the same origin, from
// running between them (one per origin at a time, or one read
// transaction).
type PeerView interface {
	// Epoch is the store's federation epoch.
	Epoch() string
	// Head is the highest changelog seq written (0: none), every row up
	// to it durable; Answer reads it once, first.
	Head() uint64
	// OriginAck is store.FederationStore's.
	OriginAck(ctx context.Context, origin string) (store.OriginAck, error)
	// ChangelogRow is store.FederationStore's.
	ChangelogRow(ctx context.Context, seq uint64) (*berth.ChangelogRow, error)
	// Changelog is store.FederationStore's.
	Changelog(ctx context.Context, origin string, after uint64, limit int) ([]berth.ChangelogRow, error)
	// ReceivedJobs is store.FederationStore's.
	ReceivedJobs(ctx context.Context, origin string) ([]berth.RemoteJob, error)
	// Tombstones is store.FederationStore's.
	Tombstones(ctx context.Context, origin string, after uint64) ([]berth.ChangelogRow, error)
}

// Answer answers origin's changes pull with cursor c, up to limit rows
// (DefaultLimit when limit <= 0, at most MaxLimit). It also returns the
// acknowledgement the peer stores for origin before it sends the answer:
// c, when c is valid (pulling with a cursor acknowledges every row up to
// it), keeping PrunedSeq; origin's stored one, unchanged, when c is stale.
//
// c is valid when it is a position in v's history (origin's
// acknowledgement, or the stored row at its seq, of any origin, with its
// tag), at or below the head, and at or above both origin's
// acknowledgement (the rows up to it may be pruned) and PrunedSeq (the
// highest row of origin's pruned above it). A valid cursor gets the rows
// of origin after it, oldest first, and the cursor of the last of them,
// or of the head row once none follow (More when some do); a stale one
// (the zero cursor, another database, a peer restored from a backup, rows
// pruned before the origin read them, an origin restored from a backup)
// gets Full: every received job of origin that has not ended, then each
// of its tombstones stored above the lower of its acknowledgement and c
// when c is a position in v's history, else every one stored: an origin
// restored from a backup sees the ends it forgot, as long as their
// tombstones are kept (Prunable). Its cursor is the head row's, so that
// the next pull is incremental.
func Answer(ctx context.Context, v PeerView, origin string, c berth.ChangeCursor, limit int) (*berth.FederationChanges, store.OriginAck, error) {
	if limit <= 0 {
		limit = DefaultLimit
	}
	limit = min(limit, MaxLimit)
	ack, err := v.OriginAck(ctx, origin)
	if err != nil {
		return nil, store.OriginAck{}, fmt.Errorf("federation changes of %s: %w", origin, err)
	}
	ack.Origin = origin
	epoch, head := v.Epoch(), v.Head()
	known, err := locate(ctx, v, origin, c, ack, epoch)
	if err != nil {
		return nil, store.OriginAck{}, err
	}
	if known && c.Seq <= head && c.Seq >= ack.PrunedSeq && c.Seq >= ack.Seq {
		ch, err := incremental(ctx, v, origin, c, head, limit)
		if err != nil {
			return nil, store.OriginAck{}, err
		}
		return ch, store.OriginAck{Origin: origin, Seq: c.Seq, Tag: c.Tag, PrunedSeq: ack.PrunedSeq}, nil
	}
	var after uint64 // every tombstone stored, for a cursor of no history here
	if known {
		after = min(ack.Seq, c.Seq)
	}
	ch, err := full(ctx, v, origin, ack, after, epoch, head)
	if err != nil {
		return nil, store.OriginAck{}, err
	}
	return ch, ack, nil
}

// locate reports whether c is a position in v's history: origin's
// acknowledgement, or the stored row at its seq (of any origin) with its
// tag.
func locate(ctx context.Context, v PeerView, origin string, c berth.ChangeCursor, ack store.OriginAck, epoch string) (bool, error) {
	if c.Epoch == "" || c.Epoch != epoch {
		return false, nil
	}
	if c.Seq == ack.Seq && c.Tag == ack.Tag {
		return true, nil
	}
	tag, ok, err := rowTag(ctx, v, origin, c.Seq)
	return ok && tag == c.Tag, err
}

// incremental is the answer to a valid cursor c: origin's rows after it.
// Once it holds the last of them, its cursor is the head row's (read
// before the rows; when stored), even when that row is another origin's: the answer
// then says that origin has no row in (c, head], which tells Reconcile
// that a job created there is gone.
func incremental(ctx context.Context, v PeerView, origin string, c berth.ChangeCursor, head uint64, limit int) (*berth.FederationChanges, error) {
	rows, err := v.Changelog(ctx, origin, c.Seq, limit+1)
	if err != nil {
		return nil, fmt.Errorf("federation changes of %s: %w", origin, err)
	}
	ch := &berth.FederationChanges{From: c, Cursor: c, Jobs: make([]berth.RemoteJob, 0, min(len(rows), limit))}
	if len(rows) > limit {
		rows, ch.More = rows[:limit], true
	}
	for _, r := range rows {
		ch.Jobs = append(ch.Jobs, r.Job)
		ch.Cursor = berth.ChangeCursor{Epoch: c.Epoch, Seq: r.Seq, Tag: r.Tag}
	}
	if !ch.More && head > ch.Cursor.Seq {
		tag, ok, err := rowTag(ctx, v, origin, head)
		if err != nil {
			return nil, err
		}
		if ok {
			ch.Cursor = berth.ChangeCursor{Epoch: c.Epoch, Seq: head, Tag: tag}
		}
	}
	return ch, nil
}

// rowTag returns the tag of the row of seq, and false when it is not
// stored.
func rowTag(ctx context.Context, v PeerView, origin string, seq uint64) (string, bool, error) {
	row, err := v.ChangelogRow(ctx, seq)
	switch {
	case berth.ErrorCode(err) == berth.ECodeNotFound:
		return "", false, nil
	case err != nil:
		return "", false, fmt.Errorf("federation changes of %s: row %d: %w", origin, seq, err)
	}
	return row.Tag, true, nil
}

// full is the answer to a stale cursor: origin's active set and its
// tombstones stored above after, as of the head row or later (the head is
// read first, so a row written meanwhile is sent again next, never
// missed). Its cursor is the head row's; with that row not stored (a
// store that prunes it, against Prunable), origin's acknowledgement,
// which the next pull continues from (sending again the rows after it,
// which this answer already reflects), unless rows above it were pruned:
// then one that names no row, and the next pull is full again.
func full(ctx context.Context, v PeerView, origin string, ack store.OriginAck, after uint64, epoch string, head uint64) (*berth.FederationChanges, error) {
	cursor := berth.ChangeCursor{Epoch: epoch, Seq: head}
	if head > 0 {
		tag, ok, err := rowTag(ctx, v, origin, head)
		switch {
		case err != nil:
			return nil, err
		case ok:
			cursor.Tag = tag
		case ack.Seq >= ack.PrunedSeq:
			cursor.Seq, cursor.Tag = ack.Seq, ack.Tag
		}
	}
	active, err := v.ReceivedJobs(ctx, origin)
	if err != nil {
		return nil, fmt.Errorf("federation changes of %s: %w", origin, err)
	}
	tombs, err := v.Tombstones(ctx, origin, after)
	if err != nil {
		return nil, fmt.Errorf("federation changes of %s: %w", origin, err)
	}
	jobs := make([]berth.RemoteJob, 0, len(active)+len(tombs))
	jobs = append(jobs, active...)
	for _, r := range tombs {
		jobs = append(jobs, r.Job)
	}
	return &berth.FederationChanges{Full: true, Jobs: jobs, Cursor: cursor}, nil
}

// Prunable reports whether the changelog row may be deleted, given its
// origin's acknowledgement, the retention cut-off olderThan and head, the
// highest seq stored. It is the one prune rule: store.PruneChangelog
// applies it in SQL, raising the origin's PrunedSeq to the highest seq it
// deleted above the acknowledged one, and the sync model of the tests
// applies it as is. A row the origin acknowledged goes, and so does one
// older than the retention; but a tombstone (the only word of a job's
// end) goes only once acknowledged and older than the retention, so that
// an origin restored from a backup younger than the retention still sees
// the ends it forgot; and the head row stays, so that a full answer's
// cursor, and an incremental one's that reached the head, name a stored
// row.
func Prunable(row *berth.ChangelogRow, ack store.OriginAck, olderThan time.Time, head uint64) bool {
	if row.Seq >= head {
		return false
	}
	acked, old := row.Seq <= ack.Seq, row.Job.At.Before(olderThan)
	if row.Job.Tombstone {
		return acked && old
	}
	return acked || old
}
