package controller

import (
	"cmp"
	"context"
	"crypto/rand"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/federation"
	"github.com/berth-dev/berth/scheduler"
	"github.com/berth-dev/berth/store"
)

// Federation, the origin's side (docs/federation.md): a root job that no
// local worker could ever run, or one pinned to a peer (spec.cluster), is
// handed to a federation peer. It stays a job row here, with spec.cluster
// set to the peer, and a durable handle (berth.Handoff) per incarnation;
// its state is mirrored from the peer. A federated job never enters the
// scheduler queue (enqueue leaves it out), so no pass, reservation,
// preemption or timeout sees it. The federation manager (Federation) does
// the talking, through the seams below; without one, or with no peer,
// nothing here runs and nothing is written.

// Federation is the federation manager as the controller's loop asks it.
// Both methods run on the loop: they must answer from memory, at once.
type Federation interface {
	// Route returns the peer to hand spec to: the first ready peer whose
	// last capability heartbeat fits it (queue, labels, GPU model, count
	// and memory, CPUs, memory), those with free capacity now first, then
	// by name. When none fits it returns "" and why, what each peer
	// lacks; with no peer at all it returns "", "". It is asked only
	// while the controller has peers (PutPeer).
	Route(spec *berth.JobSpec) (peer, why string)
	// PeerState returns what the manager knows of the peer name's
	// reachability, and false for a peer it does not know.
	PeerState(name string) (berth.PeerState, bool)
	// Kick tells the manager that work is owed to peer (a handoff to
	// deliver, a cancel to send), so that it visits the peer now rather
	// than at its next tick. It must not block.
	Kick(peer string)
}

// SetFederation sets the federation manager the controller routes with.
// Call it before Start; without it federation is inert.
func (c *Controller) SetFederation(f Federation) { c.origin.f = f }

// originState is the origin's federation memory. Loop only.
type originState struct {
	f Federation
	// handles holds, by job id and then incarnation, every handle that is
	// not settled: the live one of each federated job, and any other
	// whose cancel the peer has yet to acknowledge.
	handles map[string][]*berth.Handoff
	cursors map[string]berth.ChangeCursor // the mirror's position, by peer
}

// FederationWork is what the federation manager is to tell a peer now
// (federation.Work): the cancels owed to it (CancelAcked <
// CancelVersion, each to be sent with its CancelVersion), then the
// handoffs to deliver, each marked Sent durably before FederationWork
// returns, so that a cancel made after it reaches the peer; where the
// mirror of the peer stands, for the next changes pull; and how many
// jobs handed to it have not ended.
type FederationWork = federation.Work

// Delivery is one handoff to send: the handle and the job's spec.
type Delivery = federation.Delivery

// The controller is the origin the federation manager drives.
var _ federation.Origin = (*Controller)(nil)

// federated reports whether js is handed to a peer: its live handle's
// peer is its spec.cluster. The one test that keeps a job out of the
// scheduler queue.
func (js *jobState) federated() bool { return js.view().Cluster != "" }

// live reports whether h is the handle of a job in a peer's hands, or on
// its way there.
func live(h *berth.Handoff) bool {
	return h.State == berth.HandoffPending || h.State == berth.HandoffDone
}

// cancelOwed reports whether the peer must still be told to cancel h.
func cancelOwed(h *berth.Handoff) bool { return h.Sent && h.CancelAcked < h.CancelVersion }

// currentHandle returns the live handle of the active federated job id,
// or nil. Loop only.
func (c *Controller) currentHandle(id string) *berth.Handoff {
	hs := c.origin.handles[id]
	if len(hs) == 0 || c.jobs[id] == nil {
		return nil
	}
	if h := hs[len(hs)-1]; live(h) {
		return h
	}
	return nil
}

// handleOf returns the handle (id, incarnation) held in memory, or nil.
func (c *Controller) handleOf(id string, incarnation int) *berth.Handoff {
	for _, h := range c.origin.handles[id] {
		if h.Incarnation == incarnation {
			return h
		}
	}
	return nil
}

// writeHandle stamps h and writes a copy of it in the loop's batch.
func (c *Controller) writeHandle(h *berth.Handoff, now time.Time) {
	h.UpdatedAt = now
	stored := *h
	c.write(&store.Batch{Federation: &store.FederationBatch{Handoffs: []*berth.Handoff{&stored}}})
}

