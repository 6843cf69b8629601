package federation

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/client"
	"github.com/berth-dev/berth/devca"
)

// The federation manager is the origin's side of the peer protocol: the
// goroutine that, once per tick, talks to each peer (docs/federation.md,
// "The manager").

// Manager defaults.
const (
	DefaultTick           = time.Second      // how often each peer is visited
	DefaultRequestTimeout = 10 * time.Second // one request to a peer
	DefaultPageSize       = 500              // changes asked for per pull
	// MaxHandoffBackoff bounds the wait before a handoff that failed for a
	// reason that may pass is sent again.
	MaxHandoffBackoff = time.Minute
	// maxPages bounds the pulls of one tick, so that a peer with an
	// endless backlog cannot hold the manager on itself.
	maxPages = 100
)

// Origin is the origin's controller as the manager drives it: where the
// peers, the work for each and the records of what the peers answered
// live.
type Origin interface {
	// Peers returns every peer, by name, with its sealed token.
	Peers(ctx context.Context) ([]*berth.Peer, error)
	// PeersChanged returns a channel closed at the next change of the
	// peers; taken before Peers is read, no change goes unseen.
	PeersChanged() <-chan struct{}
	// FederationWork returns what is owed to peer now, the handles to
	// deliver marked sent durably (a cancel made later reaches the peer).
	FederationWork(ctx context.Context, peer string) (*Work, error)
	// RecordHandoff records a delivery's outcome: handed off with the
	// peer's job id, rejected, or the last delivery's error.
	RecordHandoff(ctx context.Context, h *berth.Handoff) error
	// RecordCancelAck records that the peer acknowledged the cancel of
	// version of the handle (jobID, incarnation), or does not know it.
	RecordCancelAck(ctx context.Context, jobID string, incarnation, version int) error
	// ApplyChanges mirrors a pull of peer's changes and stores its cursor.
	ApplyChanges(ctx context.Context, peer string, ch *berth.FederationChanges) error
	// PeerLost declares the jobs handed to peer lost (and routes again
	// those with retries left).
	PeerLost(ctx context.Context, peer string) error
	// RouteWaiting routes again the jobs waiting for a peer that fits.
	RouteWaiting(ctx context.Context) error
}

// Work is what an origin owes a peer: the handles to deliver, the cancels
// to deliver (before them), and where its mirror of the peer stands.
type Work struct {
	Deliver []Delivery
	Cancels []*berth.Handoff
	Cursor  berth.ChangeCursor
	// Active counts the jobs handed to the peer that have not ended.
	Active int
}

// Delivery is a handle to deliver and the spec to deliver with it.
type Delivery struct {
	Handoff *berth.Handoff
	Spec    berth.JobSpec
}

// Config is what a Manager needs.
type Config struct {
	Origin Origin
	// Token returns a peer's token, unsealed from its SealedToken.
	Token func(p *berth.Peer) (string, error)
	// Tick is how often each peer is visited (default DefaultTick).
	Tick time.Duration
	// RequestTimeout bounds each request to a peer (default
	// DefaultRequestTimeout).
	RequestTimeout time.Duration
	// PageSize is how many changes one pull asks for (default
	// DefaultPageSize).
	PageSize int
	Now      func() time.Time // default time.Now
	Log      *slog.Logger     // default: discard
}

// Manager talks to the origin's peers: each tick, for each peer, it reads
// the peer's capability heartbeat, delivers the cancels owed to it, then
// the handoffs, then pulls its changes until it is caught up. It keeps
// each peer's status and state (new, ready, unreachable, lost), routes
// jobs over the peers' last heartbeats, and reads a federated job's logs
// from its peer. Without peers it waits for one to be added and does
// nothing else. It is safe for concurrent use.
type Manager struct {
	cfg Config

	mu    sync.Mutex
	peers map[string]*peer
	stop  context.CancelFunc // Start's loop; nil when none
	done  chan struct{}      // closed when that loop has returned
}

