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
// goroutine that, once per tick and when kicked, talks to each peer (docs/federation.md,
// "The manager").

// Manager defaults.
const (
	DefaultTick           = time.Second      // how often each peer is visited
	DefaultRequestTimeout = 10 * time.Second // one request to a peer
	DefaultPageSize       = 500              // changes asked for per pull
	// MaxHandoffBackoff bounds the wait before a handoff that failed for a
	// reason that may pass is sent again.
	MaxHandoffBackoff = time.Minute
	// DeliverParallel bounds the handoffs in flight to one peer.
	DeliverParallel = 16
	// maxPages bounds the pulls of one catching up, so that a peer with an
	// endless backlog cannot hold the manager on itself.
	maxPages = 100
	// A visit with a backlog of handoffs pulls the peer's changes between
	// its deliveries, after pullEvery of them or pullInterval, whichever
	// comes first, so that the mirror keeps up while the backlog drains.
	pullEvery    = 500
	pullInterval = 250 * time.Millisecond
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

// Manager talks to the origin's peers: each tick, and at once when Kick
// names a peer, it visits the peer (never twice at a time): it reads the
// peer's capability heartbeat, delivers the cancels owed to it, then the
// handoffs, DeliverParallel at a time, pulling its changes between
// chunks of a backlog, then pulls its changes until it is caught up. It keeps
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
	// kicked are the peers Kick named since the loop last looked; kick
	// tells the loop that there are some.
	kicked map[string]bool
	kick   chan struct{}
	visits sync.WaitGroup // the loop's visits of kicked peers
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
	// visiting is held through a visit: one at a time per peer.
	visiting sync.Mutex
	// kickWaiting is set while a kicked visit waits to begin: further
	// kicks until it begins are that visit's.
	kickWaiting bool
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
	return &Manager{cfg: cfg, peers: map[string]*peer{}, kicked: map[string]bool{}, kick: make(chan struct{}, 1)}
}

// Kick tells the manager that there is work owed to peer (a handoff to
// deliver, a cancel to send): the loop visits it at once rather than at
// its next tick, after the visit under way if there is one. It never
// blocks; kicks of a peer before its visit begins are one.
func (m *Manager) Kick(peer string) {
	m.mu.Lock()
	m.kicked[peer] = true
	m.mu.Unlock()
	select {
	case m.kick <- struct{}{}:
	default: // the loop has yet to look: it will see this peer too
	}
}

// visitKicked starts a visit of each peer kicked since the last look, but
// of none that already has one waiting to begin.
func (m *Manager) visitKicked(ctx context.Context) {
	m.mu.Lock()
	var ps []*peer
	for name := range m.kicked {
		if p := m.peers[name]; p != nil && !p.kickWaiting { // one unknown: the tick its addition brings visits it
			p.kickWaiting = true
			ps = append(ps, p)
		}
	}
	clear(m.kicked)
	m.mu.Unlock()
	for _, p := range ps {
		m.visits.Go(func() {
			if m.visitOnce(ctx, p, true) {
				m.routeWaiting(ctx)
			}
		})
	}
}

// visitOnce visits p once it is not visited, unless it is no longer a
// peer by then; kicked clears its kickWaiting as the visit begins.
func (m *Manager) visitOnce(ctx context.Context, p *peer, kicked bool) (changed bool) {
	p.visiting.Lock()
	defer p.visiting.Unlock()
	m.mu.Lock()
	if kicked {
		p.kickWaiting = false
	}
	name := p.def.Name
	gone := m.peers[name] != p
	m.mu.Unlock()
	if gone {
		return false
	}
	return m.visit(ctx, name, p)
}

