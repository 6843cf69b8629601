package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/client"
	"github.com/berth-dev/berth/wire"
)

// supervision is what a server session drives: the attempts the agent
// runs. The session hands it what the server sends about them and asks it
// what to register and heartbeat; it reports back through the session's
// send.
type supervision interface {
	// resume fills in reg, a new session's register, with the warm models
	// and the attempts still running or ended but unacknowledged, and
	// rewinds their shipping to what the server acknowledged.
	resume(reg *wire.Register)
	// reportEnded sends, on a session just registered, the results the
	// server has not acknowledged, each after the rest of its output.
	reportEnded(sctx context.Context)
	// heartbeat returns the worker's state for a heartbeat.
	heartbeat() *wire.Heartbeat
	// start starts an assigned attempt (runCtx outlives the session; sctx
	// is the session's).
	start(runCtx, sctx context.Context, m *wire.JobAssign)
	// cancel stops an attempt the server cancelled.
	cancel(m *wire.JobCancel)
	// control acts on the worker's desired state.
	control(c *wire.Control)
	// prewarm acts on a hint that jobs for model are coming.
	prewarm(ctx context.Context, model string)
	// kill kills attempts the server no longer wants here.
	kill(ids []string)
	// ackLog records how much of an attempt's output the server has.
	ackLog(m *wire.Ack)
	// ackResult forgets an attempt whose result the server has.
	ackResult(id string)
	// stream serves stream m (exec, port-forward) on c, a WebSocket the
	// agent dialled on the server, until it ends, and closes c.
	stream(ctx context.Context, m *wire.StreamOpen, c *websocket.Conn)
}

// session keeps the agent's session with the server: it dials (the leader
// of several servers), registers, heartbeats, hands the server's messages
// to the attempts' supervision and reconnects with backoff. It owns the
// outbox of the current connection and knows when the server was last
// heard from.
type session struct {
	cfg      *Config // read only, but for Token, which join sets before the first dial
	servers  *client.Servers
	log      *slog.Logger
	workerID string
	credFile string // the file cfg.Token was read from or saved in; "" when Config gave it
	work     supervision

	out     atomic.Pointer[wire.Outbox] // the current connection's; nil while disconnected
	fenceAt atomic.Int64                // unix nanos past which the server is lost: its last message plus the lease; 0 before the first

	// Only the goroutine that runs serve uses these.
	server    string        // the server of the current session
	lease     time.Duration // the server's lease, or Config.Lease until it says
	heartbeat time.Duration // how often to heartbeat, as the server last said
	local     string        // the local IP address of the last connection dial made

	registered chan struct{} // closed at the first successful register
	regOnce    sync.Once
}

// newSession returns the session of worker workerID, not connected yet.
func newSession(cfg *Config, workerID, credFile string, work supervision) *session {
	return &session{cfg: cfg, servers: client.ParseServers(cfg.Server), log: cfg.Log, workerID: workerID,
		credFile: credFile, work: work, lease: cfg.Lease, heartbeat: 5 * time.Second, registered: make(chan struct{})}
}

