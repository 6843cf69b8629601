package federation_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/devca"
	"github.com/berth-dev/berth/federation"
	"github.com/berth-dev/berth/internal/fakeclock"
)

// fakePeer answers the peer protocol as docs/federation.md says, from
// memory: handoffs deduplicated on (remote id, nonce), cancels of unknown
// jobs 404, changes from a list of pages, capacity as set. down makes it
// drop every connection unanswered; fail, when set, answers a handoff
// with that status and error code instead.
type fakePeer struct {
	url   string
	token string

	mu        sync.Mutex
	down      bool
	fail      [2]any // status, code
	capacity  berth.PeerCapacity
	jobs      map[string]string // remote id + nonce → job id
	pages     map[string]berth.FederationChanges
	requests  []string
	cancelled []string
}

func newFakePeer(t *testing.T, tlsServer bool) (*fakePeer, *httptest.Server) {
	t.Helper()
	p := &fakePeer{token: "peer-secret", jobs: map[string]string{}, pages: map[string]berth.FederationChanges{},
		capacity: berth.PeerCapacity{Workers: []berth.PeerWorker{{FreeGPUs: 1, CPUs: 4}}}}
	h := http.HandlerFunc(p.serve)
	var hs *httptest.Server
	if tlsServer {
		hs = httptest.NewTLSServer(h)
	} else {
		hs = httptest.NewServer(h)
	}
	t.Cleanup(hs.Close)
	p.url = hs.URL
	return p, hs
}

func (p *fakePeer) set(f func(p *fakePeer)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f(p)
}

func (p *fakePeer) log() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.requests)
}

func answer(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func refuse(w http.ResponseWriter, status int, code, msg string) {
	answer(w, status, berth.ErrorBody{Error: &berth.Error{Code: code, Message: msg}})
}

func (p *fakePeer) serve(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down {
		conn, _, _ := http.NewResponseController(w).Hijack()
		_ = conn.Close()
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+p.token {
		refuse(w, 401, berth.ECodeUnauthorized, "no such token")
		return
	}
	switch r.Method + " " + r.URL.Path {
	case "GET /api/v1/federation/capacity":
		p.requests = append(p.requests, "capacity")
		answer(w, 200, p.capacity)
	case "POST /api/v1/federation/handoffs":
		var req berth.HandoffRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		p.requests = append(p.requests, "handoff "+req.RemoteID)
		if p.fail[0] != nil {
			refuse(w, p.fail[0].(int), p.fail[1].(string), "refused "+req.RemoteID)
			return
		}
		key := req.RemoteID + "/" + req.Nonce
		id, dup := p.jobs[key]
		if !dup {
			id = fmt.Sprintf("b-%d", len(p.jobs)+1)
			p.jobs[key] = id
		}
		answer(w, map[bool]int{false: 201, true: 200}[dup], berth.HandoffResponse{JobID: id, State: berth.JobPending, Duplicate: dup})
	case "POST /api/v1/federation/cancels":
		var req berth.FederationCancel
		_ = json.NewDecoder(r.Body).Decode(&req)
		p.requests = append(p.requests, "cancel "+req.RemoteID)
		if _, ok := p.jobs[req.RemoteID+"/"+req.Nonce]; !ok {
			refuse(w, 404, berth.ECodeNotFound, "no such job")
			return
		}
		p.cancelled = append(p.cancelled, req.RemoteID)
		answer(w, 200, berth.FederationCancelResponse{Version: req.Version, State: berth.JobCancelled})
	case "GET /api/v1/federation/changes":
		c := r.URL.Query().Get("cursor")
		p.requests = append(p.requests, "changes "+c)
		page, ok := p.pages[c]
		if !ok {
			page = berth.FederationChanges{Cursor: berth.ChangeCursor{Epoch: "e", Seq: 0}}
			if c != "" {
				ok := strings.Split(c, ".")
				page.Cursor = berth.ChangeCursor{Epoch: ok[0], Tag: ok[2]}
				_, _ = fmt.Sscan(ok[1], &page.Cursor.Seq)
			}
		}
		answer(w, 200, page)
	case "GET /api/v1/jobs/b-1/logs":
		p.requests = append(p.requests, "logs "+r.URL.RawQuery)
		fmt.Fprint(w, "output of b-1\n")
	default:
		refuse(w, 404, berth.ECodeNotFound, "no such endpoint")
	}
}

// fakeOrigin is the origin's controller as the manager sees it: handles
// in memory, and a record of every call.
type fakeOrigin struct {
	mu       sync.Mutex
	changed  chan struct{}
	peers    []*berth.Peer
	handles  map[string]*berth.Handoff // job id → its handle
	specs    map[string]berth.JobSpec
	cursor   berth.ChangeCursor
	applied  []*berth.FederationChanges
	acks     []string
	lost     []string
	routed   int
	recorded []berth.Handoff
}

func newFakeOrigin(peers ...*berth.Peer) *fakeOrigin {
	return &fakeOrigin{peers: peers, handles: map[string]*berth.Handoff{}, specs: map[string]berth.JobSpec{}}
}

func (o *fakeOrigin) Peers(context.Context) ([]*berth.Peer, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.peers), nil
}

func (o *fakeOrigin) PeersChanged() <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.changed == nil {
		o.changed = make(chan struct{})
	}
	return o.changed
}

