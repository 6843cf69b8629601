package federation

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/store"
)

// memPeer is an in-memory peer: its received jobs, its changelog and the
// acknowledgements of its origins, kept as the store keeps them. It
// implements PeerView, prunes with Prunable and is copied whole to model
// a backup.
type memPeer struct {
	epoch string
	rows  []berth.ChangelogRow // by seq
	head  uint64
	acks  map[string]store.OriginAck
	jobs  map[string]*memJob // by origin, remote id and nonce (jobKey)
	tags  *int               // the tag counter, shared by every copy: a row written after a restore gets a new tag
}

// memJob is a job the peer received: its origin and its state now.
type memJob struct {
	origin string
	job    berth.RemoteJob
}

func newMemPeer(epoch string) *memPeer {
	return &memPeer{epoch: epoch, acks: map[string]store.OriginAck{}, jobs: map[string]*memJob{}, tags: new(int)}
}

// jobKey names a received job.
func jobKey(origin, remoteID, nonce string) string { return origin + "/" + remoteID + "/" + nonce }

func (p *memPeer) Epoch() string { return p.epoch }
func (p *memPeer) Head() uint64  { return p.head }

func (p *memPeer) OriginAck(_ context.Context, origin string) (store.OriginAck, error) {
	a := p.acks[origin]
	a.Origin = origin
	return a, nil
}

func (p *memPeer) ChangelogRow(_ context.Context, seq uint64) (*berth.ChangelogRow, error) {
	for i := range p.rows {
		if p.rows[i].Seq == seq {
			r := p.rows[i]
			return &r, nil
		}
	}
	return nil, berth.Errorf(berth.ECodeNotFound, "no changelog row %d", seq)
}

func (p *memPeer) Changelog(_ context.Context, origin string, after uint64, limit int) ([]berth.ChangelogRow, error) {
	var out []berth.ChangelogRow
	for _, r := range p.rows {
		if r.Origin == origin && r.Seq > after && len(out) < limit {
			out = append(out, r)
		}
	}
	return out, nil
}

func (p *memPeer) ReceivedJobs(_ context.Context, origin string) ([]berth.RemoteJob, error) {
	var out []berth.RemoteJob
	for _, j := range p.jobs {
		if j.origin == origin && !j.job.Tombstone {
			out = append(out, j.job)
		}
	}
	slices.SortFunc(out, func(a, b berth.RemoteJob) int {
		return cmp.Or(cmp.Compare(a.RemoteID, b.RemoteID), cmp.Compare(a.Nonce, b.Nonce))
	})
	return out, nil
}

func (p *memPeer) Tombstones(_ context.Context, origin string, after uint64) ([]berth.ChangelogRow, error) {
	var out []berth.ChangelogRow
	for _, r := range p.rows {
		if r.Origin == origin && r.Seq > after && r.Job.Tombstone {
			out = append(out, r)
		}
	}
	return out, nil
}

// write records j as origin's job's state now and appends its changelog
// row (as the controller does in one batch), at time at. It returns the
// row.
func (p *memPeer) write(origin string, j berth.RemoteJob, at time.Time) berth.ChangelogRow {
	j.At = at
	p.jobs[jobKey(origin, j.RemoteID, j.Nonce)] = &memJob{origin: origin, job: j}
	*p.tags++
	p.head++
	r := berth.ChangelogRow{Seq: p.head, Tag: fmt.Sprintf("%08x", *p.tags), Origin: origin, Job: j}
	p.rows = append(p.rows, r)
	return r
}

// prune deletes origin's rows that Prunable allows, raising its PrunedSeq
// to the highest it deleted above its acknowledgement, as
// store.PruneChangelog does.
func (p *memPeer) prune(origin string, olderThan time.Time) int {
	ack := p.acks[origin]
	kept := p.rows[:0]
	n := 0
	for _, r := range p.rows {
		if r.Origin == origin && Prunable(&r, ack, olderThan, p.head) {
			if r.Seq > ack.Seq {
				ack.PrunedSeq = max(ack.PrunedSeq, r.Seq)
			}
			n++
			continue
		}
		kept = append(kept, r)
	}
	p.rows = kept
	if n > 0 {
		p.acks[origin] = ack
	}
	return n
}

// answer answers origin's pull as the peer's API does: Answer, then the
// acknowledgement stored.
func (p *memPeer) answer(origin string, c berth.ChangeCursor, limit int) (*berth.FederationChanges, error) {
	ch, ack, err := Answer(context.Background(), p, origin, c, limit)
	if err != nil {
		return nil, err
	}
	p.acks[origin] = ack
	return ch, nil
}

// clone copies p whole: a backup.
func (p *memPeer) clone() *memPeer {
	c := &memPeer{epoch: p.epoch, rows: slices.Clone(p.rows), head: p.head, acks: maps.Clone(p.acks),
		jobs: make(map[string]*memJob, len(p.jobs)), tags: p.tags}
	for k, j := range p.jobs {
		cj := *j
		c.jobs[k] = &cj
	}
	return c
}
