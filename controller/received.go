package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/federation"
	"github.com/berth-dev/berth/store"
)

// The peer side of federation (docs/federation.md): the jobs this cluster
// receives from origins, and the changelog each origin mirrors them by.
// It is inert until a job is received: a local job costs no allocation and
// no write more (writeJob), and the housekeeping tick does nothing more.

// receiving is the lifecycle's state of the jobs received from federation
// origins. The zero value holds none. Loop only, but for sweeps.
type receiving struct {
	epoch string // the store's federation epoch
	head  uint64 // the seq of the last changelog row written
	// acks holds the acknowledgement last stored for each origin, so that
	// a pull that acknowledges nothing new writes nothing.
	acks map[string]store.OriginAck
	// reasons holds, for each active received job, the reason its last
	// changelog row gave, so that a new one is written only when it
	// changes.
	reasons map[string]string
	// fresh holds the receptions made on the loop that may not be durable
	// yet (a store lookup misses them), until the housekeeping tick finds
	// them durable.
	fresh map[berth.JobOrigin]reception
	// sweeps counts the ticks that dropped fresh receptions: a lookup
	// that missed in the store before a sweep must look again (read off
	// the loop).
	sweeps atomic.Uint64
}

// reception is a job received on the loop, its creation row and when its
// batch is durable.
type reception struct {
	jobID   string
	row     berth.ChangeCursor
	durable <-chan struct{}
}

// writeJob adds js's row to the pass's batch and, for a job received from
// a federation origin, the changelog row that records the change, in the
// same batch. Every write of a job's row but its creation goes through it.
func (l *lifecycle) writeJob(js *jobState) {
	b := l.fx.rows()
	u := js.update()
	b.JobUpdates = append(b.JobUpdates, u)
	if js.view().Origin != nil {
		l.logChange(b, js.clone(), u.Attempts, js.view().Reason)
	}
}

// logChange appends to b the changelog row of job j, received from a
// federation origin, as it is now: with attempts (as its row counts
// them) and reason. A row of an ended job is its tombstone.
func (l *lifecycle) logChange(b *store.Batch, j *berth.Job, attempts int, reason string) {
	l.fed.head++
	end := j.State.Terminal()
	row := berth.ChangelogRow{Seq: l.fed.head, Tag: fmt.Sprintf("%08x", rand.Uint32()), Origin: j.Origin.Cluster,
		Job: berth.RemoteJob{RemoteID: j.Origin.RemoteID, Nonce: j.Origin.Nonce, JobID: j.ID, State: j.State, Reason: reason,
			ExitCode: j.ExitCode, Attempts: attempts, StartedAt: j.StartedAt, FinishedAt: j.FinishedAt, Tombstone: end,
			At: l.now().UTC()}}
	if b.Federation == nil {
		b.Federation = &store.FederationBatch{}
	}
	b.Federation.Changelog = append(b.Federation.Changelog, row)
	switch {
	case end:
		delete(l.fed.reasons, j.ID)
	case l.fed.reasons == nil:
		l.fed.reasons = map[string]string{j.ID: reason}
	default:
		l.fed.reasons[j.ID] = reason
	}
}

// rebuildReceived restores the federation's memory from what the store
// holds: the changelog's head and the active received jobs. Loop only.
func (c *Controller) rebuildReceived(a *store.Active) {
	c.fed.epoch, c.fed.head = a.Federation.Epoch, a.Federation.Head
	for j, m := range a.ByID() {
		id := ""
		if m != nil {
			id, j = m.ID, m.Like
		} else {
			id = j.ID
		}
		if j.Origin != nil {
			if c.fed.reasons == nil {
				c.fed.reasons = map[string]string{}
			}
			c.fed.reasons[id] = j.Reason
		}
	}
}

// peerUser returns the user the jobs received from origin run as: its
// mapping (Config.PeerUsers), else the origin's name.
func (c *Controller) peerUser(origin string) string {
	if u, ok := c.cfg.PeerUsers[origin]; ok {
		return u
	}
	return origin
}