// setPeers replaces the peers and tells PeersChanged.
func (o *fakeOrigin) setPeers(peers ...*berth.Peer) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.peers = peers
	if o.changed != nil {
		close(o.changed)
		o.changed = nil
	}
}

func (o *fakeOrigin) FederationWork(_ context.Context, peer string) (*federation.Work, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	w := &federation.Work{Cursor: o.cursor}
	ids := make([]string, 0, len(o.handles))
	for id := range o.handles {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		h := o.handles[id]
		if h.Peer != peer {
			continue
		}
		c := *h
		switch {
		case h.Sent && h.CancelAcked < h.CancelVersion:
			w.Cancels = append(w.Cancels, &c)
		case h.State == berth.HandoffPending && h.CancelVersion == 0:
			h.Sent = true // durably, before the manager sends it
			c.Sent = true
			w.Deliver = append(w.Deliver, federation.Delivery{Handoff: &c, Spec: o.specs[id]})
		}
		if h.State == berth.HandoffDone {
			w.Active++
		}
	}
	return w, nil
}

func (o *fakeOrigin) RecordHandoff(_ context.Context, h *berth.Handoff) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	c := *h
	o.handles[h.JobID] = &c
	o.recorded = append(o.recorded, c)
	return nil
}

func (o *fakeOrigin) RecordCancelAck(_ context.Context, jobID string, incarnation, version int) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.acks = append(o.acks, fmt.Sprintf("%s/%d v%d", jobID, incarnation, version))
	o.handles[jobID].CancelAcked = version
	return nil
}

func (o *fakeOrigin) ApplyChanges(_ context.Context, _ string, ch *berth.FederationChanges) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.applied = append(o.applied, ch)
	o.cursor = ch.Cursor
	return nil
}

func (o *fakeOrigin) PeerLost(_ context.Context, peer string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.lost = append(o.lost, peer)
	return nil
}

func (o *fakeOrigin) RouteWaiting(context.Context) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.routed++
	return nil
}

// add hands job id to peer: a handle pending, not yet sent.
func (o *fakeOrigin) add(id, peer string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.handles[id] = &berth.Handoff{JobID: id, Incarnation: 1, Peer: peer, RemoteID: id, Nonce: "n-" + id, State: berth.HandoffPending}
	o.specs[id] = berth.JobSpec{Command: []string{"true"}}
}

func (o *fakeOrigin) handle(id string) berth.Handoff {
	o.mu.Lock()
	defer o.mu.Unlock()
	return *o.handles[id]
}

func (o *fakeOrigin) calls() (routed int, lost []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.routed, slices.Clone(o.lost)
}

type rig struct {
	peer   *fakePeer
	origin *fakeOrigin
	clock  *fakeclock.Clock
	m      *federation.Manager
}

// newRig is a manager with one peer "b" (route timeout 1m, lost timeout
// 1h) on a fake clock; the test drives its ticks.
func newRig(t *testing.T) *rig {
	t.Helper()
	p, _ := newFakePeer(t, false)
	def := &berth.Peer{Name: "b", URL: p.url, SealedToken: []byte("sealed"),
		RouteTimeout: berth.Duration(time.Minute), LostTimeout: berth.Duration(time.Hour)}
	o := newFakeOrigin(def)
	clock := fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	m := federation.NewManager(federation.Config{Origin: o, Now: clock.Now, RequestTimeout: 5 * time.Second,
		Token: func(p *berth.Peer) (string, error) {
			if string(p.SealedToken) != "sealed" {
				return "", fmt.Errorf("does not open")
			}
			return "peer-secret", nil
		}})
	return &rig{peer: p, origin: o, clock: clock, m: m}
}

