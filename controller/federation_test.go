package controller

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/sqlite"
	"github.com/berth-dev/berth/store"
	"github.com/berth-dev/berth/wire"
)

// fakeFederation is a federation manager whose routing the test sets: it
// routes every job to peer (or to none, with why) and knows the peers of
// states; it counts the routes asked.
type fakeFederation struct {
	peer, why string
	states    map[string]berth.PeerState
	routed    int
	mu        sync.Mutex // kicked: Kick runs off the loop
	kicked    []string
}

func (f *fakeFederation) Route(*berth.JobSpec) (string, string) {
	f.routed++
	return f.peer, f.why
}

func (f *fakeFederation) PeerState(name string) (berth.PeerState, bool) {
	st, ok := f.states[name]
	return st, ok
}

func (f *fakeFederation) Kick(peer string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.kicked = append(f.kicked, peer)
}

// kicks returns the peers kicked so far, in order.
func (f *fakeFederation) kicks() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.kicked)
}

// testPeers are the peers the federation tests' controllers hold, b, c,
// l and u, in memory only (PutPeer stores them).
func testPeers() map[string]*berth.Peer {
	out := map[string]*berth.Peer{}
	for _, name := range []string{"b", "c", "l", "u"} {
		p := &berth.Peer{Name: name, URL: "https://127.0.0.1:7070"}
		p.SetDefaults()
		out[name] = p
	}
	return out
}

// newFederationHarness returns a harness over a controller with fed as
// its federation manager, the testPeers and one connected worker of
// workerReg (no GPU).
func newFederationHarness(t *testing.T, fed *fakeFederation) *harness {
	t.Helper()
	h := newHarness(t)
	h.c.SetFederation(fed)
	h.c.peers.byName = testPeers()
	h.agent(workerReg())
	h.batches = nil
	return h
}

// admit submits req as SubmitFull does on the loop, and returns what it
// made.
func (h *harness) admit(req *berth.SubmitRequest) (*Submission, error) {
	h.t.Helper()
	if err := req.Validate(); err != nil {
		h.t.Fatal(err)
	}
	var sub *Submission
	var err error
	h.step(func() { sub, err = h.c.admit(req, "test") })
	return sub, err
}

// gpuJob is a request for a job of gpus GPUs, which the harness's worker
// cannot run, edited by edit.
func gpuJob(gpus int, edit func(*berth.SubmitRequest)) *berth.SubmitRequest {
	req := &berth.SubmitRequest{JobSpec: berth.DefaultJobSpec()}
	req.Command = berth.Argv{"train"}
	req.Resources.GPUs = gpus
	if edit != nil {
		edit(req)
	}
	return req
}

// handedOff submits req, which must be handed to a peer, and returns its
// one job's state in memory.
func (h *harness) handedOff(req *berth.SubmitRequest) *jobState {
	h.t.Helper()
	sub, err := h.admit(req)
	if err != nil {
		h.t.Fatal(err)
	}
	js := h.c.jobs[sub.Jobs[0].ID]
	if js == nil || !js.federated() {
		h.t.Fatalf("job %+v not handed off", sub.Jobs[0])
	}
	return js
}

// storedHandles returns the handles of job id written in the batches so
// far, in order.
func (h *harness) storedHandles(id string) []berth.Handoff {
	var out []berth.Handoff
	for _, b := range h.batches {
		if b.Federation == nil {
			continue
		}
		for _, hd := range b.Federation.Handoffs {
			if hd.JobID == id {
				out = append(out, *hd)
			}
		}
	}
	return out
}

// lastHandle returns the last handle of job id written, or fails.
func (h *harness) lastHandle(id string) berth.Handoff {
	h.t.Helper()
	hs := h.storedHandles(id)
	if len(hs) == 0 {
		h.t.Fatalf("no handle of %s written", id)
	}
	return hs[len(hs)-1]
}

// TestFederationInertWithoutPeers: with a manager but no peer, a job no
// worker here can run is refused as without federation, nothing is
// routed and nothing federated is written.
func TestFederationInertWithoutPeers(t *testing.T) {
	t.Parallel()
	fed := &fakeFederation{peer: "b"}
	h := newFederationHarness(t, fed)
	h.c.peers.byName = nil
	_, err := h.admit(gpuJob(1, nil))
	if berth.ErrorCode(err) != berth.ECodeUnsatisfiable {
		t.Fatalf("a job no worker can run, no peer: %v, want unsatisfiable as without federation", err)
	}
	sub, err := h.admit(gpuJob(0, nil))
	if err != nil || sub.Jobs[0].Cluster != "" {
		t.Fatalf("a job the worker can run: %+v, %v; want it here", sub, err)
	}
	for _, b := range h.batches {
		if b.Federation != nil {
			t.Errorf("federation writes with no peer: %+v", b.Federation)
		}
	}
	if fed.routed != 0 {
		t.Errorf("routes asked %d with no peer, want none", fed.routed)
	}
	n := len(h.batches)
	h.step(h.c.routeWaiting)
	if fed.routed != 0 || len(h.batches) != n {
		t.Errorf("routing waiting jobs with no peer: %d routes, %d batches; want nothing done", fed.routed, len(h.batches))
	}
}