// settle forgets the handles of job id that need nothing more: all but
// the live one of an active job, less those with a cancel owed.
func (c *Controller) settle(id string) {
	hs := c.origin.handles[id]
	cur := c.currentHandle(id)
	hs = slices.DeleteFunc(hs, func(h *berth.Handoff) bool { return h != cur && !cancelOwed(h) })
	if len(hs) == 0 {
		delete(c.origin.handles, id)
		return
	}
	c.origin.handles[id] = hs
}

// handOff hands js to peer as its next incarnation: a new handle, pending
// and unsent, with a new nonce, pinned when the job was pinned to peer at
// submit, written in the loop's batch (the batch that creates the job, at
// submit). The job leaves the queue. Loop only.
func (c *Controller) handOff(js *jobState, peer string, pinned bool, now time.Time) {
	j := js.own()
	if js.task != nil {
		c.queue.Remove(js.task)
	}
	js.retried().incarnation++
	h := &berth.Handoff{JobID: j.ID, Incarnation: js.incarnation(), Peer: peer, RemoteID: j.ID, Nonce: rand.Text(),
		State: berth.HandoffPending, CreatedAt: now, Pinned: pinned}
	if c.origin.handles == nil {
		c.origin.handles = map[string][]*berth.Handoff{}
	}
	c.origin.handles[j.ID] = append(c.origin.handles[j.ID], h)
	c.setCluster(js, peer)
	j.Reason = "handing off to peer " + peer
	c.writeHandle(h, now)
	c.kick(peer)
}

// setCluster sets the peer js is handed to ("": none, it is here), and
// counts it in or out of its queue's backlog. Loop only.
func (l *lifecycle) setCluster(js *jobState, peer string) {
	was := js.waiting()
	js.own().Cluster = peer
	l.stats.counted(js, was)
}

// kick tells the federation manager, once what the loop wrote so far is
// durable, that work is owed to peer. Loop only.
func (c *Controller) kick(peer string) {
	if f := c.origin.f; f != nil {
		c.afterCommit(func() { f.Kick(peer) })
	}
}

// placement is where routing sends a submission's jobs: to peer, or
// here; wait, when set, is why a job kept here waits (no worker here and
// no peer fits it).
type placement struct {
	peer   string
	pinned bool
	wait   string
}

// route decides where the jobs of spec, a valid submission, go, with the
// warnings and the refusal fits would give a local job. A cluster pin
// forces its peer: one not among the peers (PutPeer) is ECodeInvalid on
// cluster, one the manager finds unreachable or lost ECodeUnavailable. A child stays here; so does a job
// some worker here could ever run. Else the federation manager routes it;
// when no peer fits, it waits here, its reason saying what each peer
// lacks, rather than being refused. With no manager or no peer, it is
// fits's answer alone. Loop only.
func (c *Controller) route(spec *berth.JobSpec, hold bool) (placement, []string, error) {
	if name := spec.Cluster; name != "" {
		if c.peers.byName[name] == nil {
			return placement{}, nil, berth.Invalidf("cluster", "no peer %q (berth peers lists them)", name)
		}
		var st berth.PeerState
		if c.origin.f != nil {
			st, _ = c.origin.f.PeerState(name)
		}
		if st == berth.PeerUnreachable || st == berth.PeerLost {
			return placement{}, nil, &berth.Error{Code: berth.ECodeUnavailable, Field: "cluster",
				Message: fmt.Sprintf("peer %s is %s: no work is handed to it until it is heard from again", name, st)}
		}
		return placement{peer: name, pinned: true}, nil, nil
	}
	unfit, seen := c.neverFits(spec)
	if c.origin.f == nil || len(c.peers.byName) == 0 || spec.Parent != "" || (seen && unfit == nil) {
		warnings, err := c.fitWarnings(unfit, seen, hold)
		return placement{}, warnings, err
	}
	peer, why := c.origin.f.Route(spec)
	switch {
	case peer != "":
		return placement{peer: peer}, nil, nil
	case why == "": // no peer at all
		warnings, err := c.fitWarnings(unfit, seen, hold)
		return placement{}, warnings, err
	}
	return placement{wait: waitReason(unfit, why)}, nil, nil
}