func (r *rig) wantState(t *testing.T, want berth.PeerState) {
	t.Helper()
	got, ok := r.m.PeerState("b")
	if !ok || got != want {
		t.Fatalf("PeerState(b) = %q, %v; want %q", got, ok, want)
	}
	if s := r.m.Status("b"); s.State != want {
		t.Fatalf("Status(b).State = %q, want %q", s.State, want)
	}
}

// TestManagerPeerStates walks a peer through new, ready, unreachable,
// lost and back to ready, and checks that routing is told when its
// capability changes and the origin once when it is lost.
func TestManagerPeerStates(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx := t.Context()
	if _, ok := r.m.PeerState("b"); ok {
		t.Fatal("a peer never visited has a state")
	}
	r.peer.set(func(p *fakePeer) { p.down = true })
	r.m.Tick(ctx)
	r.wantState(t, berth.PeerNew)
	if s := r.m.Status("b"); s.LastError == "" || !s.LastContact.IsZero() {
		t.Fatalf("status of a peer that never answered: %+v", s)
	}

	r.peer.set(func(p *fakePeer) { p.down = false })
	r.m.Tick(ctx)
	r.wantState(t, berth.PeerReady)
	s := r.m.Status("b")
	if s.LastError != "" || !s.LastContact.Equal(r.clock.Now()) || s.Capacity == nil || s.Capacity.Workers[0].FreeGPUs != 1 {
		t.Fatalf("status of a peer that answered: %+v", s)
	}
	if routed, _ := r.origin.calls(); routed != 1 {
		t.Fatalf("RouteWaiting called %d times after the first heartbeat, want 1", routed)
	}
	r.clock.Advance(time.Second)
	r.m.Tick(ctx)
	if routed, _ := r.origin.calls(); routed != 1 {
		t.Fatalf("RouteWaiting called again (%d) for an unchanged heartbeat", routed)
	}
	r.peer.set(func(p *fakePeer) { p.capacity.Workers[0].FreeGPUs = 0 })
	r.m.Tick(ctx)
	if routed, _ := r.origin.calls(); routed != 2 {
		t.Fatalf("RouteWaiting called %d times after the heartbeat changed, want 2", routed)
	}

	heard := r.clock.Now()
	r.peer.set(func(p *fakePeer) { p.down = true })
	r.clock.Advance(time.Minute)
	r.m.Tick(ctx)
	r.wantState(t, berth.PeerReady) // unheard for exactly its route timeout
	r.clock.Advance(time.Second)
	r.m.Tick(ctx)
	r.wantState(t, berth.PeerUnreachable)
	if s := r.m.Status("b"); !s.LastContact.Equal(heard) || !strings.Contains(s.LastError, "capacity") {
		t.Fatalf("status of an unreachable peer: %+v", s)
	}
	if _, lost := r.origin.calls(); len(lost) != 0 {
		t.Fatalf("PeerLost called for an unreachable peer: %v", lost)
	}
	r.clock.Advance(time.Hour)
	r.m.Tick(ctx)
	r.wantState(t, berth.PeerLost)
	r.clock.Advance(time.Minute)
	r.m.Tick(ctx)
	if _, lost := r.origin.calls(); !slices.Equal(lost, []string{"b"}) {
		t.Fatalf("PeerLost calls %v, want one for b", lost)
	}

	r.peer.set(func(p *fakePeer) { p.down = false })
	r.m.Tick(ctx)
	r.wantState(t, berth.PeerReady)
	if routed, _ := r.origin.calls(); routed != 3 {
		t.Fatalf("RouteWaiting called %d times once the peer was back, want 3", routed)
	}
	r.peer.set(func(p *fakePeer) { p.down = true })
	r.clock.Advance(2 * time.Hour)
	r.m.Tick(ctx)
	if _, lost := r.origin.calls(); len(lost) != 2 {
		t.Fatalf("PeerLost calls %v, want a second once lost again", lost)
	}
}