// peer is the manager's memory of one peer.
type peer struct {
	def     *berth.Peer
	status  berth.PeerStatus
	heard   time.Time // the last answer; zero: never
	since   time.Time // when the manager began to watch it
	behind  time.Time // since when the mirror may be behind; zero: caught up
	lostSet bool      // PeerLost was called since it was last heard
	key     string    // what c was made for: URL, pin and sealed token
	c       *client.Client
	retry   map[handleID]*backoff // handles whose delivery failed
}

type handleID struct {
	job         string
	incarnation int
}

type backoff struct {
	failed int
	next   time.Time
}

// NewManager returns a manager of cfg; Start sets it going.
func NewManager(cfg Config) *Manager {
	if cfg.Tick <= 0 {
		cfg.Tick = DefaultTick
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if cfg.PageSize <= 0 {
		cfg.PageSize = DefaultPageSize
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Manager{cfg: cfg, peers: map[string]*peer{}}
}

// Start starts the manager's loop in a goroutine of its own: it ticks
// while the origin has peers and, while it has none, only waits for one
// to be added. It runs until ctx ends or Stop.
func (m *Manager) Start(ctx context.Context) {
	ctx, stop := context.WithCancel(ctx)
	m.mu.Lock()
	m.stop, m.done = stop, make(chan struct{})
	m.mu.Unlock()
	go m.loop(ctx, m.done)
}

// Stop stops the loop Start started, if any, and waits for it to return.
func (m *Manager) Stop() {
	m.mu.Lock()
	stop, done := m.stop, m.done
	m.stop = nil
	m.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}

func (m *Manager) loop(ctx context.Context, done chan struct{}) {
	defer close(done)
	t := time.NewTimer(m.cfg.Tick)
	defer t.Stop()
	for {
		changed := m.cfg.Origin.PeersChanged()
		tick := t.C
		if m.tick(ctx) == 0 {
			tick = nil // no peer: nothing to do until one is added
		}
		t.Reset(m.cfg.Tick)
		select {
		case <-ctx.Done():
			return
		case <-changed: // a peer added is visited at once
		case <-tick:
		}
	}
}

// Tick visits every peer once, side by side, and waits for all: the
// loop's step, which tests drive themselves.
func (m *Manager) Tick(ctx context.Context) { m.tick(ctx) }

// tick is Tick; it returns how many peers there are.
func (m *Manager) tick(ctx context.Context) int {
	defs, err := m.cfg.Origin.Peers(ctx)
	if err != nil {
		m.cfg.Log.Error("federation: read peers", "err", err)
		return 1 // try again at the next tick
	}
	now := m.cfg.Now()
	m.mu.Lock()
	names := map[string]bool{}
	for _, d := range defs {
		names[d.Name] = true
		p := m.peers[d.Name]
		if p == nil {
			p = &peer{since: now, status: berth.PeerStatus{State: berth.PeerNew}}
			m.peers[d.Name] = p
		}
		p.def = d
	}
	for name := range m.peers {
		if !names[name] {
			delete(m.peers, name)
		}
	}
	m.mu.Unlock()

	changed := make([]bool, len(defs))
	var wg sync.WaitGroup
	for i, d := range defs {
		wg.Go(func() { changed[i] = m.visit(ctx, d.Name) })
	}
	wg.Wait()
	if slices.Contains(changed, true) {
		if err := m.cfg.Origin.RouteWaiting(ctx); err != nil {
			m.cfg.Log.Error("federation: route waiting jobs", "err", err)
		}
	}
	for _, d := range defs {
		m.checkLost(ctx, d.Name)
	}
	return len(defs)
}

// checkLost declares peer's jobs lost once it has gone unheard past its
// lost timeout.
func (m *Manager) checkLost(ctx context.Context, name string) {
	m.mu.Lock()
	p := m.peers[name]
	lost := p != nil && !p.lostSet && m.state(p, m.cfg.Now()) == berth.PeerLost
	m.mu.Unlock()
	if !lost {
		return
	}
	if err := m.cfg.Origin.PeerLost(ctx, name); err != nil {
		m.cfg.Log.Error("federation: declare a lost peer's jobs lost", "peer", name, "err", err)
		return
	}
	m.cfg.Log.Warn("federation: peer lost: its jobs are declared lost", "peer", name)
	m.mu.Lock()
	p.lostSet = true
	m.mu.Unlock()
}

// errNoAnswer ends a visit: the peer did not answer.
var errNoAnswer = errors.New("no answer")

// visit does one tick's work with peer name, and reports whether its
// capability changed, or it became ready, so that waiting jobs are routed
// again.
func (m *Manager) visit(ctx context.Context, name string) (changed bool) {
	m.mu.Lock()
	p := m.peers[name]
	wasReady := m.state(p, m.cfg.Now()) == berth.PeerReady
	m.mu.Unlock()
	var errs []error
	fail := func(err error) { errs = append(errs, err) }
	defer func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		p.status.LastError = ""
		if err := errors.Join(errs...); err != nil {
			p.status.LastError = err.Error()
		}
		changed = changed || !wasReady && m.state(p, m.cfg.Now()) == berth.PeerReady
	}()
	c, err := m.client(p)
	if err != nil {
		fail(err)
		return false
	}
	rctx, cancel := context.WithTimeout(ctx, m.cfg.RequestTimeout)
	capacity, err := c.PeerCapacity(rctx)
	cancel()
	if m.answered(p, err) != nil {
		fail(fmt.Errorf("capacity: %w", err))
		return false
	}
	if err != nil {
		fail(fmt.Errorf("capacity: %w", err))
	} else {
		changed = m.setCapacity(p, capacity)
	}
	work, err := m.cfg.Origin.FederationWork(ctx, name)
	if err != nil {
		fail(fmt.Errorf("read the work owed: %w", err))
		return changed
	}
	m.mu.Lock()
	p.status.ActiveJobs = work.Active
	m.mu.Unlock()
	if err := m.cancels(ctx, c, p, work.Cancels, fail); err != nil {
		return changed
	}
	if err := m.deliver(ctx, c, p, work.Deliver, fail); err != nil {
		return changed
	}
	m.pull(ctx, c, p, name, work.Cursor, fail)
	return changed
}

// answered records what a request to p got: an answer of any kind
// (success or an error status) is contact. It returns errNoAnswer when
// there was none.
func (m *Manager) answered(p *peer, err error) error {
	if err != nil && !client.Answered(err) {
		return errNoAnswer
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	p.heard = m.cfg.Now()
	p.status.LastContact = p.heard
	p.lostSet = false
	return nil
}

// setCapacity keeps p's heartbeat and reports whether it changed (beyond
// its time).
func (m *Manager) setCapacity(p *peer, c *berth.PeerCapacity) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	old := p.status.Capacity
	p.status.Capacity = c
	return old == nil || !reflect.DeepEqual(old.Workers, c.Workers)
}

// cancels delivers the cancels owed to p: a cancel the peer acknowledged,
// or a job it does not know, is recorded as acknowledged.
func (m *Manager) cancels(ctx context.Context, c *client.Client, p *peer, hs []*berth.Handoff, fail func(error)) error {
	for _, h := range hs {
		rctx, cancel := context.WithTimeout(ctx, m.cfg.RequestTimeout)
		resp, err := c.FederationCancel(rctx, &berth.FederationCancel{RemoteID: h.RemoteID, Nonce: h.Nonce, Version: h.CancelVersion})
		cancel()
		if m.answered(p, err) != nil {
			fail(fmt.Errorf("cancel %s: %w", h.JobID, err))
			return errNoAnswer
		}
		acked := h.CancelVersion
		switch {
		case err == nil:
			acked = resp.Version
		case !client.NotFound(err):
			fail(fmt.Errorf("cancel %s: %w", h.JobID, err))
			continue
		}
		if err := m.cfg.Origin.RecordCancelAck(ctx, h.JobID, h.Incarnation, acked); err != nil {
			fail(fmt.Errorf("record the cancel of %s: %w", h.JobID, err))
		}
	}
	return nil
}

// deliver sends p the handles owed to it whose backoff has passed: each
// acknowledged is recorded handed off with the peer's job id; each
// refused finally, rejected; any other failure is recorded as the
// handle's last error and sent again after a doubling wait.
func (m *Manager) deliver(ctx context.Context, c *client.Client, p *peer, ds []Delivery, fail func(error)) error {
	// p.retry is this visit's alone: a peer is visited once at a time.
	retry := make(map[handleID]*backoff, len(p.retry))
	for _, d := range ds { // forget the handles no longer owed
		k := handleID{d.Handoff.JobID, d.Handoff.Incarnation}
		if b := p.retry[k]; b != nil {
			retry[k] = b
		}
	}
	p.retry = retry
	for _, d := range ds {
		k := handleID{d.Handoff.JobID, d.Handoff.Incarnation}
		now := m.cfg.Now()
		if b := retry[k]; b != nil && now.Before(b.next) {
			continue
		}
		h := *d.Handoff
		rctx, cancel := context.WithTimeout(ctx, m.cfg.RequestTimeout)
		resp, err := c.Handoff(rctx, &berth.HandoffRequest{RemoteID: h.RemoteID, Nonce: h.Nonce, Job: d.Spec})
		cancel()
		noAnswer := m.answered(p, err)
		switch {
		case err == nil:
			delete(retry, k)
			h.State, h.RemoteJobID, h.CreateRow, h.LastError = berth.HandoffDone, resp.JobID, resp.CreateRow, ""
		case client.Final(err):
			delete(retry, k)
			h.State, h.LastError = berth.HandoffRejected, err.Error()
		default:
			fail(fmt.Errorf("hand off %s: %w", h.JobID, err))
			b := retry[k]
			if b == nil {
				b = &backoff{}
				retry[k] = b
			}
			b.failed++
			b.next = now.Add(berth.DoublingDelay(b.failed, MaxHandoffBackoff))
			if h.LastError == err.Error() {
				if noAnswer != nil {
					return noAnswer
				}
				continue
			}
			h.LastError = err.Error()
		}
		if err := m.cfg.Origin.RecordHandoff(ctx, &h); err != nil {
			fail(fmt.Errorf("record the handoff of %s: %w", h.JobID, err))
		}
		if noAnswer != nil {
			return noAnswer
		}
	}
	return nil
}

// pull applies p's changes after cursor, page after page, until the peer
// says there are no more.
func (m *Manager) pull(ctx context.Context, c *client.Client, p *peer, name string, cursor berth.ChangeCursor, fail func(error)) {
	for range maxPages {
		rctx, cancel := context.WithTimeout(ctx, m.cfg.RequestTimeout)
		ch, err := c.FederationChanges(rctx, FormatCursor(cursor), m.cfg.PageSize)
		cancel()
		if m.answered(p, err) != nil || err != nil {
			fail(fmt.Errorf("changes: %w", err))
			m.setBehind(p, false)
			return
		}
		if err := m.cfg.Origin.ApplyChanges(ctx, name, ch); err != nil {
			fail(fmt.Errorf("apply changes: %w", err))
			m.setBehind(p, false)
			return
		}
		cursor = ch.Cursor
		if !ch.More {
			m.setBehind(p, true)
			return
		}
	}
	m.setBehind(p, false)
}

// setBehind records how a pull ended: caught up, or not, when the mirror
// is behind since it last was caught up (or since the manager began to
// watch the peer): what changed since may not be applied.
func (m *Manager) setBehind(p *peer, caughtUp bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case caughtUp:
		p.behind = time.Time{}
		p.status.LastSync = m.cfg.Now()
	case p.behind.IsZero():
		p.behind = cmp.Or(p.status.LastSync, p.since)
	}
}