// waitReason is the reason of a job kept here that no worker here and no
// peer can run: what is short here (unfit; nil when no worker was seen)
// and what each peer lacks.
func waitReason(unfit *berth.Error, why string) string {
	here := "no worker here"
	if unfit != nil {
		here = "no worker here fits (" + unfit.Message + ")"
	}
	return here + " and no peer fits: " + why
}

// federate places the jobs just created for a submission as pl says:
// each handed to pl.peer (a handle of its own, in the batch that creates
// it), or kept here with pl.wait as its reason. out are the reply's
// copies. Loop only.
func (c *Controller) federate(out []*berth.Job, pl placement) {
	if pl.peer == "" && pl.wait == "" {
		return
	}
	now := c.now().UTC()
	for _, o := range out {
		js := c.jobs[o.ID]
		if pl.peer != "" {
			c.handOff(js, pl.peer, pl.pinned, now)
		} else {
			js.own().Reason = pl.wait
		}
		b := c.fx.rows()
		b.JobUpdates = append(b.JobUpdates, js.update())
		o.Reason = js.view().Reason
	}
}

// stopFederated cancels js, a federated job (stopJob): a handle never sent
// is cancelled here at once and never delivered, and the job ends; else
// the handle's cancel version is bumped, for the manager to send until the
// peer acknowledges it, and the job ends when the peer reports its end (or
// answers that it never had it). Its children are cancelled with it.
// Loop only.
func (c *Controller) stopFederated(js *jobState, requested string, now time.Time) {
	j := js.own()
	h := c.currentHandle(j.ID)
	switch {
	case h == nil: // cannot be: a federated job has its live handle
		c.finishJob(js, berth.JobCancelled, nil, cancelledFor(requested), now)
	case !h.Sent:
		h.State = berth.HandoffCancelled
		c.writeHandle(h, now)
		c.finishJob(js, berth.JobCancelled, nil, cancelledFor(requested), now)
		c.settle(j.ID)
	case !js.cancelRequested():
		j.Reason = requested
		b := c.fx.rows()
		b.JobUpdates = append(b.JobUpdates, js.update())
		h.CancelVersion++
		c.writeHandle(h, now)
		c.kick(h.Peer)
		c.cancelChildren(c.children[j.ID], j.ID, "was cancelled", now)
	}
}

// FederationWork returns what the federation manager is to send peer now:
// the cancels owed to it, oldest job first, then the handoffs to deliver,
// each marked Sent durably before it returns. A new handoff of a job is
// held while the peer still owes the acknowledgement of an earlier
// incarnation's cancel, so that the peer hears the cancel first.
func (c *Controller) FederationWork(ctx context.Context, peer string) (*FederationWork, error) {
	var w *FederationWork
	if err := c.doDurable(ctx, func() { w = c.work(peer) }); err != nil {
		return nil, err
	}
	return w, nil
}

// work is FederationWork on the loop.
func (c *Controller) work(peer string) *FederationWork {
	w := &FederationWork{Cursor: c.origin.cursors[peer]}
	now := c.now().UTC()
	for _, id := range slices.Sorted(maps.Keys(c.origin.handles)) {
		held := false
		for _, h := range c.origin.handles[id] {
			if h.Peer != peer {
				continue
			}
			if cancelOwed(h) {
				cp := *h
				w.Cancels = append(w.Cancels, &cp)
				held = true
				continue
			}
			cur := h == c.currentHandle(id)
			if cur {
				w.Active++
			}
			if !cur || h.State != berth.HandoffPending || h.CancelVersion > 0 || held {
				continue
			}
			if !h.Sent {
				h.Sent = true
				c.writeHandle(h, now)
			}
			cp := *h
			w.Deliver = append(w.Deliver, Delivery{Handoff: &cp, Spec: c.jobs[id].view().JobSpec})
		}
	}
	return w
}

// RecordHandoff records the outcome of a delivery of h (JobID,
// Incarnation): handed_off, with the peer's job id and creation row
// (which, when the mirror's cursor may have passed it, resets that cursor
// to the zero cursor in the same batch, so that the next pull is full:
// federation.ResyncNeeded); rejected, with the
// peer's reason in LastError, which fails the job; or still pending, with
// LastError saying why the delivery failed, to be tried again, or with
// Sent set, before it is first sent (FederationWork marks those it
// returns already). It returns once that is durable. A handle no longer
// held is ignored, but marking one Sent that is no longer to be delivered
// (cancelled, lost, ended) is an ECodeConflict error: it must not be sent.
func (c *Controller) RecordHandoff(ctx context.Context, h *berth.Handoff) error {
	var err error
	if derr := c.doDurable(ctx, func() { err = c.recordHandoff(h) }); derr != nil {
		return derr
	}
	return err
}