// TestManagerNeverHeardPeer checks that a peer that never answers goes
// unreachable and then lost on its timeouts, from when it was first
// watched.
func TestManagerNeverHeardPeer(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx := t.Context()
	r.peer.set(func(p *fakePeer) { p.down = true })
	r.m.Tick(ctx)
	r.clock.Advance(time.Minute + time.Second)
	r.m.Tick(ctx)
	r.wantState(t, berth.PeerUnreachable)
	r.clock.Advance(time.Hour)
	r.m.Tick(ctx)
	r.wantState(t, berth.PeerLost)
	if _, lost := r.origin.calls(); !slices.Equal(lost, []string{"b"}) {
		t.Fatalf("PeerLost calls %v", lost)
	}
}

// TestManagerDeliversCancelsThenHandoffs checks one tick's order and
// records: the heartbeat, the cancels owed, then the handoffs (each
// recorded sent before it is sent, then handed off with the peer's id, or
// rejected when the peer refuses it finally), then the changes.
func TestManagerDeliversCancelsThenHandoffs(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx := t.Context()
	r.origin.add("j1", "b")
	r.origin.add("j2", "b")
	r.m.Tick(ctx)
	for _, id := range []string{"j1", "j2"} {
		if h := r.origin.handle(id); h.State != berth.HandoffDone || h.RemoteJobID == "" || !h.Sent || h.LastError != "" {
			t.Fatalf("handle of %s after the tick: %+v", id, h)
		}
	}
	// Deliveries run in parallel, so the peer numbers them in either order.
	var jobs, remotes []string
	for _, h := range r.origin.recorded {
		jobs = append(jobs, h.JobID)
		remotes = append(remotes, h.RemoteJobID)
	}
	slices.Sort(jobs)
	slices.Sort(remotes)
	if !slices.Equal(jobs, []string{"j1", "j2"}) || !slices.Equal(remotes, []string{"b-1", "b-2"}) {
		t.Fatalf("records: %+v; want each handle recorded once, handed off", r.origin.recorded)
	}
	if s := r.m.Status("b"); s.ActiveJobs != 0 {
		t.Fatalf("active jobs %d before the work was read again", s.ActiveJobs)
	}

	// j1 is cancelled (sent: the peer is told); j3 is cancelled before it
	// was ever sent (never told); j4 is refused by a quota rule.
	r.origin.mu.Lock()
	r.origin.handles["j1"].CancelVersion = 2
	r.origin.mu.Unlock()
	r.origin.add("j3", "b")
	r.origin.mu.Lock()
	r.origin.handles["j3"].CancelVersion = 1
	r.origin.mu.Unlock()
	r.origin.add("j4", "b")
	r.peer.set(func(p *fakePeer) { p.requests = nil; p.fail = [2]any{409, berth.ECodeConflict} })
	r.m.Tick(ctx)
	want := []string{"capacity", "cancel j1", "handoff j4", "changes e.0."}
	if got := r.peer.log(); !slices.Equal(got, want) {
		t.Fatalf("requests %q, want %q", got, want)
	}
	if !slices.Equal(r.origin.acks, []string{"j1/1 v2"}) {
		t.Fatalf("cancel acks %v", r.origin.acks)
	}
	if h := r.origin.handle("j4"); h.State != berth.HandoffRejected || !strings.Contains(h.LastError, "refused j4") {
		t.Fatalf("handle refused by a quota rule: %+v", h)
	}
	if s := r.m.Status("b"); s.ActiveJobs != 2 {
		t.Fatalf("active jobs %d, want 2", s.ActiveJobs)
	}

	// A cancel of a job the peer never received (404) satisfies it.
	r.origin.mu.Lock()
	r.origin.handles["j5"] = &berth.Handoff{JobID: "j5", Incarnation: 2, Peer: "b", RemoteID: "j5", Nonce: "gone",
		State: berth.HandoffDone, Sent: true, CancelVersion: 1}
	r.origin.mu.Unlock()
	r.m.Tick(ctx)
	if !slices.Contains(r.origin.acks, "j5/2 v1") {
		t.Fatalf("cancel acks %v, want j5's satisfied by a 404", r.origin.acks)
	}
}