// checkReception checks the key a handoff or a cancel names.
func checkReception(k *berth.JobOrigin) error {
	switch {
	case k.RemoteID == "" || len(k.RemoteID) > 128:
		return berth.Invalidf("remote_id", "must be 1 to 128 characters")
	case k.Nonce == "" || len(k.Nonce) > 128:
		return berth.Invalidf("nonce", "must be 1 to 128 characters")
	}
	return nil
}

// ReceiveHandoff creates the job that origin (the peer token's name)
// hands to this cluster with req, durably, and returns it; a repeat of
// (origin, req.RemoteID, req.Nonce), durable or not yet, returns the job
// the first created, Duplicate set, and stores nothing. The job runs as
// the user origin maps to (Config.PeerUsers), never as one the origin
// names; the spec's cluster and parent are not honoured, and it is
// accepted even when no worker could run it now (as with hold_until_fits).
// Invalid input is an ECodeInvalid error and stores nothing: like a
// secret its user lacks (ECodeForbidden), final for the origin.
func (c *Controller) ReceiveHandoff(ctx context.Context, origin string, req *berth.HandoffRequest) (*berth.HandoffResponse, error) {
	key := berth.JobOrigin{Cluster: origin, RemoteID: req.RemoteID, Nonce: req.Nonce}
	if err := checkReception(&key); err != nil {
		return nil, err
	}
	sub := berth.SubmitRequest{JobSpec: req.Job, HoldUntilFits: true}
	spec := &sub.JobSpec
	spec.User, spec.Cluster, spec.Parent, spec.IdempotencyKey = c.peerUser(origin), "", "", ""
	spec.Origin = &key
	if err := c.checkReceived(&sub); err != nil {
		return nil, err
	}
	r, existed, err := c.received(ctx, key, func() reception {
		j := c.createJobs(&sub, berth.ActorFrom(ctx))[0]
		created := c.fx.rows().Federation.Changelog // its row is the last
		c.write(&store.Batch{Federation: &store.FederationBatch{
			Received: []store.ReceivedJob{{Origin: origin, RemoteID: key.RemoteID, Nonce: key.Nonce, JobID: j.ID}}}})
		return reception{jobID: j.ID, row: berth.ChangeCursor{Epoch: c.fed.epoch, Seq: c.fed.head, Tag: created[len(created)-1].Tag}}
	})
	if err != nil {
		return nil, err
	}
	d, err := c.Job(ctx, r.jobID)
	if err != nil {
		return nil, err
	}
	return &berth.HandoffResponse{JobID: r.jobID, State: d.State, Duplicate: existed, CreateRow: r.row}, nil
}

// checkReceived checks a received job's spec as a submission's is checked
// (its backend included); an error's field is named within the handoff
// body (job.…).
func (c *Controller) checkReceived(sub *berth.SubmitRequest) error {
	err := sub.Validate()
	if err == nil {
		err = CheckSecrets(&sub.JobSpec, c.cfg.Secrets)
	}
	if err == nil {
		err = c.checkBackend(&sub.JobSpec)
	}
	var e *berth.Error
	if errors.As(err, &e) && e.Field != "" {
		e.Field = "job." + e.Field
	}
	return err
}

// received returns the job received as key, durable (its creation row
// when known): existed is true when it was received before; otherwise,
// with create, create makes it on the loop and received returns once it
// is durable; without create, an unknown key is ECodeNotFound.
func (c *Controller) received(ctx context.Context, key berth.JobOrigin, create func() reception) (r reception, existed bool, err error) {
	type result struct {
		r             reception
		existed, gone bool
	}
	for {
		sweeps := c.fed.sweeps.Load()
		id, err := c.store.ReceivedJobID(ctx, key.Cluster, key.RemoteID, key.Nonce)
		switch {
		case err == nil:
			return reception{jobID: id}, true, nil
		case !isNotFound(err):
			return reception{}, false, fmt.Errorf("look up handoff: %w", err)
		}
		reply := make(chan result, 1)
		if err := c.do(ctx, func() {
			if c.fed.sweeps.Load() != sweeps {
				reply <- result{} // durable since the lookup: look again
				return
			}
			r, ok := c.fed.fresh[key]
			switch {
			case ok:
				c.afterCommit(func() { reply <- result{r: r, existed: true} })
			case create == nil:
				reply <- result{gone: true}
			default:
				r = create()
				r.durable = c.durable()
				if c.fed.fresh == nil {
					c.fed.fresh = map[berth.JobOrigin]reception{}
				}
				c.fed.fresh[key] = r
				c.afterCommit(func() { reply <- result{r: r} })
			}
		}); err != nil {
			return reception{}, false, err
		}
		var res result
		select {
		case res = <-reply:
		case <-c.failed:
			return reception{}, false, c.storeFailedError()
		case <-ctx.Done():
			return reception{}, false, ctx.Err()
		}
		switch {
		case res.gone:
			return reception{}, false, &berth.Error{Code: berth.ECodeNotFound, Field: "remote_id",
				Message: fmt.Sprintf("no job received from %s as %s (nonce %s)", key.Cluster, key.RemoteID, key.Nonce)}
		case res.r.jobID != "":
			return res.r, res.existed, nil
		}
	}
}