// recordHandoff is RecordHandoff on the loop.
func (c *Controller) recordHandoff(h *berth.Handoff) error {
	held := c.handleOf(h.JobID, h.Incarnation)
	if h.State == berth.HandoffPending && h.Sent && (held == nil || !held.Sent) {
		if held == nil || held != c.currentHandle(h.JobID) || held.State != berth.HandoffPending || held.CancelVersion > 0 {
			return &berth.Error{Code: berth.ECodeConflict, Field: "job_id",
				Message: fmt.Sprintf("the handoff of job %s (incarnation %d) is no longer to be delivered", h.JobID, h.Incarnation)}
		}
		held.Sent = true
		c.writeHandle(held, c.now().UTC())
	}
	if held == nil {
		return nil
	}
	now := c.now().UTC()
	switch h.State {
	case berth.HandoffDone:
		if held.RemoteJobID == h.RemoteJobID && held.State != berth.HandoffPending && ((h.CreateRow == berth.ChangeCursor{}) || held.CreateRow == h.CreateRow) {
			return nil
		}
		held.RemoteJobID, held.LastError = h.RemoteJobID, ""
		if !(h.CreateRow == berth.ChangeCursor{}) {
			held.CreateRow = h.CreateRow
		}
		if held.State == berth.HandoffPending {
			held.State = berth.HandoffDone
		}
		if cur := c.origin.cursors[held.Peer]; federation.ResyncNeeded(cur, h.CreateRow) {
			c.setCursor(held.Peer, berth.ChangeCursor{}) // the next pull is full: it shows whether the peer has the job
		}
		if js := c.jobs[h.JobID]; js != nil && held == c.currentHandle(h.JobID) && js.view().State == berth.JobPending && !js.cancelRequested() {
			js.own().Reason = fmt.Sprintf("handed off to peer %s (its job %s)", held.Peer, h.RemoteJobID)
			b := c.fx.rows()
			b.JobUpdates = append(b.JobUpdates, js.update())
		}
		c.writeHandle(held, now)
	case berth.HandoffRejected:
		if held.State != berth.HandoffPending {
			return nil
		}
		cur := held == c.currentHandle(h.JobID)
		held.State, held.LastError = berth.HandoffRejected, h.LastError
		c.writeHandle(held, now)
		if cur {
			c.finishJob(c.jobs[h.JobID], berth.JobFailed, nil, fmt.Sprintf("rejected by peer %s: %s", held.Peer, h.LastError), now)
		}
		c.settle(h.JobID)
	default:
		if held.LastError != h.LastError {
			held.LastError = h.LastError
			c.writeHandle(held, now)
		}
	}
	return nil
}

// RecordCancelAck records that the peer acknowledged the cancel of
// version (or answered that it does not know the job) for the handle
// (jobID, incarnation), and returns once that is durable. A job whose
// handoff the peer never acknowledged ends cancelled at once: the peer
// either cancelled it or never had it. One it acknowledged ends when the
// peer reports its end.
func (c *Controller) RecordCancelAck(ctx context.Context, jobID string, incarnation, version int) error {
	return c.doDurable(ctx, func() { c.recordCancelAck(jobID, incarnation, version) })
}

// recordCancelAck is RecordCancelAck on the loop.
func (c *Controller) recordCancelAck(jobID string, incarnation, version int) {
	h := c.handleOf(jobID, incarnation)
	if h == nil || version <= h.CancelAcked {
		return
	}
	now := c.now().UTC()
	h.CancelAcked = version
	c.writeHandle(h, now)
	if js := c.jobs[jobID]; js != nil && h == c.currentHandle(jobID) && h.State == berth.HandoffPending && js.cancelRequested() {
		c.finishJob(js, berth.JobCancelled, nil, cancelledFor(js.view().Reason), now)
	}
	c.settle(jobID)
}

// PeerLost declares every job in peer's hands lost (the peer went unheard
// past its lost timeout) and returns once that is durable: see lose.
func (c *Controller) PeerLost(ctx context.Context, peer string) error {
	return c.doDurable(ctx, func() { c.peerLost(peer) })
}