// TestManagerRetriesWithBackoff checks that a handoff the peer fails for a
// reason that may pass records its error once, is sent again after a
// doubling wait, and is handed off once the peer takes it.
func TestManagerRetriesWithBackoff(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx := t.Context()
	r.origin.add("j1", "b")
	r.peer.set(func(p *fakePeer) { p.fail = [2]any{503, berth.ECodeUnavailable} })
	sends := func() int {
		n := 0
		for _, q := range r.peer.log() {
			if q == "handoff j1" {
				n++
			}
		}
		return n
	}
	r.m.Tick(ctx)
	if h := r.origin.handle("j1"); h.State != berth.HandoffPending || !strings.Contains(h.LastError, "refused j1") {
		t.Fatalf("handle after a 503: %+v", h)
	}
	records := len(r.origin.recorded)
	steps := []struct {
		advance time.Duration
		sends   int
	}{
		{0, 1},               // backoff 1s not passed
		{time.Second, 2},     // second failure: next in 2s
		{time.Second, 2},     // not yet
		{time.Second, 3},     // third: next in 4s
		{3 * time.Second, 3}, // not yet
		{time.Second, 4},     // fourth
		{time.Hour, 5},       // at most MaxHandoffBackoff
		{federation.MaxHandoffBackoff, 6},
	}
	for i, s := range steps {
		r.clock.Advance(s.advance)
		r.m.Tick(ctx)
		if got := sends(); got != s.sends {
			t.Fatalf("step %d: %d sends, want %d", i, got, s.sends)
		}
	}
	if n := len(r.origin.recorded); n != records {
		t.Fatalf("the same error was recorded again (%d records, want %d)", n, records)
	}
	r.peer.set(func(p *fakePeer) { p.fail = [2]any{} })
	r.clock.Advance(federation.MaxHandoffBackoff)
	r.m.Tick(ctx)
	if h := r.origin.handle("j1"); h.State != berth.HandoffDone || h.LastError != "" || h.RemoteJobID != "b-1" {
		t.Fatalf("handle once the peer took it: %+v", h)
	}
}

// TestManagerNoAnswerKeepsHandoffPending checks that a handoff the peer
// did not answer stays pending (it may have arrived: the same nonce is
// sent again), no handoff is sent beyond those already in flight, and the
// rest of the tick's work waits.
func TestManagerNoAnswerKeepsHandoffPending(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx := t.Context()
	r.m.Tick(ctx)
	total := 3 * federation.DeliverParallel
	for i := range total {
		r.origin.add(fmt.Sprintf("j%02d", i+1), "b")
	}
	// The peer answers the heartbeat, then goes away.
	r.peer.set(func(p *fakePeer) { p.requests = nil })
	var once sync.Once
	var handoffs atomic.Int32
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, q *http.Request) {
		if q.URL.Path == "/api/v1/federation/handoffs" {
			handoffs.Add(1)
			once.Do(func() { r.peer.set(func(p *fakePeer) { p.down = true }) })
		}
		r.peer.serve(w, q)
	}))
	t.Cleanup(hs.Close)
	r.origin.mu.Lock()
	r.origin.peers[0] = &berth.Peer{Name: "b", URL: hs.URL, SealedToken: []byte("sealed")}
	r.origin.mu.Unlock()
	r.m.Tick(ctx)
	if got := r.peer.log(); !slices.Equal(got, []string{"capacity"}) {
		t.Fatalf("requests answered %q, want only the heartbeat", got)
	}
	h := r.origin.handle("j01")
	if h.State != berth.HandoffPending || !h.Sent || h.LastError == "" {
		t.Fatalf("handle of an unanswered handoff: %+v", h)
	}
	if n := handoffs.Load(); n < 1 || n > int32(federation.DeliverParallel) {
		t.Fatalf("%d handoffs sent; want at most the %d in flight when the first got no answer", n, federation.DeliverParallel)
	}
	r.peer.set(func(p *fakePeer) { p.down = false })
	r.clock.Advance(time.Minute)
	r.m.Tick(ctx)
	if h2 := r.origin.handle("j01"); h2.State != berth.HandoffDone || h2.Nonce != h.Nonce {
		t.Fatalf("handle once the peer answered again: %+v", h2)
	}
	if h2 := r.origin.handle(fmt.Sprintf("j%02d", total)); h2.State != berth.HandoffDone {
		t.Fatalf("handle never sent, once the peer answered again: %+v", h2)
	}
}