// routeWaiting asks the origin to route its waiting jobs again.
func (m *Manager) routeWaiting(ctx context.Context) {
	if err := m.cfg.Origin.RouteWaiting(ctx); err != nil {
		m.cfg.Log.Error("federation: route waiting jobs", "err", err)
	}
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
	defer m.visits.Wait()
	t := time.NewTimer(m.cfg.Tick)
	defer t.Stop()
	for {
		changed := m.cfg.Origin.PeersChanged()
		ticked := make(chan int, 1)
		go func() { ticked <- m.tick(ctx) }()
		var tick <-chan time.Time
		// Kicked peers are visited while the tick runs and after it;
		// the next tick begins once this one is over and its time has
		// come, or a peer was added or changed.
		running, again := true, false
		for running || !again {
			select {
			case <-ctx.Done():
				if running {
					<-ticked
				}
				return
			case <-m.kick:
				m.visitKicked(ctx)
			case n := <-ticked:
				running = false
				if n > 0 { // no peer: nothing to do until one is added
					t.Reset(m.cfg.Tick)
					tick = t.C
				}
			case <-changed: // a peer added is visited at once
				changed, again = nil, true
			case <-tick:
				again = true
			}
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
	m.mu.Lock()
	for i, d := range defs {
		p := m.peers[d.Name]
		wg.Go(func() { changed[i] = m.visitOnce(ctx, p, false) })
	}
	m.mu.Unlock()
	wg.Wait()
	if slices.Contains(changed, true) {
		m.routeWaiting(ctx)
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

// visit does one tick's work with p, the peer name, and reports whether
// its capability changed, or it became ready, so that waiting jobs are
// routed again. p.visiting is held.
func (m *Manager) visit(ctx context.Context, name string, p *peer) (changed bool) {
	m.mu.Lock()
	wasReady := m.state(p, m.cfg.Now()) == berth.PeerReady
	m.mu.Unlock()
	var (
		errMu sync.Mutex // deliveries fail side by side
		errs  []error
	)
	fail := func(err error) {
		errMu.Lock()
		errs = append(errs, err)
		errMu.Unlock()
	}
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
	cursor := work.Cursor
	pull := func() { cursor = m.pull(ctx, c, p, name, cursor, fail) }
	if err := m.deliver(ctx, c, p, work.Deliver, pull, fail); err != nil {
		return changed
	}
	pull()
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

// deliver sends p the handles owed to it whose backoff has passed, up to
// DeliverParallel at a time, and pulls the peer's changes (pull) every
// pullEvery deliveries or pullInterval: each acknowledged is recorded
// handed off with the peer's job id; each refused finally, rejected; any
// other failure is recorded as the handle's last error and sent again
// after a doubling wait. A delivery that got no answer sends no more.
func (m *Manager) deliver(ctx context.Context, c *client.Client, p *peer, ds []Delivery, pull func(), fail func(error)) error {
	// p.retry is this visit's alone: a peer is visited once at a time.
	retry := make(map[handleID]*backoff, len(p.retry))
	for _, d := range ds { // forget the handles no longer owed
		k := handleID{d.Handoff.JobID, d.Handoff.Incarnation}
		if b := p.retry[k]; b != nil {
			retry[k] = b
		}
	}
	p.retry = retry
	var (
		mu       sync.Mutex // retry and noAnswer
		noAnswer error
		wg       sync.WaitGroup
	)
	stopped := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return noAnswer != nil
	}
	slots := make(chan struct{}, DeliverParallel)
	sent, since := 0, m.cfg.Now()
	for _, d := range ds {
		if sent >= pullEvery || sent > 0 && m.cfg.Now().Sub(since) >= pullInterval {
			wg.Wait()
			if stopped() {
				break
			}
			pull()
			sent, since = 0, m.cfg.Now()
		}
		k := handleID{d.Handoff.JobID, d.Handoff.Incarnation}
		mu.Lock()
		b := retry[k]
		mu.Unlock()
		if b != nil && m.cfg.Now().Before(b.next) {
			continue
		}
		slots <- struct{}{}
		if stopped() { // one in flight got no answer: send no more
			break
		}
		sent++
		wg.Go(func() {
			defer func() { <-slots }()
			if err := m.deliverOne(ctx, c, p, d, retry, &mu, fail); err != nil {
				mu.Lock()
				noAnswer = err
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return noAnswer
}

// deliverOne sends p the handle of d and records the outcome (see
// deliver); mu guards retry. It returns errNoAnswer when p did not
// answer.
func (m *Manager) deliverOne(ctx context.Context, c *client.Client, p *peer, d Delivery, retry map[handleID]*backoff, mu *sync.Mutex, fail func(error)) error {
	k := handleID{d.Handoff.JobID, d.Handoff.Incarnation}
	h := *d.Handoff
	rctx, cancel := context.WithTimeout(ctx, m.cfg.RequestTimeout)
	resp, err := c.Handoff(rctx, &berth.HandoffRequest{RemoteID: h.RemoteID, Nonce: h.Nonce, Job: d.Spec})
	cancel()
	noAnswer := m.answered(p, err)
	switch {
	case err == nil:
		mu.Lock()
		delete(retry, k)
		mu.Unlock()
		h.State, h.RemoteJobID, h.CreateRow, h.LastError = berth.HandoffDone, resp.JobID, resp.CreateRow, ""
	case client.Final(err):
		mu.Lock()
		delete(retry, k)
		mu.Unlock()
		h.State, h.LastError = berth.HandoffRejected, err.Error()
	default:
		fail(fmt.Errorf("hand off %s: %w", h.JobID, err))
		mu.Lock()
		b := retry[k]
		if b == nil {
			b = &backoff{}
			retry[k] = b
		}
		b.failed++
		b.next = m.cfg.Now().Add(berth.DoublingDelay(b.failed, MaxHandoffBackoff))
		mu.Unlock()
		if h.LastError == err.Error() {
			return noAnswer
		}
		h.LastError = err.Error()
	}
	if err := m.cfg.Origin.RecordHandoff(ctx, &h); err != nil {
		fail(fmt.Errorf("record the handoff of %s: %w", h.JobID, err))
	}
	return noAnswer
}

// pull applies p's changes after cursor, page after page, until the peer
// says there are no more, and returns the cursor of the last applied.
func (m *Manager) pull(ctx context.Context, c *client.Client, p *peer, name string, cursor berth.ChangeCursor, fail func(error)) berth.ChangeCursor {
	for range maxPages {
		rctx, cancel := context.WithTimeout(ctx, m.cfg.RequestTimeout)
		ch, err := c.FederationChanges(rctx, FormatCursor(cursor), m.cfg.PageSize)
		cancel()
		if m.answered(p, err) != nil || err != nil {
			fail(fmt.Errorf("changes: %w", err))
			m.setBehind(p, false)
			return cursor
		}
		if err := m.cfg.Origin.ApplyChanges(ctx, name, ch); err != nil {
			fail(fmt.Errorf("apply changes: %w", err))
			m.setBehind(p, false)
			return cursor
		}
		cursor = ch.Cursor
		if !ch.More {
			m.setBehind(p, true)
			return cursor
		}
	}
	m.setBehind(p, false)
	return cursor
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