// serve keeps a session with the server, reconnecting with backoff, until
// ctx ends (nil) or the server refuses the agent's credential (its
// *RefusedError).
func (s *session) serve(ctx context.Context) error {
	backoff := 100 * time.Millisecond
	for {
		start := s.cfg.Now()
		err := s.connect(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, ErrRefused) {
			return err
		}
		if s.cfg.Now().Sub(start) > 10*time.Second {
			backoff = 100 * time.Millisecond
		}
		s.log.Warn("server connection lost; reconnecting", "err", err, "in", backoff)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return nil
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// lost reports whether, at now, the server has been silent for longer than
// the lease (never before it was first heard from).
func (s *session) lost(now time.Time) bool {
	at := s.fenceAt.Load()
	return at != 0 && now.UnixNano() > at
}

// touch records that the server was heard from now.
func (s *session) touch() { s.fenceAt.Store(s.cfg.Now().Add(s.lease).UnixNano()) }

// wsURL returns the URL of the WebSocket at path on server.
func wsURL(server, path string) string {
	switch {
	case strings.HasPrefix(server, "https://"):
		server = "wss://" + strings.TrimPrefix(server, "https://")
	case strings.HasPrefix(server, "http://"):
		server = "ws://" + strings.TrimPrefix(server, "http://")
	}
	return server + path
}

// outboxLimit bounds the messages queued for the server, so that shipping
// a large output waits for the connection rather than filling memory.
const outboxLimit = 256

// errNotConnected is send's error while no session is up.
var errNotConnected = errors.New("not connected")

// send queues one message on the current connection, waiting while its
// outbox is full; it fails while disconnected (what matters is resent
// after the next register).
func (s *session) send(ctx context.Context, typ string, payload any) error {
	out := s.out.Load()
	if out == nil {
		return errNotConnected
	}
	return out.Send(ctx, typ, payload)
}

// connect runs a session with the first server of a round that accepts
// one: the server of the last session, then, while servers refuse (cannot
// be reached, answer 503 as standbys, or refuse the agent's credential),
// the leader a refusal names or the next server. It returns when the
// session ends; when every server refused, with the last refusal of the
// agent's credential (*RefusedError) if there was one, else with the
// round's error. A refusal of the credential does not end the round: a
// standby reads new tokens a moment late, so another server may accept
// what one refuses.
func (s *session) connect(ctx context.Context) error {
	round := s.servers.Round()
	var leader string
	var err error
	var refused *RefusedError
	for server, ok := round.Next(""); ok; server, ok = round.Next(leader) {
		var c *websocket.Conn
		var local string
		if c, local, leader, err = s.dial(ctx, server, "/api/v1/agent"); err == nil {
			c.SetReadLimit(16 << 20)
			s.local = local // the default of Config.Advertise
			round.Answered()
			return s.run(ctx, c, server)
		}
		if ctx.Err() != nil {
			return err
		}
		var re *RefusedError
		if errors.As(err, &re) {
			refused = re
		}
	}
	if refused != nil {
		return refused
	}
	return round.Failed(err)
}

// ErrRefused is what Run's error wraps when the server refuses the agent's
// credential.
var ErrRefused = errors.New("the server refused this agent's credential")

// RefusedError is Run's error when the server refuses the agent's
// credential: it answers the agent WebSocket with 401 (no credential, or
// one it does not know, revoked or expired) or 403 (a credential that may
// not speak the agent protocol, such as a join token or a user's token).
// Another try would get the same answer. It wraps ErrRefused.
type RefusedError struct {
	Server string // the server that refused
	Status int    // 401 or 403
	Reason string // the server's message
	Sent   bool   // whether the agent sent a credential
	Saved  string // the file the credential sent was read from or saved in; "" when Config.Token gave it
}

// Error says which server refused which credential, and why.
func (e *RefusedError) Error() string {
	what := "this agent, which has no credential"
	switch {
	case e.Saved != "":
		what = "this agent's credential, saved in " + e.Saved
	case e.Sent:
		what = "this agent's credential"
	}
	return fmt.Sprintf("agent: the server %s refused %s (%d): %s", e.Server, what, e.Status, e.Reason)
}

// Unwrap returns ErrRefused.
func (e *RefusedError) Unwrap() error { return ErrRefused }

// dial opens the WebSocket at path (the agent's session, or a stream) on
// server with the agent's credential and returns it with the local IP
// address it was made from; when server refuses it, it returns the
// leader named in the refusal, if any.
func (s *session) dial(ctx context.Context, server, path string) (c *websocket.Conn, localIP, leader string, err error) {
	hdr := http.Header{}
	if s.cfg.Token != "" {
		hdr.Set("Authorization", "Bearer "+s.cfg.Token)
	}
	dialCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var d net.Dialer
	var local atomic.Pointer[string] // the transport dials on a goroutine of its own
	tr := &http.Transport{TLSClientConfig: s.cfg.TLS,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := d.DialContext(ctx, network, addr)
			if tcp, ok := conn.(*net.TCPConn); ok && err == nil {
				ip := tcp.LocalAddr().(*net.TCPAddr).IP.String()
				local.Store(&ip)
			}
			return conn, err
		}}
	if s.cfg.TLS == nil {
		tr.Proxy = http.ProxyFromEnvironment // like http.DefaultClient; with a pinned CA, directly
	}
	opts := &websocket.DialOptions{HTTPHeader: hdr, HTTPClient: &http.Client{Transport: tr}}
	c, resp, err := websocket.Dial(dialCtx, wsURL(server, path), opts)
	if err != nil {
		if resp == nil {
			return nil, "", "", fmt.Errorf("dial %s: %w", server, err)
		}
		if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
			return nil, "", "", s.refusal(server, resp)
		}
		return nil, "", resp.Header.Get(berth.LeaderHeader), fmt.Errorf("dial %s: %w", server, err)
	}
	if ip := local.Load(); ip != nil {
		localIP = *ip
	}
	return c, localIP, "", nil
}

// refusal returns the *RefusedError of resp, server's refusal of the
// agent's credential: the reason is the message of its error body, else
// its status text.
func (s *session) refusal(server string, resp *http.Response) *RefusedError {
	reason := http.StatusText(resp.StatusCode)
	var body berth.ErrorBody
	if json.NewDecoder(io.LimitReader(resp.Body, 4096)).Decode(&body) == nil && body.Error != nil {
		reason = body.Error.Message
	}
	return &RefusedError{Server: server, Status: resp.StatusCode, Reason: reason, Sent: s.cfg.Token != "", Saved: s.credFile}
}