// TestManagerPullsUntilCaughtUp checks that the changes are pulled page
// after page with the cursor each page ends at, applied in order, and
// that the status shows the sync and the lag while a pull fails.
func TestManagerPullsUntilCaughtUp(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx := t.Context()
	r.origin.cursor = berth.ChangeCursor{Epoch: "e", Seq: 4, Tag: "aa"}
	r.peer.set(func(p *fakePeer) {
		p.pages["e.4.aa"] = berth.FederationChanges{Jobs: []berth.RemoteJob{{RemoteID: "j1", State: berth.JobRunning}},
			Cursor: berth.ChangeCursor{Epoch: "e", Seq: 5, Tag: "bb"}, More: true}
		p.pages["e.5.bb"] = berth.FederationChanges{Jobs: []berth.RemoteJob{{RemoteID: "j1", State: berth.JobSucceeded, Tombstone: true}},
			Cursor: berth.ChangeCursor{Epoch: "e", Seq: 6, Tag: "cc"}}
	})
	r.m.Tick(ctx)
	want := []string{"capacity", "changes e.4.aa", "changes e.5.bb"}
	if got := r.peer.log(); !slices.Equal(got, want) {
		t.Fatalf("requests %q, want %q", got, want)
	}
	if len(r.origin.applied) != 2 || r.origin.cursor.Seq != 6 || !r.origin.applied[1].Jobs[0].Tombstone {
		t.Fatalf("applied %+v, cursor %+v", r.origin.applied, r.origin.cursor)
	}
	s := r.m.Status("b")
	if !s.LastSync.Equal(r.clock.Now()) || s.Lag != 0 {
		t.Fatalf("status after a sync: %+v", s)
	}
	// The peer answers the heartbeat but refuses the pull: the mirror
	// falls behind from then on.
	r.peer.set(func(p *fakePeer) { p.pages["e.6.cc"] = berth.FederationChanges{} })
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, q *http.Request) {
		if q.URL.Path == "/api/v1/federation/changes" {
			refuse(w, 500, berth.ECodeInternal, "store failing")
			return
		}
		r.peer.serve(w, q)
	}))
	t.Cleanup(hs.Close)
	r.origin.mu.Lock()
	r.origin.peers[0] = &berth.Peer{Name: "b", URL: hs.URL, SealedToken: []byte("sealed")}
	r.origin.mu.Unlock()
	synced := r.clock.Now()
	r.clock.Advance(time.Second)
	r.m.Tick(ctx)
	r.clock.Advance(9 * time.Second)
	r.m.Tick(ctx)
	s = r.m.Status("b")
	if s.State != berth.PeerReady || !s.LastSync.Equal(synced) || s.Lag != berth.Duration(10*time.Second) || !strings.Contains(s.LastError, "store failing") {
		t.Fatalf("status while pulls fail: %+v", s)
	}
}

// TestManagerPinnedTLS checks that a peer is reached over TLS only when
// its certificate matches the pinned fingerprint, with its token opened
// from the sealed one.
func TestManagerPinnedTLS(t *testing.T) {
	t.Parallel()
	p, hs := newFakePeer(t, true)
	pin := devca.Fingerprint(hs.Certificate())
	for _, tc := range []struct {
		name, pin, sealed string
		want              berth.PeerState
		err               string
	}{
		{"pinned", pin, "sealed", berth.PeerReady, ""},
		{"other pin", "sha256:" + strings.Repeat("ab", 32), "sealed", berth.PeerNew, "certificate"},
		{"token does not open", pin, "garbage", berth.PeerNew, "does not open"},
	} {
		o := newFakeOrigin(&berth.Peer{Name: "b", URL: p.url, CAFingerprint: tc.pin, SealedToken: []byte(tc.sealed)})
		m := federation.NewManager(federation.Config{Origin: o, Token: func(p *berth.Peer) (string, error) {
			if string(p.SealedToken) != "sealed" {
				return "", fmt.Errorf("does not open")
			}
			return "peer-secret", nil
		}})
		m.Tick(t.Context())
		s := m.Status("b")
		if s.State != tc.want || !strings.Contains(s.LastError, tc.err) {
			t.Errorf("%s: status %+v, want state %s and an error with %q", tc.name, s, tc.want, tc.err)
		}
	}
}

// TestManagerStartsOnlyWithPeers checks that the loop only waits while
// there is no peer, visits a peer as soon as it is added, and stops.
func TestManagerStartsOnlyWithPeers(t *testing.T) {
	t.Parallel()
	p, _ := newFakePeer(t, false)
	o := newFakeOrigin()
	polled := make(chan struct{}, 100)
	worked := make(chan struct{}, 1)
	m := federation.NewManager(federation.Config{Origin: &countingOrigin{fakeOrigin: o, polled: polled, worked: worked}, Tick: time.Hour,
		Token: func(*berth.Peer) (string, error) { return "peer-secret", nil }})
	m.Start(t.Context())
	<-polled // the loop's first read: no peer
	o.setPeers(&berth.Peer{Name: "b", URL: p.url})
	<-polled // read at once, not after the hour's tick
	<-worked // the peer answered its heartbeat
	if s, ok := m.PeerState("b"); !ok || s != berth.PeerReady {
		t.Fatalf("peer b after the loop visited it: %q, %v", s, ok)
	}
	if len(polled) != 0 {
		t.Fatalf("the peers were read %d more times, with the tick an hour away", len(polled))
	}
	m.Stop()
}