// peerLost is PeerLost on the loop.
func (c *Controller) peerLost(peer string) {
	now := c.now().UTC()
	why := fmt.Sprintf("peer %s unheard past its lost timeout", peer)
	if p := c.peers.byName[peer]; p != nil && p.LostTimeout > 0 {
		why = fmt.Sprintf("peer %s unheard for %v", peer, time.Duration(p.LostTimeout))
	}
	for _, id := range slices.Sorted(maps.Keys(c.origin.handles)) {
		if h := c.currentHandle(id); h != nil && h.Peer == peer {
			c.lose(c.jobs[id], h, why, now)
		}
	}
}

// lose marks h, the live handle of js, lost for why. A handle that was
// sent keeps a cancel intent, so that the peer, should it come back, is
// told to cancel it (before any later handoff of the job to it). A job
// whose cancel was requested ends cancelled; one with retries left (an
// incarnation a retry) is routed again (reroute); any other fails, lost.
// Loop only.
func (c *Controller) lose(js *jobState, h *berth.Handoff, why string, now time.Time) {
	h.State, h.LastError = berth.HandoffLost, why
	if h.Sent {
		h.CancelVersion++
	}
	c.writeHandle(h, now)
	j := js.own()
	switch {
	case js.cancelRequested():
		c.finishJob(js, berth.JobCancelled, nil, cancelledFor(j.Reason), now)
	case js.incarnation() <= j.Retries:
		c.reroute(js, h, "lost: "+why, now)
	default:
		c.finishJob(js, berth.JobFailed, nil, "lost: "+why, now)
	}
	c.settle(j.ID)
}

// reroute routes js, whose handle lost was lost, again, as a submission
// is routed: to the peer it was pinned to (lost.Pinned; the peer hears
// the old cancel first), here when a worker here could run it, else to
// the peer the manager picks, else it waits here. The job goes back to
// pending, with why. Loop only.
func (c *Controller) reroute(js *jobState, lost *berth.Handoff, why string, now time.Time) {
	j := js.own()
	peer := ""
	if lost.Pinned {
		peer = lost.Peer
	}
	c.setCluster(js, "")
	var pl placement
	if peer == "" {
		pl, _, _ = c.route(&j.JobSpec, true) // no pin: never refused
		peer = pl.peer
	}
	if peer != "" {
		c.handOff(js, peer, lost.Pinned, now)
		why += "; handing off to peer " + peer
	} else if pl.wait != "" {
		why += "; " + pl.wait
	}
	c.requeueEvent(js, berth.Event{Time: now, Type: berth.EventJobRequeued, JobID: j.ID, State: berth.JobPending, Reason: why})
	c.writeCluster(js)
}

// writeCluster writes the spec.cluster of js, a stored job handed to a
// peer, or back here, after it was created.
func (c *Controller) writeCluster(js *jobState) {
	c.write(&store.Batch{Federation: &store.FederationBatch{JobClusters: []store.JobCluster{{JobID: js.id, Cluster: js.view().Cluster}}}})
}

// RouteWaiting hands to a peer each job waiting here that no worker here
// could ever run and that a peer now fits (after a capability heartbeat
// changed), and returns once that is durable. Children stay here.
func (c *Controller) RouteWaiting(ctx context.Context) error {
	return c.doDurable(ctx, c.routeWaiting)
}