// run registers on c, a new connection to server, and serves the server's
// messages until the connection ends.
func (s *session) run(ctx context.Context, c *websocket.Conn, server string) error {
	defer c.CloseNow()
	s.server = server
	sctx, cancelSession := context.WithCancel(ctx)
	defer cancelSession()

	advertise := s.cfg.Advertise
	if advertise == "" {
		advertise = s.local
	}
	reg := &wire.Register{Version: wire.Version, WorkerID: s.workerID, Host: s.cfg.Host, Advertise: advertise, Queues: s.cfg.Queues,
		GPUs: s.cfg.GPUs, CPUs: s.cfg.CPUs, Memory: s.cfg.Memory, Slots: s.cfg.Slots, Labels: s.cfg.Labels, Agent: s.cfg.Version}
	s.work.resume(reg)
	frame, _ := wire.Encode(wire.TypeRegister, reg)
	if err := c.Write(sctx, websocket.MessageText, frame); err != nil {
		return fmt.Errorf("register: %w", err)
	}
	_, data, err := c.Read(sctx)
	if err != nil {
		return fmt.Errorf("register: %w", err)
	}
	msgs, err := wire.DecodeFrame(data)
	if err != nil {
		return fmt.Errorf("register: %w", err)
	}
	ack, ok := msgs[0].Body.(*wire.Ack)
	if !ok || ack.Of != wire.AckRegister {
		return fmt.Errorf("register: unexpected answer %q", msgs[0].Type)
	}
	early := msgs[1:] // what the server sent right after the ack, in the same frame
	if ack.Error != "" {
		return fmt.Errorf("register refused: %s", ack.Error)
	}
	if ack.Lease > 0 {
		s.lease = ack.Lease
	}
	if ack.Heartbeat > 0 {
		s.heartbeat = ack.Heartbeat
	}
	s.touch()
	out := wire.NewOutbox(outboxLimit)
	go func() {
		if err := out.Run(sctx, func(ctx context.Context, frame []byte) error {
			return c.Write(ctx, websocket.MessageText, frame)
		}); err != nil && sctx.Err() == nil {
			s.log.Warn("write to server failed", "err", err)
			c.CloseNow()
		}
	}()
	s.out.Store(out)
	defer s.out.CompareAndSwap(out, nil)
	s.work.kill(ack.Kill)
	s.regOnce.Do(func() { close(s.registered) })
	s.log.Info("registered", "server", server, "worker", s.workerID, "host", s.cfg.Host)

	s.work.reportEnded(sctx)
	if err := s.send(sctx, wire.TypeReadyForWork, &wire.ReadyForWork{}); err != nil {
		return err
	}
	go s.heartbeatLoop(sctx, s.heartbeat)
	for _, m := range early {
		s.handle(ctx, sctx, m.Type, m.Body)
	}
	var frames wire.FrameBuffer
	for {
		_, r, err := c.Reader(sctx)
		if err != nil {
			return fmt.Errorf("read: %w", err)
		}
		data, err := frames.Read(r)
		if err != nil {
			return fmt.Errorf("read: %w", err)
		}
		s.touch()
		msgs, err := wire.DecodeFrame(data)
		if err != nil {
			return err
		}
		for _, m := range msgs {
			s.handle(ctx, sctx, m.Type, m.Body)
		}
	}
}

// heartbeatLoop sends a heartbeat every interval until ctx ends or a send
// fails.
func (s *session) heartbeatLoop(ctx context.Context, interval time.Duration) {
	every(ctx, interval, func() bool {
		return s.send(ctx, wire.TypeHeartbeat, s.work.heartbeat()) == nil
	})
}

// handle acts on one server message. runCtx outlives the session (attempts
// keep running across reconnects); sctx is the session's.
func (s *session) handle(runCtx, sctx context.Context, typ string, msg any) {
	switch m := msg.(type) {
	case *wire.JobAssign:
		s.work.start(runCtx, sctx, m)
	case *wire.JobCancel:
		s.work.cancel(m)
	case *wire.Control:
		s.work.control(m)
	case *wire.PrewarmHint:
		s.work.prewarm(runCtx, m.Model)
	case *wire.StreamOpen:
		go s.openStream(runCtx, s.server, m)
	case *wire.Ack:
		switch m.Of {
		case wire.AckHeartbeat:
			s.work.kill(m.Kill)
			if m.Control != nil {
				s.work.control(m.Control)
			}
		case wire.AckLog:
			s.work.ackLog(m)
		case wire.AckResult:
			s.work.ackResult(m.AttemptID)
		}
	case *wire.NoWork:
	default:
		s.log.Warn("unexpected message from server", "type", typ)
	}
}