// countingOrigin signals each read of the peers, and of the work.
type countingOrigin struct {
	*fakeOrigin
	polled, worked chan struct{}
}

func (o *countingOrigin) FederationWork(ctx context.Context, peer string) (*federation.Work, error) {
	defer func() { o.worked <- struct{}{} }()
	return o.fakeOrigin.FederationWork(ctx, peer)
}

func (o *countingOrigin) Peers(ctx context.Context) ([]*berth.Peer, error) {
	defer func() { o.polled <- struct{}{} }()
	return o.fakeOrigin.Peers(ctx)
}

// TestManagerOpenLogs checks the logs of a federated job read from its
// peer with the peer's token and the caller's query, and what each
// failure becomes for the caller: the peer's own refusal naming it, a
// refused peer token or no answer 503 (never the caller's 401 or 403),
// an unknown peer 404.
func TestManagerOpenLogs(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx := t.Context()
	resp, err := r.m.OpenLogs(ctx, "b", "b-1", url.Values{"follow": {"true"}, "format": {"records"}})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "output of b-1\n" || !slices.Equal(r.peer.log(), []string{"logs follow=true&format=records"}) {
		t.Fatalf("logs %q, requests %q", body, r.peer.log())
	}
	for _, tc := range []struct {
		name, peer, job string
		set             func(p *fakePeer)
		code, text      string
	}{
		{"unknown job", "b", "b-9", nil, berth.ECodeNotFound, "peer b, which runs the job: no such endpoint"},
		{"unknown peer", "c", "b-1", nil, berth.ECodeNotFound, "no peer c"},
		{"token refused", "b", "b-1", func(p *fakePeer) { p.token = "other" }, berth.ECodeUnavailable, "refuses this server"},
		{"no answer", "b", "b-1", func(p *fakePeer) { p.down = true }, berth.ECodeUnavailable, "does not answer"},
	} {
		if tc.set != nil {
			r.peer.set(tc.set)
		}
		_, err := r.m.OpenLogs(ctx, tc.peer, tc.job, nil)
		if berth.ErrorCode(err) != tc.code || err == nil || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%s: %v; want %s with %q", tc.name, err, tc.code, tc.text)
		}
	}
}

// signalOrigin signals each FederationWork, each recorded handoff and
// each recorded cancel acknowledgement.
type signalOrigin struct {
	*fakeOrigin
	worked   chan struct{}
	recorded chan berth.Handoff
	acked    chan string
}

func (o *signalOrigin) FederationWork(ctx context.Context, peer string) (*federation.Work, error) {
	defer func() { o.worked <- struct{}{} }()
	return o.fakeOrigin.FederationWork(ctx, peer)
}

func (o *signalOrigin) RecordHandoff(ctx context.Context, h *berth.Handoff) error {
	defer func() { o.recorded <- *h }()
	return o.fakeOrigin.RecordHandoff(ctx, h)
}

func (o *signalOrigin) RecordCancelAck(ctx context.Context, jobID string, incarnation, version int) error {
	defer func() { o.acked <- jobID }()
	return o.fakeOrigin.RecordCancelAck(ctx, jobID, incarnation, version)
}

// within returns what ch yields, or fails the test after 10 s.
func within[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s within 10s", what)
	}
	panic("unreachable")
}