// client returns the client of p's current definition.
func (m *Manager) client(p *peer) (*client.Client, error) {
	m.mu.Lock()
	def := p.def
	key := def.URL + "\x00" + def.CAFingerprint + "\x00" + string(def.SealedToken)
	if p.c != nil && p.key == key {
		defer m.mu.Unlock()
		return p.c, nil
	}
	m.mu.Unlock()
	token, err := m.cfg.Token(def)
	if err != nil {
		return nil, fmt.Errorf("open the token of peer %s: %w", def.Name, err)
	}
	tlsConfig, err := devca.ClientConfig("", def.CAFingerprint)
	if err != nil {
		return nil, fmt.Errorf("peer %s: %w", def.Name, err)
	}
	c := client.New(def.URL, token, tlsConfig)
	m.mu.Lock()
	p.c, p.key = c, key
	m.mu.Unlock()
	return c, nil
}

// state is p's state at now; m.mu is held.
func (m *Manager) state(p *peer, now time.Time) berth.PeerState {
	last := p.heard
	if last.IsZero() {
		last = p.since
	}
	unheard := now.Sub(last)
	switch {
	case unheard > cmpDuration(p.def.LostTimeout, berth.DefaultLostTimeout):
		return berth.PeerLost
	case unheard > cmpDuration(p.def.RouteTimeout, berth.DefaultRouteTimeout):
		return berth.PeerUnreachable
	case p.heard.IsZero():
		return berth.PeerNew
	}
	return berth.PeerReady
}