// sweepReceptions drops the fresh receptions now durable. Loop only.
func (c *Controller) sweepReceptions() {
	dropped := false
	for k, r := range c.fed.fresh {
		select {
		case <-r.durable:
			delete(c.fed.fresh, k)
			dropped = true
		default:
		}
	}
	if dropped {
		c.fed.sweeps.Add(1)
	}
}

// CancelReceived cancels the job origin handed to this cluster as
// (fc.RemoteID, fc.Nonce), as Cancel does, and echoes fc.Version with the
// job's state after it: a job that has already ended is no error. A job
// this cluster does not know is ECodeNotFound, which satisfies the cancel.
func (c *Controller) CancelReceived(ctx context.Context, origin string, fc *berth.FederationCancel) (*berth.FederationCancelResponse, error) {
	key := berth.JobOrigin{Cluster: origin, RemoteID: fc.RemoteID, Nonce: fc.Nonce}
	if err := checkReception(&key); err != nil {
		return nil, err
	}
	r, _, err := c.received(ctx, key, nil)
	if err != nil {
		return nil, err
	}
	j, err := c.Cancel(ctx, r.jobID)
	if berth.ErrorCode(err) == berth.ECodeConflict { // already ended
		d, rerr := c.Job(ctx, r.jobID)
		if rerr != nil {
			return nil, rerr
		}
		j, err = d.Job, nil
	}
	if err != nil {
		return nil, err
	}
	return &berth.FederationCancelResponse{Version: fc.Version, State: j.State}, nil
}