// TestManagerKickVisitsWithoutATick checks that a kick visits its peer at
// once, with the tick an hour away: a handoff owed is delivered, then a
// cancel owed is sent; a kick of a peer the manager does not know does
// nothing.
func TestManagerKickVisitsWithoutATick(t *testing.T) {
	t.Parallel()
	p, _ := newFakePeer(t, false)
	o := &signalOrigin{fakeOrigin: newFakeOrigin(&berth.Peer{Name: "b", URL: p.url}),
		worked: make(chan struct{}, 100), recorded: make(chan berth.Handoff, 100), acked: make(chan string, 100)}
	m := federation.NewManager(federation.Config{Origin: o, Tick: time.Hour,
		Token: func(*berth.Peer) (string, error) { return "peer-secret", nil }})
	m.Start(t.Context())
	defer m.Stop()
	within(t, o.worked, "first visit")
	m.Kick("nobody")
	o.add("j1", "b")
	m.Kick("b")
	if h := within(t, o.recorded, "delivery after a kick"); h.JobID != "j1" || h.State != berth.HandoffDone || h.RemoteJobID != "b-1" {
		t.Fatalf("recorded %+v, want j1 handed off as b-1", h)
	}
	o.mu.Lock()
	o.handles["j1"].CancelVersion = 1
	o.mu.Unlock()
	m.Kick("b")
	if id := within(t, o.acked, "cancel after a kick"); id != "j1" {
		t.Fatalf("cancel acknowledged for %s, want j1", id)
	}
	if got := p.log(); !slices.Contains(got, "handoff j1") || !slices.Contains(got, "cancel j1") {
		t.Fatalf("requests %q, want j1's handoff and cancel", got)
	}
}

// TestManagerDeliveriesAreBounded checks that a backlog is delivered
// side by side, DeliverParallel handoffs in flight and never more: the
// peer holds each handoff until DeliverParallel are in flight (or all
// that are left), so a manager that sent fewer at a time would wait on
// it, and counts the most it saw at once.
func TestManagerDeliveriesAreBounded(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	const bound = federation.DeliverParallel
	total := 4*bound + 3
	var (
		mu                           sync.Mutex
		inflight, most, served, late int
		open                         = make(chan struct{})
	)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, q *http.Request) {
		if q.URL.Path != "/api/v1/federation/handoffs" {
			r.peer.serve(w, q)
			return
		}
		mu.Lock()
		inflight++
		most = max(most, inflight)
		gate := open
		if inflight == bound || served+inflight == total {
			close(open) // this wave goes
			open = make(chan struct{})
		}
		mu.Unlock()
		select {
		case <-gate:
		case <-time.After(10 * time.Second):
			mu.Lock()
			late++
			mu.Unlock()
		}
		r.peer.serve(w, q)
		mu.Lock()
		inflight--
		served++
		mu.Unlock()
	}))
	t.Cleanup(hs.Close)
	r.origin.mu.Lock()
	r.origin.peers[0] = &berth.Peer{Name: "b", URL: hs.URL, SealedToken: []byte("sealed")}
	r.origin.mu.Unlock()
	for i := range total {
		r.origin.add(fmt.Sprintf("j%03d", i), "b")
	}
	r.m.Tick(t.Context())
	mu.Lock()
	defer mu.Unlock()
	if most != bound || late != 0 || served != total {
		t.Fatalf("at most %d handoffs in flight, %d held past 10s, %d served; want %d, 0, %d", most, late, served, bound, total)
	}
	for i := range total {
		if h := r.origin.handle(fmt.Sprintf("j%03d", i)); h.State != berth.HandoffDone {
			t.Fatalf("handle %+v not handed off", h)
		}
	}
}

// TestManagerPullsDuringALongDrain checks that a visit with a backlog of
// handoffs pulls the peer's changes between its deliveries, not only
// once all are delivered, so that the mirror keeps up.
func TestManagerPullsDuringALongDrain(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	total := 1234
	for i := range total {
		r.origin.add(fmt.Sprintf("j%04d", i), "b")
	}
	r.m.Tick(t.Context())
	var pulls []int // how many handoffs were sent before each pull
	handoffs := 0
	for _, req := range r.peer.log() {
		switch {
		case strings.HasPrefix(req, "handoff "):
			handoffs++
		case strings.HasPrefix(req, "changes "):
			pulls = append(pulls, handoffs)
		}
	}
	if handoffs != total || len(pulls) < 3 || pulls[0] == 0 || pulls[len(pulls)-2] == total {
		t.Fatalf("%d handoffs, pulls after %v of them; want %d and pulls between them", handoffs, pulls, total)
	}
	if pulls[len(pulls)-1] != total {
		t.Fatalf("pulls after %v handoffs: want the last once all %d are sent", pulls, total)
	}
	r.origin.mu.Lock()
	defer r.origin.mu.Unlock()
	if len(r.origin.applied) != len(pulls) {
		t.Fatalf("%d pulls applied, %d made", len(r.origin.applied), len(pulls))
	}
}