// cmpDuration is d, or def when d is not set.
func cmpDuration(d berth.Duration, def time.Duration) time.Duration {
	if d > 0 {
		return time.Duration(d)
	}
	return def
}

// PeerState returns the state of peer name now; false when the manager
// does not watch it (unknown, or added since the last tick: new).
func (m *Manager) PeerState(name string) (berth.PeerState, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.peers[name]
	if p == nil {
		return "", false
	}
	return m.state(p, m.cfg.Now()), true
}

// Status returns what the manager knows of peer name now: a peer it has
// not visited yet is new.
func (m *Manager) Status(name string) berth.PeerStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.peers[name]
	if p == nil {
		return berth.PeerStatus{State: berth.PeerNew}
	}
	now := m.cfg.Now()
	s := p.status
	s.State = m.state(p, now)
	if !p.behind.IsZero() {
		s.Lag = berth.Duration(now.Sub(p.behind))
	}
	return s
}

// OpenLogs asks peer for the output of its job remoteID, with query as
// GET /api/v1/jobs/{id}/logs takes it and the peer's token, and returns
// the answer, whose body the caller reads and closes. An unknown peer is
// ECodeNotFound; the peer's refusal is its *berth.Error, naming the peer,
// but a refusal of the peer token (401, 403), like no answer, is
// ECodeUnavailable: the caller's own credential is not at fault.
func (m *Manager) OpenLogs(ctx context.Context, peerName, remoteID string, query url.Values) (*http.Response, error) {
	defs, err := m.cfg.Origin.Peers(ctx)
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(defs, func(p *berth.Peer) bool { return p.Name == peerName })
	if i < 0 {
		return nil, berth.Errorf(berth.ECodeNotFound, "no peer %s: the job's logs are on it", peerName)
	}
	m.mu.Lock()
	p := m.peers[peerName]
	if p == nil { // not visited yet
		p = &peer{since: m.cfg.Now(), status: berth.PeerStatus{State: berth.PeerNew}}
		m.peers[peerName] = p
	}
	p.def = defs[i]
	m.mu.Unlock()
	c, err := m.client(p)
	if err != nil {
		return nil, err
	}
	resp, err := c.OpenLogs(ctx, remoteID, query)
	var be *berth.Error
	switch {
	case err == nil:
		return resp, nil
	case !client.Answered(err):
		return nil, berth.Errorf(berth.ECodeUnavailable, "peer %s, which runs the job, does not answer: %v", peerName, err).WithCause(err)
	case errors.As(err, &be) && be.Code != berth.ECodeUnauthorized && be.Code != berth.ECodeForbidden:
		return nil, &berth.Error{Code: be.Code, Field: be.Field, Message: fmt.Sprintf("peer %s, which runs the job: %s", peerName, be.Message)}
	}
	// Not the caller's credential that failed but this server's for the
	// peer: not a 401 or 403 of the caller's.
	return nil, berth.Errorf(berth.ECodeUnavailable, "peer %s, which runs the job, refuses this server its logs: %v", peerName, err).WithCause(err)
}

// Route returns the peer a job of spec is handed to, over the peers'
// states and last heartbeats now (see the package's Route).
func (m *Manager) Route(spec *berth.JobSpec) (peer, why string) {
	m.mu.Lock()
	now := m.cfg.Now()
	cands := make([]Candidate, 0, len(m.peers))
	for name, p := range m.peers {
		cands = append(cands, Candidate{Name: name, State: m.state(p, now), Capacity: p.status.Capacity})
	}
	m.mu.Unlock()
	return Route(spec, cands)
}