func TestRoutingAtSubmit(t *testing.T) {
	t.Parallel()
	states := map[string]berth.PeerState{"b": berth.PeerReady, "c": berth.PeerNew, "u": berth.PeerUnreachable, "l": berth.PeerLost}
	pin := func(name string) func(*berth.SubmitRequest) {
		return func(r *berth.SubmitRequest) { r.Cluster = name }
	}
	tests := []struct {
		name      string
		route     string // what the manager routes to
		req       *berth.SubmitRequest
		wantPeer  string // "" here
		wantCode  string // refused with
		wantField string
		wantWait  string // in the reason of a job kept here
		routes    int    // routes asked
	}{
		{name: "pin forces the peer though a worker here fits", req: gpuJob(0, pin("b")), wantPeer: "b"},
		{name: "pin to a peer not yet heard from", req: gpuJob(0, pin("c")), wantPeer: "c"},
		{name: "pin to an unknown peer", req: gpuJob(0, pin("x")), wantCode: berth.ECodeInvalid, wantField: "cluster"},
		{name: "pin to an unreachable peer", req: gpuJob(0, pin("u")), wantCode: berth.ECodeUnavailable, wantField: "cluster"},
		{name: "pin to a lost peer", req: gpuJob(0, pin("l")), wantCode: berth.ECodeUnavailable, wantField: "cluster"},
		{name: "a worker here fits: local first", route: "b", req: gpuJob(0, nil)},
		{name: "a child stays here", route: "b", req: gpuJob(1, func(r *berth.SubmitRequest) { r.Parent = "PARENT" }),
			wantCode: berth.ECodeUnsatisfiable, wantField: "resources.gpus"},
		{name: "no worker here fits: the peer", route: "b", req: gpuJob(1, nil), wantPeer: "b", routes: 1},
		{name: "no worker here, no peer fits: waits here", req: gpuJob(1, nil), routes: 1,
			wantWait: "no peer fits: b: no GPU"},
		{name: "held, no peer fits: waits here", req: gpuJob(1, func(r *berth.SubmitRequest) { r.HoldUntilFits = true }), routes: 1,
			wantWait: "no peer fits: b: no GPU"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fed := &fakeFederation{peer: tt.route, states: states}
			if tt.route == "" {
				fed.why = "b: no GPU"
			}
			h := newFederationHarness(t, fed)
			if tt.req.Parent == "PARENT" {
				tt.req.Parent = h.submit(nil, "driver").ID
				h.batches = nil
			}
			sub, err := h.admit(tt.req)
			if fed.routed != tt.routes {
				t.Errorf("routes asked %d, want %d", fed.routed, tt.routes)
			}
			if tt.wantCode != "" {
				var e *berth.Error
				if !errors.As(err, &e) || e.Code != tt.wantCode || e.Field != tt.wantField {
					t.Fatalf("err = %v, want %s on %s", err, tt.wantCode, tt.wantField)
				}
				if len(h.batches) != 0 || (len(h.c.jobs) != 0 && tt.req.Parent == "") {
					t.Errorf("a refusal wrote %d batches, made %d jobs", len(h.batches), len(h.c.jobs))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			j := sub.Jobs[0]
			js := h.c.jobs[j.ID]
			if j.Cluster != tt.wantPeer || js.view().Cluster != tt.wantPeer {
				t.Fatalf("cluster %q (in memory %q), want %q", j.Cluster, js.view().Cluster, tt.wantPeer)
			}
			if tt.wantPeer == "" {
				if js.task == nil || js.federated() || (h.c.queue.Len() != 1 && !js.placed()) {
					t.Errorf("a job kept here is neither queued nor placed")
				}
				if !strings.Contains(j.Reason, tt.wantWait) || !strings.Contains(js.view().Reason, tt.wantWait) {
					t.Errorf("reason %q, want it to hold %q", j.Reason, tt.wantWait)
				}
				if len(h.storedHandles(j.ID)) != 0 {
					t.Errorf("a job kept here has a handle")
				}
				return
			}
			if h.c.queue.Len() != 0 {
				t.Errorf("a federated job is in the scheduler queue")
			}
			// The job and its handle are written in one batch.
			if len(h.batches) != 1 {
				t.Fatalf("%d batches, want the job and its handle in one", len(h.batches))
			}
			b := h.batches[0]
			if len(b.Jobs) != 1 || b.Jobs[0].ID != j.ID || b.Jobs[0].Cluster != tt.wantPeer {
				t.Fatalf("batch jobs %+v, want job %s with cluster %s", b.Jobs, j.ID, tt.wantPeer)
			}
			hd := h.lastHandle(j.ID)
			if hd.Incarnation != 1 || hd.Peer != tt.wantPeer || hd.RemoteID != j.ID || hd.Nonce == "" ||
				hd.State != berth.HandoffPending || hd.Sent {
				t.Errorf("handle %+v, want incarnation 1 to %s, pending, unsent, with a nonce", hd, tt.wantPeer)
			}
		})
	}
}

// TestArrayJobsAreEachHandedOff checks that each job of an array gets a
// handle of its own, with its own nonce.
func TestArrayJobsAreEachHandedOff(t *testing.T) {
	t.Parallel()
	h := newFederationHarness(t, &fakeFederation{peer: "b"})
	sub, err := h.admit(gpuJob(1, func(r *berth.SubmitRequest) { r.Array = 3 }))
	if err != nil {
		t.Fatal(err)
	}
	nonces := map[string]bool{}
	for _, j := range sub.Jobs {
		hd := h.lastHandle(j.ID)
		if j.Cluster != "b" || hd.Peer != "b" || nonces[hd.Nonce] {
			t.Errorf("job %s: cluster %q, handle %+v; want its own handle to b", j.ID, j.Cluster, hd)
		}
		nonces[hd.Nonce] = true
	}
	if len(nonces) != 3 || h.c.queue.Len() != 0 {
		t.Errorf("%d handles, %d queued; want 3 handles, none queued", len(nonces), h.c.queue.Len())
	}
}

// TestFederatedJobIsNeverScheduled pins a job a free worker here could
// run to a peer: no pass places it, and it is in no queue.
func TestFederatedJobIsNeverScheduled(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.c.SetFederation(&fakeFederation{states: map[string]berth.PeerState{"b": berth.PeerReady}})
	h.c.peers.byName = testPeers()
	js := h.handedOff(gpuJob(0, func(r *berth.SubmitRequest) { r.Cluster = "b" }))
	s := h.agent(workerReg())
	h.step(func() { h.c.dirty = true })
	h.housekeep(0)
	for _, m := range h.sent {
		if m.to == s && m.typ == wire.TypeJobAssign {
			t.Fatalf("a federated job was assigned: %+v", m.msg)
		}
	}
	if js.view().State != berth.JobPending || js.placed() || h.c.queue.Len() != 0 {
		t.Errorf("job %s state %s, placed %v, queue %d; want pending, unplaced, not queued", js.id, js.view().State, js.placed(), h.c.queue.Len())
	}
	// A job submitted after it runs: the worker is free.
	h.submit(nil, "true")
	h.lastSent(s, wire.TypeJobAssign)
}

// work returns what the federation manager is to send peer, as
// FederationWork does on the loop.
func (h *harness) work(peer string) *FederationWork {
	h.t.Helper()
	var w *FederationWork
	h.step(func() { w = h.c.work(peer) })
	return w
}

// cancel cancels js as Cancel does on the loop.
func (h *harness) cancel(js *jobState) {
	h.t.Helper()
	h.step(func() { h.c.stopJob(js, cancelRequestedBy("alice"), h.clock.Now().UTC()) })
}

// TestCancelBeforeSendIsNeverDelivered cancels a handed-off job before
// the manager ever took it: it ends at once, its handle cancelled, and
// nothing is ever sent for it.
func TestCancelBeforeSendIsNeverDelivered(t *testing.T) {
	t.Parallel()
	h := newFederationHarness(t, &fakeFederation{peer: "b"})
	js := h.handedOff(gpuJob(1, nil))
	h.cancel(js)
	if js.view().State != berth.JobCancelled || h.c.jobs[js.id] != nil {
		t.Fatalf("job %s, want cancelled at once", js.view().State)
	}
	if hd := h.lastHandle(js.id); hd.State != berth.HandoffCancelled || hd.Sent || hd.CancelVersion != 0 {
		t.Errorf("handle %+v, want cancelled, never sent, no cancel to send", hd)
	}
	if w := h.work("b"); len(w.Deliver)+len(w.Cancels) != 0 {
		t.Errorf("work after the cancel %+v, want nothing", w)
	}
	if len(h.c.origin.handles) != 0 {
		t.Errorf("handles kept %v, want none", h.c.origin.handles)
	}
	h.event(berth.EventJobCancelled, js.id)
}

// TestCancelAfterSendIsSentUntilAcked cancels a job delivered to its
// peer: it stays active, cancel requested, and the cancel is in every
// work until the peer acknowledges it; the job ends cancelled when the
// peer reports its end.
func TestCancelAfterSendIsSentUntilAcked(t *testing.T) {
	t.Parallel()
	h := newFederationHarness(t, &fakeFederation{peer: "b"})
	js := h.handedOff(gpuJob(1, nil))
	id := js.id
	w := h.work("b")
	if len(w.Deliver) != 1 || !w.Deliver[0].Handoff.Sent || w.Deliver[0].Spec.Command[0] != "train" || w.Active != 1 {
		t.Fatalf("work %+v, want the job's handoff, marked sent", w)
	}
	if hd := h.lastHandle(id); !hd.Sent {
		t.Fatalf("handle %+v not written sent before it is delivered", hd)
	}
	hd := *w.Deliver[0].Handoff
	hd.State, hd.RemoteJobID = berth.HandoffDone, "B-1"
	h.step(func() {
		if err := h.c.recordHandoff(&hd); err != nil {
			t.Fatal(err)
		}
	})
	if got := h.lastHandle(id); got.State != berth.HandoffDone || got.RemoteJobID != "B-1" {
		t.Fatalf("handle %+v, want handed off as B-1", got)
	}
	h.cancel(js)
	if js.view().State != berth.JobPending || !js.cancelRequested() || h.c.jobs[id] == nil {
		t.Fatalf("job %s %q, want active, cancel requested", js.view().State, js.view().Reason)
	}
	for range 2 { // sent again until acknowledged
		w = h.work("b")
		if len(w.Cancels) != 1 || w.Cancels[0].CancelVersion != 1 || len(w.Deliver) != 0 {
			t.Fatalf("work %+v, want the cancel (version 1) and no delivery", w)
		}
	}
	h.step(func() { h.c.recordCancelAck(id, 1, 1) })
	if w = h.work("b"); len(w.Cancels) != 0 {
		t.Fatalf("cancel sent after its ack: %+v", w)
	}
	if js.view().State != berth.JobPending {
		t.Fatalf("job %s after the ack, want it to wait for the peer's report", js.view().State)
	}
	h.step(func() {
		h.c.applyMirror(js, h.c.currentHandle(id), &berth.RemoteJob{RemoteID: id, JobID: "B-1", State: berth.JobCancelled,
			Reason: "cancelled by peer-a", Tombstone: true}, h.clock.Now().UTC())
	})
	if js.view().State != berth.JobCancelled || js.view().Reason != "cancelled by alice" {
		t.Errorf("job %s %q, want cancelled by alice", js.view().State, js.view().Reason)
	}
	if len(h.c.origin.handles) != 0 {
		t.Errorf("handles kept after the end %v", h.c.origin.handles)
	}
}

// TestCancelOfAnUnacknowledgedHandoffEndsAtTheAck: a job sent but never
// acknowledged (the peer may never have had it) ends cancelled when the
// peer acknowledges the cancel or answers it does not know the job.
func TestCancelOfAnUnacknowledgedHandoffEndsAtTheAck(t *testing.T) {
	t.Parallel()
	h := newFederationHarness(t, &fakeFederation{peer: "b"})
	js := h.handedOff(gpuJob(1, nil))
	h.work("b")
	h.cancel(js)
	if w := h.work("b"); len(w.Cancels) != 1 || len(w.Deliver) != 0 {
		t.Fatalf("work %+v, want the cancel only: a cancelled handoff is not sent again", w)
	}
	h.step(func() { h.c.recordCancelAck(js.id, 1, 1) })
	if js.view().State != berth.JobCancelled {
		t.Errorf("job %s, want cancelled at the ack", js.view().State)
	}
}

// TestRecordHandoffOutcomes: a final rejection fails the job with the
// peer's reason; a transient error only records it.
func TestRecordHandoffOutcomes(t *testing.T) {
	t.Parallel()
	h := newFederationHarness(t, &fakeFederation{peer: "b"})
	js := h.handedOff(gpuJob(1, nil))
	hd := *h.work("b").Deliver[0].Handoff
	hd.LastError = "dial tcp: connection refused"
	h.step(func() { _ = h.c.recordHandoff(&hd) })
	if got := h.lastHandle(js.id); got.State != berth.HandoffPending || got.LastError != hd.LastError || js.view().State != berth.JobPending {
		t.Fatalf("after a transient error: handle %+v, job %s; want pending with the error", got, js.view().State)
	}
	if w := h.work("b"); len(w.Deliver) != 1 {
		t.Fatalf("work %+v, want the handoff again", w)
	}
	hd.State, hd.LastError = berth.HandoffRejected, "queue: no queue \"x\""
	h.step(func() { _ = h.c.recordHandoff(&hd) })
	if js.view().State != berth.JobFailed || !strings.Contains(js.view().Reason, "rejected by peer b: queue") {
		t.Errorf("job %s %q, want failed, rejected by peer b", js.view().State, js.view().Reason)
	}
	if w := h.work("b"); len(w.Deliver)+len(w.Cancels) != 0 {
		t.Errorf("work after the rejection %+v, want none", w)
	}
}

// TestMarkingACancelledHandoffSentIsRefused: the manager marks a handle
// sent before it sends it; once cancelled it must not be sent.
func TestMarkingACancelledHandoffSentIsRefused(t *testing.T) {
	t.Parallel()
	h := newFederationHarness(t, &fakeFederation{peer: "b"})
	js := h.handedOff(gpuJob(1, nil))
	hd := h.lastHandle(js.id)
	h.cancel(js)
	hd.Sent = true
	var err error
	h.step(func() { err = h.c.recordHandoff(&hd) })
	if berth.ErrorCode(err) != berth.ECodeConflict {
		t.Errorf("marking a cancelled handle sent: %v, want a conflict", err)
	}
}

// deliver hands the job of js to its peer as the manager does: work,
// then the peer's acknowledgement with its id remote; it returns the
// handle as acknowledged.
func (h *harness) deliver(js *jobState, remote string) berth.Handoff {
	h.t.Helper()
	for _, d := range h.work(js.view().Cluster).Deliver {
		if d.Handoff.JobID != js.id {
			continue
		}
		hd := *d.Handoff
		hd.State, hd.RemoteJobID = berth.HandoffDone, remote
		h.step(func() {
			if err := h.c.recordHandoff(&hd); err != nil {
				h.t.Fatal(err)
			}
		})
		return hd
	}
	h.t.Fatalf("job %s not delivered", js.id)
	return berth.Handoff{}
}

// apply applies ch from peer as ApplyChanges does on the loop, and
// returns the batch it wrote.
func (h *harness) apply(peer string, ch *berth.FederationChanges) *store.Batch {
	h.t.Helper()
	n := len(h.batches)
	h.step(func() { h.c.applyChanges(peer, ch) })
	if len(h.batches) != n+1 {
		h.t.Fatalf("applying changes wrote %d batches, want 1", len(h.batches)-n)
	}
	return h.batches[n]
}

// TestApplyChangesMirrorsAndMovesTheCursorInOneBatch applies a peer's
// changes: the job runs, then ends, through the lifecycle (events,
// counters, waiters), each with the new cursor in the same batch.
func TestApplyChangesMirrorsAndMovesTheCursorInOneBatch(t *testing.T) {
	t.Parallel()
	h := newFederationHarness(t, &fakeFederation{peer: "b"})
	js := h.handedOff(gpuJob(1, nil))
	id := js.id
	hd := h.deliver(js, "B-7")
	started := h.clock.Now().Add(-time.Second).UTC()
	row := func(st berth.JobState, seq uint64) *berth.FederationChanges {
		rj := berth.RemoteJob{RemoteID: id, Nonce: hd.Nonce, JobID: "B-7", State: st, Attempts: 1, StartedAt: started}
		if st.Terminal() {
			code := 3
			rj.ExitCode, rj.Reason, rj.FinishedAt, rj.Tombstone = &code, "exit code 3", started.Add(time.Minute), true
		}
		return &berth.FederationChanges{Jobs: []berth.RemoteJob{rj}, From: h.c.origin.cursors["b"], // continues from the mirror's cursor
			Cursor: berth.ChangeCursor{Epoch: "e", Seq: seq, Tag: "t"}}
	}
	b := h.apply("b", row(berth.JobRunning, 2))
	if len(b.JobUpdates) != 1 || b.JobUpdates[0].State != berth.JobRunning || len(b.Federation.Cursors) != 1 || b.Federation.Cursors[0].Cursor.Seq != 2 {
		t.Fatalf("batch %+v / %+v, want the job running and the cursor at 2 together", b.JobUpdates, b.Federation)
	}
	if js.view().State != berth.JobRunning || !js.view().StartedAt.Equal(started) || h.counts()[berth.JobRunning] != 1 {
		t.Fatalf("job %s started %v, counts %v; want running", js.view().State, js.view().StartedAt, h.counts())
	}
	h.event(berth.EventJobRunning, id)
	b = h.apply("b", row(berth.JobFailed, 3))
	if len(b.JobUpdates) != 1 || b.JobUpdates[0].State != berth.JobFailed || b.Federation.Cursors[0].Cursor.Seq != 3 {
		t.Fatalf("batch %+v / %+v, want the job failed and the cursor at 3 together", b.JobUpdates, b.Federation)
	}
	if js.view().State != berth.JobFailed || *js.view().ExitCode != 3 || js.view().Reason != "exit code 3" || h.c.jobs[id] != nil {
		t.Errorf("job %+v, want failed with exit code 3, gone from memory", js.view())
	}
	h.event(berth.EventJobFailed, id)
	if h.c.origin.cursors["b"].Seq != 3 || len(h.c.origin.handles) != 0 {
		t.Errorf("cursor %+v, handles %v; want 3 and none", h.c.origin.cursors["b"], h.c.origin.handles)
	}
	// A row of another nonce (an older incarnation) moves nothing.
	js2 := h.handedOff(gpuJob(1, nil))
	h.deliver(js2, "B-8")
	h.apply("b", &berth.FederationChanges{Jobs: []berth.RemoteJob{{RemoteID: js2.id, Nonce: "other", State: berth.JobSucceeded}},
		Cursor: berth.ChangeCursor{Epoch: "e", Seq: 4, Tag: "t"}, From: h.c.origin.cursors["b"]})
	if js2.view().State != berth.JobPending {
		t.Errorf("a row of another nonce moved the job to %s", js2.view().State)
	}
}

// TestFullResyncLosesWhatThePeerNoLongerKnows: a full answer without a
// job handed off loses its handle, and the job, with a retry left, is
// routed again.
func TestFullResyncLosesWhatThePeerNoLongerKnows(t *testing.T) {
	t.Parallel()
	fed := &fakeFederation{peer: "b"}
	h := newFederationHarness(t, fed)
	js := h.handedOff(gpuJob(1, func(r *berth.SubmitRequest) { r.Retries = 1 }))
	h.deliver(js, "B-1")
	fed.peer = "c"
	h.apply("b", &berth.FederationChanges{Full: true, Cursor: berth.ChangeCursor{Epoch: "e2", Seq: 9, Tag: "t"}})
	hs := h.c.origin.handles[js.id]
	if len(hs) != 2 || hs[0].State != berth.HandoffLost || hs[1].Peer != "c" || js.view().Cluster != "c" {
		t.Fatalf("handles %+v, cluster %q; want the first lost and the job routed to c", hs, js.view().Cluster)
	}
	if !strings.Contains(hs[0].LastError, "no longer knows") {
		t.Errorf("lost handle's error %q", hs[0].LastError)
	}
}

// TestPeerLostRoutesAgainAndCancelsFirst loses a peer holding a job with
// a retry left: its handle is lost with a cancel intent, and the job, a
// new incarnation with a new nonce, goes to the peer routing picks now.
// When that is the lost peer, back, the old cancel comes first and the
// new handoff waits for its acknowledgement.
func TestPeerLostRoutesAgainAndCancelsFirst(t *testing.T) {
	t.Parallel()
	states := map[string]berth.PeerState{"b": berth.PeerReady}
	fed := &fakeFederation{peer: "b", states: states}
	h := newFederationHarness(t, fed)
	js := h.handedOff(gpuJob(1, func(r *berth.SubmitRequest) { r.Retries = 1 }))
	id := js.id
	first := h.deliver(js, "B-1")
	h.apply("b", &berth.FederationChanges{Jobs: []berth.RemoteJob{{RemoteID: id, Nonce: first.Nonce, JobID: "B-1", State: berth.JobRunning}},
		Cursor: berth.ChangeCursor{Epoch: "e", Seq: 1, Tag: "t"}})
	h.step(func() { h.c.peerLost("b") })
	lost := h.storedHandles(id)
	old := lost[len(lost)-2]
	second := lost[len(lost)-1]
	if old.Incarnation != 1 || old.State != berth.HandoffLost || old.CancelVersion != 1 {
		t.Fatalf("old handle %+v, want lost with a cancel intent", old)
	}
	if second.Incarnation != 2 || second.Nonce == first.Nonce || second.Peer != "b" || second.State != berth.HandoffPending {
		t.Fatalf("new handle %+v, want incarnation 2 to b with a new nonce", second)
	}
	if js.view().State != berth.JobPending || !strings.Contains(js.view().Reason, "lost: peer b unheard") {
		t.Errorf("job %s %q, want pending again, lost", js.view().State, js.view().Reason)
	}
	h.event(berth.EventJobRequeued, id)
	w := h.work("b")
	if len(w.Cancels) != 1 || w.Cancels[0].Incarnation != 1 || len(w.Deliver) != 0 {
		t.Fatalf("work %+v, want the old cancel and the new handoff held", w)
	}
	h.step(func() { h.c.recordCancelAck(id, 1, 1) })
	w = h.work("b")
	if len(w.Cancels) != 0 || len(w.Deliver) != 1 || w.Deliver[0].Handoff.Incarnation != 2 {
		t.Fatalf("work after the ack %+v, want the new handoff", w)
	}
	if js.view().State != berth.JobPending {
		t.Errorf("the old incarnation's cancel ack moved the job to %s", js.view().State)
	}
}

// TestPeerLostWithoutRetriesFails: a job with no retry left fails, lost;
// the peer is still told to cancel it.
func TestPeerLostWithoutRetriesFails(t *testing.T) {
	t.Parallel()
	h := newFederationHarness(t, &fakeFederation{peer: "b"})
	js := h.handedOff(gpuJob(1, nil))
	h.deliver(js, "B-1")
	h.step(func() { h.c.peerLost("b") })
	if js.view().State != berth.JobFailed || js.view().Reason != "lost: peer b unheard for 1h0m0s" {
		t.Fatalf("job %s %q, want failed, lost", js.view().State, js.view().Reason)
	}
	if w := h.work("b"); len(w.Cancels) != 1 || len(w.Deliver) != 0 {
		t.Errorf("work %+v, want the cancel only", w)
	}
}

// TestRouteWaitingHandsOffWhenAPeerFits: a job waiting here, which no
// worker here can run, is handed off once a peer fits it.
func TestRouteWaitingHandsOffWhenAPeerFits(t *testing.T) {
	t.Parallel()
	fed := &fakeFederation{why: "b: no GPU"}
	h := newFederationHarness(t, fed)
	sub, err := h.admit(gpuJob(1, nil))
	if err != nil {
		t.Fatal(err)
	}
	fits := h.submit(nil, "true") // one a worker here can run: stays
	id := sub.Jobs[0].ID
	h.step(h.c.routeWaiting)
	if h.c.jobs[id].federated() {
		t.Fatal("routed while no peer fits")
	}
	fed.peer = "b"
	h.step(h.c.routeWaiting)
	js := h.c.jobs[id]
	if !js.federated() || js.view().Cluster != "b" || h.lastHandle(id).Incarnation != 1 {
		t.Fatalf("job %+v, want handed to b", js.view())
	}
	if b := h.batches[len(h.batches)-1]; len(b.Federation.JobClusters) != 1 || b.Federation.JobClusters[0] != (store.JobCluster{JobID: id, Cluster: "b"}) {
		t.Errorf("stored cluster %+v, want b with the handle", b.Federation)
	}
	if f := h.c.jobs[fits.ID]; f != nil && f.federated() {
		t.Error("a job a worker here can run was routed")
	}
	if h.c.queue.Len() != 0 && js.task != nil && js.placed() {
		t.Error("the routed job is still queued")
	}
}

// TestCancelTreeWithFederatedChild cancels a local parent whose child was
// pinned to a peer and delivered: the child's cancel goes to the peer.
func TestCancelTreeWithFederatedChild(t *testing.T) {
	t.Parallel()
	h := newFederationHarness(t, &fakeFederation{states: map[string]berth.PeerState{"b": berth.PeerReady}})
	parent := h.submit(func(s *berth.JobSpec) { s.Resources.GPUs = 0; s.Command = berth.Argv{"sleep", "9"} }, "driver")
	kid := h.handedOff(gpuJob(0, func(r *berth.SubmitRequest) { r.Parent, r.Cluster = parent.ID, "b" }))
	h.deliver(kid, "B-1")
	h.cancel(h.c.jobs[parent.ID])
	if !kid.cancelRequested() || kid.view().State.Terminal() {
		t.Fatalf("child %s %q, want cancel requested on its peer", kid.view().State, kid.view().Reason)
	}
	if w := h.work("b"); len(w.Cancels) != 1 || w.Cancels[0].JobID != kid.id {
		t.Errorf("work %+v, want the child's cancel", w)
	}
}

// TestFederatedRunningJobCountsInQuota: a job running on a peer holds its
// user's max_jobs like a local one.
func TestFederatedRunningJobCountsInQuota(t *testing.T) {
	t.Parallel()
	h := newFederationHarness(t, &fakeFederation{peer: "b"})
	h.step(func() {
		q := berth.QuotaRule{Scope: berth.QuotaUser, Name: "alice", MaxJobs: 1}
		h.c.quotas[q.ID()] = &q
	})
	js := h.handedOff(gpuJob(1, func(r *berth.SubmitRequest) { r.User = "alice" }))
	hd := h.deliver(js, "B-1")
	h.apply("b", &berth.FederationChanges{Jobs: []berth.RemoteJob{{RemoteID: js.id, Nonce: hd.Nonce, JobID: "B-1", State: berth.JobRunning}},
		Cursor: berth.ChangeCursor{Epoch: "e", Seq: 1, Tag: "t"}})
	local := h.submit(func(s *berth.JobSpec) { s.User = "alice" }, "true")
	if l := h.c.jobs[local.ID]; l == nil || l.placed() {
		t.Fatal("alice's second job was placed while her job on the peer holds her one job")
	}
	h.event(berth.EventQuotaExceeded, local.ID)
	h.apply("b", &berth.FederationChanges{Jobs: []berth.RemoteJob{{RemoteID: js.id, Nonce: hd.Nonce, JobID: "B-1", State: berth.JobSucceeded}},
		Cursor: berth.ChangeCursor{Epoch: "e", Seq: 2, Tag: "t"}})
	if l := h.c.jobs[local.ID]; l == nil || !l.placed() {
		t.Error("alice's job not placed once her job on the peer ended")
	}
}

// startFederated starts a controller with fed on the SQLite store at
// path (startOn); stop stops it and closes the store.
func startFederated(t *testing.T, path string, fed Federation) (c *Controller, stop func()) {
	t.Helper()
	c, stop = startOn(t, path, time.Now())
	if err := c.do(t.Context(), func() { c.origin.f, c.peers.byName = fed, testPeers() }); err != nil { // as SetFederation before Start
		t.Fatal(err)
	}
	return c, stop
}

// TestFederationSurvivesARestart hands jobs to a peer on a real store,
// restarts, and finds them as they were: a job handed off stays
// federated and out of the queue, one not yet delivered is delivered, a
// job whose peer was lost and that now waits here is local (whatever its
// stored spec says) with its old handle's cancel still owed, the mirror's
// cursor is where it was, and a job's detail lists its handles.
func TestFederationSurvivesARestart(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "berth.db")
	fed := &fakeFederation{peer: "b", states: map[string]berth.PeerState{"b": berth.PeerReady}}
	c, stop := startFederated(t, path, fed)
	submit := func(retries int) string {
		spec := berth.DefaultJobSpec()
		spec.Command, spec.Resources.GPUs, spec.Retries = berth.Argv{"train"}, 1, retries
		jobs, err := c.Submit(ctx, &berth.SubmitRequest{JobSpec: spec})
		if err != nil {
			t.Fatal(err)
		}
		return jobs[0].ID
	}
	done, lostID := submit(0), submit(1)
	w, err := c.FederationWork(ctx, "b")
	if err != nil || len(w.Deliver) != 2 {
		t.Fatalf("work %+v, %v; want 2 deliveries", w, err)
	}
	for _, d := range w.Deliver {
		hd := *d.Handoff
		hd.State, hd.RemoteJobID = berth.HandoffDone, "B-"+hd.JobID
		if err := c.RecordHandoff(ctx, &hd); err != nil {
			t.Fatal(err)
		}
	}
	cursor := berth.ChangeCursor{Epoch: "e", Seq: 5, Tag: "abcd1234"}
	if err := c.ApplyChanges(ctx, "b", &berth.FederationChanges{Cursor: cursor}); err != nil {
		t.Fatal(err)
	}
	fed.peer, fed.why = "", "b: unreachable"
	if err := c.PeerLost(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	fed.peer, fed.why = "b", ""
	fresh := submit(0)
	for id, want := range map[string]string{done: "b", lostID: "", fresh: "b"} {
		if j, err := c.store.Job(ctx, id); err != nil || j.Cluster != want {
			t.Fatalf("stored job %s: cluster %q, %v; want %q", id, j.Cluster, err, want)
		}
	}
	stop()

	c, _ = startFederated(t, path, fed)
	var queued int
	states := map[string]string{}
	if err := c.do(ctx, func() {
		queued = c.queue.Len()
		for _, id := range []string{done, lostID, fresh} {
			if js := c.jobs[id]; js != nil {
				states[id] = fmt.Sprintf("%s/%s/%d", js.view().State, js.view().Cluster, js.incarnation())
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	// done failed (lost, no retry); lostID waits here; fresh is handed to b.
	want := map[string]string{lostID: "pending//1", fresh: "pending/b/1"}
	if fmt.Sprint(states) != fmt.Sprint(want) || queued != 1 {
		t.Fatalf("after the restart %v, %d queued; want %v, 1 queued (the job waiting here)", states, queued, want)
	}
	w, err = c.FederationWork(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Deliver) != 1 || w.Deliver[0].Handoff.JobID != fresh || w.Cursor != cursor || len(w.Cancels) != 2 {
		t.Fatalf("work after the restart %+v; want %s delivered, cursor %v, both lost handles' cancels", w, fresh, cursor)
	}
	d, err := c.Job(ctx, done)
	if err != nil || d.State != berth.JobFailed || len(d.Handoffs) != 1 || d.Handoffs[0].RemoteJobID != "B-"+done || d.Handoffs[0].State != berth.HandoffLost {
		t.Fatalf("detail %+v, %v; want failed with its lost handle", d, err)
	}
}

// TestPeerLostBeforeSendOwesNoCancel: a handle the manager never took is
// lost with its peer without a cancel to send; the job, with a retry
// left, waits here when no peer fits now.
func TestPeerLostBeforeSendOwesNoCancel(t *testing.T) {
	t.Parallel()
	fed := &fakeFederation{peer: "b"}
	h := newFederationHarness(t, fed)
	js := h.handedOff(gpuJob(1, func(r *berth.SubmitRequest) { r.Retries = 1 }))
	fed.peer, fed.why = "", "b: lost"
	h.step(func() { h.c.peerLost("b") })
	if hd := h.lastHandle(js.id); hd.State != berth.HandoffLost || hd.CancelVersion != 0 {
		t.Fatalf("handle %+v, want lost with no cancel", hd)
	}
	if js.federated() || js.view().State != berth.JobPending || !strings.Contains(js.view().Reason, "no peer fits: b: lost") {
		t.Fatalf("job cluster %q %s %q, want waiting here", js.view().Cluster, js.view().State, js.view().Reason)
	}
	if w := h.work("b"); len(w.Cancels)+len(w.Deliver) != 0 || len(h.c.origin.handles) != 0 {
		t.Errorf("work %+v, handles %v; want nothing owed", w, h.c.origin.handles)
	}
}

// TestApplyChangesEndsAWaitOnAStore mirrors a federated job to its end on
// a real store: a waiter on it returns, and the job's end and the
// cursor are stored together.
func TestApplyChangesEndsAWaitOnAStore(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "berth.db")
	c, stop := startFederated(t, path, &fakeFederation{peer: "b"})
	spec := berth.DefaultJobSpec()
	spec.Command, spec.Resources.GPUs = berth.Argv{"train"}, 1
	jobs, err := c.Submit(ctx, &berth.SubmitRequest{JobSpec: spec})
	if err != nil || jobs[0].Cluster != "b" {
		t.Fatalf("submit: %+v, %v; want handed to b", jobs, err)
	}
	id := jobs[0].ID
	w, err := c.FederationWork(ctx, "b")
	if err != nil || len(w.Deliver) != 1 {
		t.Fatalf("work %+v, %v", w, err)
	}
	waited := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		res, err := c.Wait(wctx, []string{id}, false, "")
		if err == nil && !res.Done {
			err = fmt.Errorf("wait result %+v, not done", res)
		}
		waited <- err
	}()
	code := 0
	end := berth.RemoteJob{RemoteID: id, Nonce: w.Deliver[0].Handoff.Nonce, JobID: "B-1", State: berth.JobSucceeded, ExitCode: &code,
		Attempts: 1, Tombstone: true}
	cursor := berth.ChangeCursor{Epoch: "e", Seq: 3, Tag: "t3"}
	if err := c.ApplyChanges(ctx, "b", &berth.FederationChanges{Full: true, Jobs: []berth.RemoteJob{end}, Cursor: cursor}); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Fatalf("wait on the federated job: %v", err)
	}
	stop()
	st, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	j, err := st.Job(ctx, id)
	if err != nil || j.State != berth.JobSucceeded || j.ExitCode == nil || *j.ExitCode != 0 || j.Attempts != 1 {
		t.Fatalf("stored job %+v, %v; want succeeded with exit code 0 after 1 attempt", j, err)
	}
	active, err := st.LoadActive(ctx, nil)
	if err != nil || len(active.Federation.Cursors) != 1 || active.Federation.Cursors[0].Cursor != cursor {
		t.Fatalf("stored cursors %+v, %v; want %v", active.Federation.Cursors, err, cursor)
	}
	hs, err := st.Handoffs(ctx, id)
	if err != nil || len(hs) != 1 || hs[0].State != berth.HandoffDone || hs[0].RemoteJobID != "B-1" {
		t.Errorf("stored handles %+v, %v; want handed off as B-1 (the mirror's row shows the delivery)", hs, err)
	}
}

// TestHandedOffBehindTheCursorResyncs records handoffs the peer
// acknowledged with a creation row: one the mirror's cursor may have
// passed (at or behind it, another epoch, or not named) resets the cursor
// to the zero cursor in the batch that records the handoff, so that the
// next pull is full; one ahead of it, or with the mirror at zero already,
// leaves the cursor; a repeat writes nothing.
func TestHandedOffBehindTheCursorResyncs(t *testing.T) {
	t.Parallel()
	at := berth.ChangeCursor{Epoch: "e", Seq: 5, Tag: "t5"}
	tests := []struct {
		name    string
		cursor  berth.ChangeCursor // the mirror's before
		created berth.ChangeCursor
		reset   bool
	}{
		{name: "behind the cursor", cursor: at, created: berth.ChangeCursor{Epoch: "e", Seq: 3, Tag: "t3"}, reset: true},
		{name: "at the cursor", cursor: at, created: at, reset: true},
		{name: "another epoch", cursor: at, created: berth.ChangeCursor{Epoch: "f", Seq: 9, Tag: "t9"}, reset: true},
		{name: "not named", cursor: at, reset: true},
		{name: "ahead of the cursor", cursor: at, created: berth.ChangeCursor{Epoch: "e", Seq: 6, Tag: "t6"}},
		{name: "full already", created: berth.ChangeCursor{Epoch: "e", Seq: 3, Tag: "t3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newFederationHarness(t, &fakeFederation{peer: "b"})
			js := h.handedOff(gpuJob(1, nil))
			if tt.cursor != (berth.ChangeCursor{}) {
				h.apply("b", &berth.FederationChanges{Full: true, Cursor: tt.cursor})
			}
			hd := *h.work("b").Deliver[0].Handoff
			hd.State, hd.RemoteJobID, hd.CreateRow = berth.HandoffDone, "B-1", tt.created
			record := func() *store.Batch {
				n := len(h.batches)
				h.step(func() {
					if err := h.c.recordHandoff(&hd); err != nil {
						t.Fatal(err)
					}
				})
				if len(h.batches) > n+1 {
					t.Fatalf("recording the handoff wrote %d batches, want at most 1", len(h.batches)-n)
				}
				if len(h.batches) == n {
					return nil
				}
				return h.batches[n]
			}
			b := record()
			if b == nil || b.Federation == nil || len(b.Federation.Handoffs) != 1 || b.Federation.Handoffs[0].State != berth.HandoffDone {
				t.Fatalf("batch %+v, want the handle handed off", b)
			}
			want := tt.cursor
			if tt.reset {
				want = berth.ChangeCursor{}
				if cs := b.Federation.Cursors; len(cs) != 1 || cs[0] != (store.PeerCursor{Peer: "b"}) {
					t.Errorf("cursors written %+v, want b's reset to zero with the handle", cs)
				}
			} else if len(b.Federation.Cursors) != 0 {
				t.Errorf("cursors written %+v, want none", b.Federation.Cursors)
			}
			if got := h.work("b").Cursor; got != want {
				t.Errorf("cursor for the next pull %+v, want %+v", got, want)
			}
			if js.view().State != berth.JobPending || !strings.Contains(js.view().Reason, "handed off to peer b") {
				t.Errorf("job %s %q, want pending, handed off", js.view().State, js.view().Reason)
			}
			h.apply("b", &berth.FederationChanges{Full: true, Cursor: at}) // the mirror moves on
			if b := record(); b != nil && !b.Federation.Empty() {
				t.Errorf("a repeat of the recording wrote %+v", b.Federation)
			}
			if got := h.work("b").Cursor; got != at {
				t.Errorf("cursor after a repeat %+v, want %+v", got, at)
			}
		})
	}
}

// TestAnEndedJobStaysEndedOnAFullAnswer: a job whose end was mirrored
// from its peer is no handle the peer's answers can lose: a full answer
// without it (the peer pruned its tombstone, or was restored from an
// older backup) leaves it as it ended, with a retry left and after a
// restart alike, and routes nothing again.
func TestAnEndedJobStaysEndedOnAFullAnswer(t *testing.T) {
	t.Parallel()
	fed := &fakeFederation{peer: "b"}
	h := newFederationHarness(t, fed)
	js := h.handedOff(gpuJob(1, func(r *berth.SubmitRequest) { r.Retries = 1 }))
	id := js.id
	hd := h.deliver(js, "B-1")
	code := 0
	h.apply("b", &berth.FederationChanges{Jobs: []berth.RemoteJob{{RemoteID: id, Nonce: hd.Nonce, JobID: "B-1", State: berth.JobSucceeded,
		ExitCode: &code, Attempts: 1, Tombstone: true}}, Cursor: berth.ChangeCursor{Epoch: "e", Seq: 2, Tag: "t"}})
	if js.view().State != berth.JobSucceeded {
		t.Fatalf("job %s, want succeeded as its peer reports", js.view().State)
	}
	events, routed := len(h.events), fed.routed
	fed.peer = "c"
	b := h.apply("b", &berth.FederationChanges{Full: true, Cursor: berth.ChangeCursor{Epoch: "e2", Seq: 1, Tag: "t"}})
	if len(b.JobUpdates) != 0 || len(b.Federation.Handoffs)+len(b.Federation.JobClusters) != 0 || len(h.events) != events || fed.routed != routed {
		t.Errorf("a full answer without the ended job wrote %+v / %+v, events %v; want the cursor only", b.JobUpdates, b.Federation, h.events[events:])
	}
	if js.view().State != berth.JobSucceeded || js.view().Cluster != "b" || h.c.jobs[id] != nil || len(h.c.origin.handles) != 0 {
		t.Errorf("job %s on %q, handles %v; want it succeeded on b, nothing held", js.view().State, js.view().Cluster, h.c.origin.handles)
	}

	// On a store, across a restart.
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "berth.db")
	fed = &fakeFederation{peer: "b"}
	c, stop := startFederated(t, path, fed)
	spec := berth.DefaultJobSpec()
	spec.Command, spec.Resources.GPUs, spec.Retries = berth.Argv{"train"}, 1, 1
	done := deliverOnStore(t, c, spec)
	id = done.JobID
	end := berth.RemoteJob{RemoteID: id, Nonce: done.Nonce, JobID: "B-1", State: berth.JobSucceeded, ExitCode: &code, Attempts: 1, Tombstone: true}
	if err := c.ApplyChanges(ctx, "b", &berth.FederationChanges{Jobs: []berth.RemoteJob{end}, Cursor: berth.ChangeCursor{Epoch: "e", Seq: 2, Tag: "t"}}); err != nil {
		t.Fatal(err)
	}
	stop()
	fed.peer, fed.routed = "c", 0
	c, _ = startFederated(t, path, fed)
	if err := c.ApplyChanges(ctx, "b", &berth.FederationChanges{Full: true, Cursor: berth.ChangeCursor{Epoch: "e2", Seq: 1, Tag: "t"}}); err != nil {
		t.Fatal(err)
	}
	d, err := c.Job(ctx, id)
	if err != nil || d.State != berth.JobSucceeded || d.Cluster != "b" || len(d.Handoffs) != 1 || d.Handoffs[0].State != berth.HandoffDone {
		t.Fatalf("after a restart and a full answer without it: %+v, %v; want succeeded on b with its one handle handed off", d, err)
	}
	if w, err := c.FederationWork(ctx, "c"); err != nil || len(w.Deliver)+len(w.Cancels) != 0 || fed.routed != 0 {
		t.Errorf("work for c %+v, %v, %d routes; want nothing routed again", w, err, fed.routed)
	}
}

// TestPinSurvivesARestart pins a job to peer b, restarts, and loses b:
// the job, with a retry left, is handed to b again, pinned still, though
// routing would pick another peer; after another restart its handles
// show both incarnations pinned to b.
func TestPinSurvivesARestart(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "berth.db")
	fed := &fakeFederation{peer: "c", states: map[string]berth.PeerState{"b": berth.PeerReady, "c": berth.PeerReady}}
	c, stop := startFederated(t, path, fed)
	spec := berth.DefaultJobSpec()
	spec.Command, spec.Resources.GPUs, spec.Retries, spec.Cluster = berth.Argv{"train"}, 1, 1, "b"
	hd := deliverOnStore(t, c, spec)
	if !hd.Pinned {
		t.Fatalf("handle %+v, want pinned", hd)
	}
	id := hd.JobID
	stop()

	c, stop = startFederated(t, path, fed)
	if err := c.PeerLost(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	var cluster string
	if err := c.do(ctx, func() { cluster = c.jobs[id].view().Cluster }); err != nil {
		t.Fatal(err)
	}
	if cluster != "b" || fed.routed != 0 {
		t.Fatalf("after the restart and b lost: cluster %q, %d routes; want handed to b again, not routed", cluster, fed.routed)
	}
	stop()

	c, _ = startFederated(t, path, fed)
	d, err := c.Job(ctx, id)
	if err != nil || len(d.Handoffs) != 2 {
		t.Fatalf("detail %+v, %v; want two handles", d, err)
	}
	for i, h := range d.Handoffs {
		if h.Incarnation != i+1 || h.Peer != "b" || !h.Pinned {
			t.Errorf("handle %+v, want incarnation %d pinned to b", h, i+1)
		}
	}
	if d.Cluster != "b" || d.Handoffs[0].State != berth.HandoffLost || d.Handoffs[1].State != berth.HandoffPending {
		t.Errorf("job on %q, handles %s then %s; want on b, the first lost, the second pending", d.Cluster, d.Handoffs[0].State, d.Handoffs[1].State)
	}
}

// deliverOnStore submits spec, whose one job c hands to peer b, and
// delivers it as the manager does (FederationWork, then the peer's
// acknowledgement, its job B-1); it returns the handle as acknowledged.
func deliverOnStore(t *testing.T, c *Controller, spec berth.JobSpec) berth.Handoff {
	t.Helper()
	ctx := t.Context()
	jobs, err := c.Submit(ctx, &berth.SubmitRequest{JobSpec: spec})
	if err != nil || jobs[0].Cluster != "b" {
		t.Fatalf("submit: %+v, %v; want handed to b", jobs, err)
	}
	w, err := c.FederationWork(ctx, "b")
	if err != nil || len(w.Deliver) != 1 {
		t.Fatalf("work %+v, %v; want the one delivery", w, err)
	}
	hd := *w.Deliver[0].Handoff
	hd.State, hd.RemoteJobID = berth.HandoffDone, "B-1"
	if err := c.RecordHandoff(ctx, &hd); err != nil {
		t.Fatal(err)
	}
	return hd
}

// TestWorkOwedKicksThePeerOnceDurable: a handoff made at submit, and a
// cancel to send, each kick the manager for the peer, after the batch
// that writes it is committed, not before.
func TestWorkOwedKicksThePeerOnceDurable(t *testing.T) {
	t.Parallel()
	fed := &fakeFederation{peer: "b"}
	h := newFederationHarness(t, fed)
	req := gpuJob(1, nil)
	if err := req.Validate(); err != nil {
		t.Fatal(err)
	}
	var sub *Submission
	h.step(func() {
		var err error
		if sub, err = h.c.admit(req, "test"); err != nil {
			t.Fatal(err)
		}
		if k := fed.kicks(); len(k) != 0 {
			t.Fatalf("kicked %q before the handoff's batch was committed", k)
		}
	})
	if k := fed.kicks(); !slices.Equal(k, []string{"b"}) {
		t.Fatalf("kicks after the submission's batch: %q, want [b]", k)
	}
	js := h.c.jobs[sub.Jobs[0].ID]
	if w := h.work("b"); len(w.Deliver) != 1 {
		t.Fatalf("work %+v, want the handoff", w)
	}
	h.cancel(js)
	if k := fed.kicks(); !slices.Equal(k, []string{"b", "b"}) {
		t.Fatalf("kicks after a cancel of a sent handoff: %q, want [b b]", k)
	}
}

// TestAnAnswerFromAResetCursorKeepsTheReset applies an incremental answer
// that continues from the cursor the mirror held before a handoff's
// recording reset it (recordHandoff): its rows are applied, but the reset
// stays, so that the next pull is a full resync.
func TestAnAnswerFromAResetCursorKeepsTheReset(t *testing.T) {
	t.Parallel()
	h := newFederationHarness(t, &fakeFederation{peer: "b"})
	js := h.handedOff(gpuJob(1, nil))
	at := berth.ChangeCursor{Epoch: "e", Seq: 5, Tag: "t5"}
	h.apply("b", &berth.FederationChanges{Full: true, Cursor: at})
	hd := *h.work("b").Deliver[0].Handoff
	hd.State, hd.RemoteJobID, hd.CreateRow = berth.HandoffDone, "B-1", berth.ChangeCursor{Epoch: "e", Seq: 3, Tag: "t3"}
	h.step(func() {
		if err := h.c.recordHandoff(&hd); err != nil {
			t.Fatal(err)
		}
	})
	if got := h.work("b").Cursor; got != (berth.ChangeCursor{}) {
		t.Fatalf("cursor after the recording %+v, want reset", got)
	}
	rj := berth.RemoteJob{RemoteID: js.id, Nonce: hd.Nonce, JobID: "B-1", State: berth.JobRunning, Attempts: 1}
	b := h.apply("b", &berth.FederationChanges{Jobs: []berth.RemoteJob{rj}, From: at,
		Cursor: berth.ChangeCursor{Epoch: "e", Seq: 6, Tag: "t6"}})
	if js.view().State != berth.JobRunning {
		t.Errorf("job %s, want running: the answer's rows are applied", js.view().State)
	}
	if b.Federation != nil && len(b.Federation.Cursors) != 0 {
		t.Errorf("cursors written %+v, want none", b.Federation.Cursors)
	}
	if got := h.work("b").Cursor; got != (berth.ChangeCursor{}) {
		t.Errorf("cursor for the next pull %+v, want still reset", got)
	}
	h.apply("b", &berth.FederationChanges{Full: true, Jobs: []berth.RemoteJob{rj}, Cursor: berth.ChangeCursor{Epoch: "e", Seq: 6, Tag: "t6"}})
	if got := h.work("b").Cursor; got.Seq != 6 {
		t.Errorf("cursor after a full answer %+v, want at 6", got)
	}
}