// routeWaiting is RouteWaiting on the loop.
func (c *Controller) routeWaiting() {
	if c.origin.f == nil || len(c.peers.byName) == 0 {
		return
	}
	now := c.now().UTC()
	var ids []string
	for id, js := range c.jobs {
		if j := js.view(); j.State == berth.JobPending && j.Parent == "" && !js.federated() && !js.placed() && !js.cancelRequested() {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		js := c.jobs[id]
		if unfit, seen := c.neverFits(&js.view().JobSpec); seen && unfit == nil {
			continue
		}
		if peer, _ := c.origin.f.Route(&js.view().JobSpec); peer != "" {
			delete(c.restarting, js)
			js.restarted()
			c.handOff(js, peer, false, now)
			b := c.fx.rows()
			b.JobUpdates = append(b.JobUpdates, js.update())
			c.writeCluster(js)
		}
	}
}

// doDurable runs fn on the loop and returns once what it wrote is
// durable.
func (c *Controller) doDurable(ctx context.Context, fn func()) error {
	var written <-chan struct{}
	if err := c.do(ctx, func() { fn(); written = c.durable() }); err != nil {
		return err
	}
	return c.awaitDurable(ctx, written)
}

// loadFederation restores the handles (indexed by indexHandles) and
// cursors at start, before the queue is rebuilt: a job with a live handle
// is federated (its cluster is that handle's peer), one whose handles are
// all settled is not, whatever its stored spec says (a job whose handle
// was lost and that was routed here again); a job with none keeps its
// stored spec.cluster.
func (c *Controller) loadFederation(f *store.FederationState) {
	for id := range c.origin.handles {
		if js := c.jobs[id]; js != nil {
			c.loadHandles(js)
		}
	}
	for id := range c.origin.handles {
		c.settle(id)
	}
	if len(f.Cursors) > 0 {
		c.origin.cursors = make(map[string]berth.ChangeCursor, len(f.Cursors))
	}
	for _, pc := range f.Cursors {
		c.origin.cursors[pc.Peer] = pc.Cursor
	}
}

// indexHandles indexes the stored handles by job, each job's by
// incarnation (loadFederation's first step: a start does it before it
// loads the jobs).
func (c *Controller) indexHandles(f *store.FederationState) {
	if len(f.Handoffs) > 0 {
		c.origin.handles = map[string][]*berth.Handoff{}
	}
	for _, h := range f.Handoffs {
		c.origin.handles[h.JobID] = append(c.origin.handles[h.JobID], h)
	}
	for _, hs := range c.origin.handles {
		slices.SortFunc(hs, func(a, b *berth.Handoff) int { return cmp.Compare(a.Incarnation, b.Incarnation) })
	}
}

// loadHandles sets a loaded job's last incarnation and its cluster from
// its handles (indexHandles); a job with none is as stored (a job is
// written with its first handle).
func (c *Controller) loadHandles(js *jobState) {
	hs := c.origin.handles[js.id]
	if len(hs) == 0 {
		return
	}
	js.retried().incarnation = hs[len(hs)-1].Incarnation
	js.own().Cluster = ""
	if h := c.currentHandle(js.id); h != nil {
		js.own().Cluster = h.Peer
	}
}

// federatedUsage appends to ws, for a pass's quota and fair-share usage, a
// worker that takes no work and holds the jobs running on peers: a job
// running on a peer counts for its user as it would here. Loop only.
func (c *Controller) federatedUsage(ws []*scheduler.Worker) []*scheduler.Worker {
	var w *scheduler.Worker
	for id := range c.origin.handles {
		js := c.jobs[id]
		if js == nil || !js.federated() || js.view().State != berth.JobRunning {
			continue
		}
		if w == nil {
			w = &scheduler.Worker{ID: "federation", Off: true}
		}
		j := js.view()
		w.Running = append(w.Running, &scheduler.Running{JobID: js.id, Queue: j.Queue, User: j.User, Template: j.Template,
			Priority: j.Priority, Started: j.StartedAt, GPUs: make([]int, j.Resources.GPUDevices()*max(j.Nodes, 1)),
			GPUMilli: j.Resources.GPUMilli, CPUs: j.Resources.CPUs, Memory: j.Resources.Memory})
	}
	if w == nil {
		return ws
	}
	return append(ws, w)
}

// ApplyChanges mirrors an answer of peer to a changes pull (see
// federation.Reconcile): each job's row moves its job here (applyMirror),
// a handle the peer no longer knows is lost (lose), a lost handle the
// peer reports ended owes no more cancel; a job that ended here stays as
// it ended, whatever the answer says; and the new cursor is written in
// the same batch as all that, unless the answer continues from a cursor
// the mirror was reset from meanwhile. It returns once that is durable.
func (c *Controller) ApplyChanges(ctx context.Context, peer string, ch *berth.FederationChanges) error {
	return c.doDurable(ctx, func() { c.applyChanges(peer, ch) })
}

// applyChanges is ApplyChanges on the loop.
func (c *Controller) applyChanges(peer string, ch *berth.FederationChanges) {
	// held are the sent handles on peer of the jobs active here: the live
	// one of each, and those of an earlier incarnation whose cancel is
	// owed. A job that ended here is never among them, so that no answer
	// can lose it or move it again; a cancel it still owes is settled by
	// the peer's acknowledgement.
	var held []*berth.Handoff
	for _, id := range slices.Sorted(maps.Keys(c.origin.handles)) {
		if c.jobs[id] == nil {
			continue // ended here
		}
		for _, h := range c.origin.handles[id] {
			if h.Peer == peer && h.Sent && (h == c.currentHandle(h.JobID) || cancelOwed(h)) {
				held = append(held, h)
			}
		}
	}
	updates, gone := federation.Reconcile(held, ch)
	now := c.now().UTC()
	for i := range updates {
		u := &updates[i]
		h, js := u.Handoff, c.jobs[u.Handoff.JobID]
		switch {
		case js != nil && h == c.currentHandle(h.JobID):
			c.applyMirror(js, h, &u.Job, now)
		case u.Job.State.Terminal() && cancelOwed(h): // an earlier incarnation ended there: nothing left to cancel
			h.CancelAcked = h.CancelVersion
			c.writeHandle(h, now)
			c.settle(h.JobID)
		}
	}
	for _, h := range gone {
		if js := c.jobs[h.JobID]; js != nil && h == c.currentHandle(h.JobID) {
			c.lose(js, h, fmt.Sprintf("peer %s no longer knows it", peer), now)
		}
	}
	if ch.Full || ch.From == c.origin.cursors[peer] {
		c.setCursor(peer, ch.Cursor)
	}
	// Otherwise the answer continues from a cursor the mirror no longer
	// holds: a handoff recorded since reset it (recordHandoff), and the
	// next pull, from the reset cursor, must be a full resync. Its rows
	// are the peer's all the same, and are applied.
}

// setCursor moves the mirror of peer to cursor and writes it in the
// loop's batch. Loop only.
func (c *Controller) setCursor(peer string, cursor berth.ChangeCursor) {
	if c.origin.cursors == nil {
		c.origin.cursors = map[string]berth.ChangeCursor{}
	}
	c.origin.cursors[peer] = cursor
	c.write(&store.Batch{Federation: &store.FederationBatch{Cursors: []store.PeerCursor{{Peer: peer, Cursor: cursor}}}})
}

// applyMirror makes js, the job of the live handle h, what its peer
// reports of it (rj), through transitionJob: running, pending again (the
// peer retries it), or ended, which settles the handle (a job that ended
// owes no cancel). A handle the peer reports a job for was delivered,
// whether or not its acknowledgement arrived. While the job's cancel is
// requested its reason stays. Loop only.
func (c *Controller) applyMirror(js *jobState, h *berth.Handoff, rj *berth.RemoteJob, now time.Time) {
	j := js.own()
	if h.State == berth.HandoffPending || h.RemoteJobID != rj.JobID {
		h.State, h.RemoteJobID, h.Sent = berth.HandoffDone, rj.JobID, true
		c.writeHandle(h, now)
	}
	j.Attempts = rj.Attempts
	if !rj.StartedAt.IsZero() {
		j.StartedAt = rj.StartedAt
	}
	if rj.State.Terminal() {
		if h.CancelAcked < h.CancelVersion {
			h.CancelAcked = h.CancelVersion
			c.writeHandle(h, now)
		}
		reason := rj.Reason
		if rj.State == berth.JobCancelled && js.cancelRequested() {
			reason = cancelledFor(j.Reason)
		}
		c.finishJob(js, rj.State, rj.ExitCode, reason, cmp.Or(rj.FinishedAt, now))
		c.settle(j.ID)
		c.dirty = len(c.quotas) > 0 || c.dirty // its quota use is freed
		return
	}
	if !js.cancelRequested() {
		j.Reason = ""
		if rj.Reason != "" {
			j.Reason = fmt.Sprintf("on peer %s: %s", h.Peer, rj.Reason)
		}
	}
	switch {
	case rj.State == berth.JobRunning && j.State == berth.JobPending:
		if err := c.transitionJob(js, berth.JobRunning, berth.Event{Time: now, Type: berth.EventJobRunning, Host: "peer " + h.Peer}); err != nil {
			c.illegal(err)
		}
	case rj.State == berth.JobPending && j.State == berth.JobRunning:
		if err := c.transitionJob(js, berth.JobPending, berth.Event{Time: now, Type: berth.EventJobRequeued, Reason: j.Reason}); err != nil {
			c.illegal(err)
		}
	default:
		b := c.fx.rows()
		b.JobUpdates = append(b.JobUpdates, js.update())
	}
}