// PeerCapacity returns this cluster's capability heartbeat, as a
// federation origin routes by it: every worker not lost, its shape, its
// free GPUs and whether it takes new work now.
func (c *Controller) PeerCapacity(ctx context.Context) (*berth.PeerCapacity, error) {
	out := &berth.PeerCapacity{Workers: []berth.PeerWorker{}}
	err := c.do(ctx, func() {
		out.At = c.now().UTC()
		for _, ws := range c.order {
			if ws.w.State == berth.WorkerLost {
				continue
			}
			s := ws.sched
			free := 0
			for _, used := range s.GPUMilliUsed {
				if used == 0 {
					free++
				}
			}
			out.Workers = append(out.Workers, berth.PeerWorker{Queues: slices.Clone(s.Queues), Labels: maps.Clone(s.Labels),
				GPUs: slices.Clone(s.GPUs), FreeGPUs: free, CPUs: s.CPUs, Memory: s.Memory, Off: s.Off})
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// pruneEvery is how often the housekeeping tick prunes the changelog.
const pruneEvery = time.Minute

// pruning serializes the changelog's pruning with the acknowledgements
// of changes pulls (see Changes), so that neither undoes the other's
// PrunedSeq; and keeps one prune running at a time.
type pruning struct {
	mu      sync.Mutex
	running atomic.Bool
	done    sync.WaitGroup // the prune the tick started; Stop waits for it
	last    time.Time      // when the tick last started one; loop only
}

// PruneChangelog deletes, for every origin, the changelog rows that
// federation.Prunable allows with the cut-off Config.ChangelogRetention
// ago (0: none), and returns how many it deleted.
func (c *Controller) PruneChangelog(ctx context.Context) (int, error) {
	c.prune.mu.Lock()
	defer c.prune.mu.Unlock()
	origins, err := c.store.Origins(ctx)
	if err != nil {
		return 0, fmt.Errorf("prune changelog: %w", err)
	}
	var olderThan time.Time
	if c.cfg.ChangelogRetention > 0 {
		olderThan = c.now().Add(-c.cfg.ChangelogRetention)
	}
	total := 0
	for _, o := range origins {
		n, err := c.store.PruneChangelog(ctx, o, olderThan)
		if err != nil {
			return total, fmt.Errorf("prune changelog of %s: %w", o, err)
		}
		total += n
	}
	return total, nil
}

// housekeepReceived, on the housekeeping tick, drops the fresh receptions
// now durable, records the changed reasons of received jobs that wait,
// and starts pruning the changelog every pruneEvery. It does nothing
// while no job was ever received. Loop only.
func (c *Controller) housekeepReceived(now time.Time) {
	if len(c.fed.fresh) > 0 {
		c.sweepReceptions()
	}
	if len(c.fed.reasons) > 0 {
		c.logReasons()
	}
	if c.fed.head == 0 || now.Sub(c.prune.last) < pruneEvery || !c.prune.running.CompareAndSwap(false, true) {
		return
	}
	c.prune.last = now
	c.prune.done.Go(func() {
		defer c.prune.running.Store(false)
		if _, err := c.PruneChangelog(context.Background()); err != nil {
			c.log.Warn("federation: changelog not pruned", "err", err)
		}
	})
}

// logReasons writes a changelog row for each received job that waits
// (queued, not placed) whose reason changed since its last row: the
// origin shows why its job waits here. Loop only.
func (c *Controller) logReasons() {
	var waiting []*berth.Job
	for id := range c.fed.reasons {
		if js := c.jobs[id]; js != nil && js.view().State == berth.JobPending && !js.placed() {
			waiting = append(waiting, js.clone())
		}
	}
	c.explain(waiting)
	for _, j := range waiting {
		if j.Reason != c.fed.reasons[j.ID] {
			js := c.jobs[j.ID]
			c.logChange(c.fx.rows(), js.clone(), js.update().Attempts, j.Reason)
		}
	}
}

// Changes answers origin's pull of the changes to the jobs it handed over
// after cursor, up to limit rows (federation.Answer), from the store once
// every change made so far is durable; it stores what the pull
// acknowledges, through the loop's committer, before answering. Pulls and
// the changelog's pruning take turns.
func (c *Controller) Changes(ctx context.Context, origin string, cursor berth.ChangeCursor, limit int) (*berth.FederationChanges, error) {
	c.prune.mu.Lock()
	defer c.prune.mu.Unlock()
	var (
		v       changesView
		written <-chan struct{}
	)
	if err := c.do(ctx, func() {
		v = changesView{FederationStore: c.store, epoch: c.fed.epoch, head: c.fed.head}
		written = c.durable()
	}); err != nil {
		return nil, err
	}
	if err := c.awaitDurable(ctx, written); err != nil {
		return nil, err
	}
	ch, ack, err := federation.Answer(ctx, &v, origin, cursor, limit)
	if err != nil {
		return nil, err
	}
	written = nil
	if err := c.do(ctx, func() {
		if c.fed.acks[origin] == ack {
			return
		}
		if c.fed.acks == nil {
			c.fed.acks = map[string]store.OriginAck{}
		}
		c.fed.acks[origin] = ack
		c.write(&store.Batch{Federation: &store.FederationBatch{Acks: []store.OriginAck{ack}}})
		written = c.durable()
	}); err != nil || written == nil {
		return ch, err
	}
	if err := c.awaitDurable(ctx, written); err != nil {
		return nil, err
	}
	return ch, nil
}

// changesView is the peer's state a changes pull is answered from: the
// store, its epoch and its head as of a moment every change up to it was
// durable.
type changesView struct {
	store.FederationStore
	epoch string
	head  uint64
}

// Epoch is the store's federation epoch.
func (v *changesView) Epoch() string { return v.epoch }

// Head is the highest changelog seq durable when the pull began.
func (v *changesView) Head() uint64 { return v.head }
