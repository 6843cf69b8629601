// Package agent is the worker side of Berth: it registers with the server
// over the agent WebSocket, runs each assigned attempt as a child process
// group (the agent supervises, the job is a child), ships its output and
// progress, reports its end until the server acknowledges it, and kills its
// own attempts if it cannot reach the server for longer than its lease
// (self-fencing).
//
// The agent also ends attempts for a cause, each reported with its own exit
// code (berth.CauseExitCode): past max_runtime (budget), silent past
// stall_timeout (stall), when the server says they belong elsewhere
// (reassigned), when a GPU of theirs fails its health check (gpu_health),
// and on a hard stop by an operator (operator), which it confirms: the
// processes are gone and the GPU memory was released.
//
// Asked to stop (the end of Run's context), the agent keeps its session
// while it stops its attempts (SIGTERM, then SIGKILL after their grace),
// ships the rest of their output and reports them ended with cause
// shutdown, which spends no retry: the server places their jobs again at
// once. It closes the session once the server has acknowledged them, or
// after ReportTimeout. Services kept for the next agent keep running.
//
// It reports the models warm on its worker (see Agent.Models) and, given a
// prewarm command, loads the models the server hints jobs will need.
package agent

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/client"
	"github.com/berth-dev/berth/internal/dirlock"
	"github.com/berth-dev/berth/redact"
	"github.com/berth-dev/berth/wire"
)

// Config configures an Agent. Server, DataDir and Host are required.
type Config struct {
	// Server is the server's URL (http://host:7070), or the
	// comma-separated URLs of the servers of a highly available control
	// plane: the agent keeps a session with the one that leads.
	Server string
	// Token is the agent's credential, bound to Host; empty: the one
	// saved in DataDir/credential, if any.
	Token string
	// JoinToken, when the agent has no credential yet, is traded for one
	// at the first connection, which is saved in DataDir/credential.
	JoinToken string
	// TLS verifies https:// servers (a pinned CA); nil: the system's roots.
	TLS       *tls.Config
	DataDir   string
	Host      string
	Queues    []string // empty: every queue
	GPUs      []berth.GPU
	CPUs      float64
	Memory    berth.Bytes
	Slots     int // most attempts at once; default 16
	Labels    map[string]string
	Executor  Executor // default ProcessExecutor
	Log       *slog.Logger
	Lease     time.Duration // self-fence until the server says otherwise; default 30s
	ShipEvery time.Duration // how often running output and progress are shipped; default 250ms
	Version   string
	// NvidiaSMI is the path of nvidia-smi, with which the agent checks the
	// health of GPUs and confirms that a hard stop released GPU memory;
	// empty: neither (GPUs declared rather than discovered).
	NvidiaSMI      string
	HealthEvery    time.Duration // how often the GPUs' health is checked; default 30s
	ReleaseTimeout time.Duration // how long a hard stop waits for GPU memory to be released; default 30s
	// Models are the models already warm here (their weights cached) when
	// the agent starts; each must pass ValidModel.
	Models []string
	// Prewarm is the command, run with sh -c, that loads a model the
	// server hints at, with {model} replaced by the model's name
	// shell-quoted; empty: prewarm hints are ignored.
	Prewarm        string
	PrewarmTimeout time.Duration // how long a prewarm command may run; default 30m
	// PortLo and PortHi bound the ports given to services
	// ({{SERVICE_PORT}}); default 8000–9000.
	PortLo, PortHi int
	// KeepServices leaves services (without secrets) running when the
	// agent shuts down, for the next agent on this data dir to adopt;
	// otherwise shutting down stops them too. An agent that dies leaves
	// them running either way.
	KeepServices bool
	// ModelCache is where services keep model weights ({{MODEL_CACHE}});
	// default DataDir/models.
	ModelCache string
	// ReportTimeout is how long an agent that is stopping waits, once the
	// attempts it stopped have ended, for the server to acknowledge their
	// results before it closes its session anyway; default 5s.
	ReportTimeout time.Duration
}

// Agent runs attempts for one worker. Create it with New and call Run.
type Agent struct {
	cfg      Config
	servers  *client.Servers
	log      *slog.Logger
	workerID string
	attDir   string
	logs     *LogFiles     // where attempts' log files come from and go back to
	lock     *dirlock.Lock // on DataDir, held until Run returns
	groups   *GroupJournal
	ports    *PortAllocator
	adopted  []adoption // services a previous agent left running, followed once Run starts
	credFile string     // the file cfg.Token was read from or saved in; "" when Config gave it

	progressURL string // the progress endpoint's base URL, set when Run starts

	mu       sync.Mutex
	attempts map[string]*attempt
	forgot   chan struct{}   // closed and replaced when an attempt is forgotten (its result acknowledged)
	out      *wire.Outbox    // the current session's, nil while disconnected
	faults   map[int]string  // faulty GPUs by index: what is wrong with each
	gpuStats []berth.GPUStat // the GPUs' load, as nvidia-smi last said
	models   map[string]bool // the warm models
	warming  map[string]bool // the models being prewarmed

	prewarms sync.WaitGroup // running prewarm commands

	stopping atomic.Bool // Run's context has ended: nothing more is started; set under mu

	parked      atomic.Bool
	lastContact atomic.Int64 // unix nanos of the last server message
	lease       atomic.Int64 // nanoseconds
	heartbeat   atomic.Int64
	registered  chan struct{} // closed at the first successful register
	regOnce     sync.Once
}

type attempt struct {
	id       string
	dir      string
	scratch  bool // dir was made as the working directory
	log      string
	logStart int64 // where its output begins in log
	queue    string
	gpus     []int
	token    string           // the secret of its progress URL
	secrets  *redact.Redactor // hides its secrets' values in what is shipped
	keep     bool             // a service left running when the agent shuts down, for the next agent to adopt
	proc     Process
	progress progress

	mu      sync.Mutex // serialises shipping and result sending
	sent    int64
	acked   int64
	scanned int64 // output scanned for progress lines
	lines   progressScanner
	result  *wire.JobResult // set once ended; kept until acknowledged
	file    *os.File
}

// New prepares an agent: it creates and locks DataDir (another process
// holding it is an error), loads or makes the worker id and kills process
// groups a previous agent left behind in DataDir. Run releases the lock.
func New(cfg Config) (*Agent, error) {
	if cfg.Server == "" || cfg.DataDir == "" || cfg.Host == "" {
		return nil, errors.New("agent: server, data dir and host are required")
	}
	if cfg.Slots <= 0 {
		cfg.Slots = 16
	}
	if cfg.Executor == nil {
		cfg.Executor = ProcessExecutor{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Lease <= 0 {
		cfg.Lease = 30 * time.Second
	}
	if cfg.ShipEvery <= 0 {
		cfg.ShipEvery = 250 * time.Millisecond
	}
	if cfg.HealthEvery <= 0 {
		cfg.HealthEvery = 30 * time.Second
	}
	if cfg.ReleaseTimeout <= 0 {
		cfg.ReleaseTimeout = 30 * time.Second
	}
	if cfg.PrewarmTimeout <= 0 {
		cfg.PrewarmTimeout = 30 * time.Minute
	}
	if cfg.ReportTimeout <= 0 {
		cfg.ReportTimeout = 5 * time.Second
	}
	lock, err := dirlock.Acquire(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("agent: data dir %w; stop the agent that uses it or give this one its own data dir", err)
	}
	a, err := prepare(cfg)
	if err != nil {
		lock.Release()
		return nil, err
	}
	a.lock = lock
	return a, nil
}

// prepare does New's work once the data dir is locked.
func prepare(cfg Config) (*Agent, error) {
	a := &Agent{cfg: cfg, servers: client.ParseServers(cfg.Server), log: cfg.Log, attDir: filepath.Join(cfg.DataDir, "attempts"),
		attempts: map[string]*attempt{}, forgot: make(chan struct{}), registered: make(chan struct{}), models: map[string]bool{},
		warming: map[string]bool{}}
	for _, m := range cfg.Models {
		if err := ValidModel("models", m); err != nil {
			return nil, fmt.Errorf("agent: %w", err)
		}
		a.models[m] = true
	}
	a.lease.Store(int64(cfg.Lease))
	a.heartbeat.Store(int64(5 * time.Second))
	if err := os.MkdirAll(a.attDir, 0o755); err != nil {
		return nil, fmt.Errorf("agent: data dir: %w", err)
	}
	id, err := loadWorkerID(filepath.Join(cfg.DataDir, "worker-id"))
	if err != nil {
		return nil, err
	}
	if a.cfg.Token == "" {
		if a.cfg.Token, err = SavedCredential(cfg.DataDir); err != nil {
			return nil, err
		}
		if a.cfg.Token != "" {
			a.credFile = credentialPath(cfg.DataDir)
		}
	}
	a.workerID = id
	if a.cfg.ModelCache == "" {
		a.cfg.ModelCache = filepath.Join(cfg.DataDir, "models")
	}
	if a.ports, err = NewPortAllocator(PortConfig{Lo: cfg.PortLo, Hi: cfg.PortHi, Path: filepath.Join(cfg.DataDir, "ports.json")}); err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	// What a previous agent left running: services are adopted (their
	// ports recovered), the rest killed.
	journal := filepath.Join(cfg.DataDir, "groups")
	stale, err := StaleGroups(journal)
	if err != nil {
		a.log.Warn("reading the process groups of a previous agent", "err", err)
	}
	if err := a.adoptServices(stale); err != nil {
		return nil, err
	}
	if n, err := killGroups(stale); err != nil {
		return nil, fmt.Errorf("agent: kill stale attempts: %w", err)
	} else if n > 0 {
		a.log.Warn("killed attempts left by a previous agent", "count", n)
	}
	entries, _ := os.ReadDir(a.attDir)
	for _, e := range entries {
		if _, kept := a.attempts[strings.TrimSuffix(e.Name(), ".log")]; !kept {
			_ = os.RemoveAll(filepath.Join(a.attDir, e.Name()))
		}
	}
	if a.groups, err = OpenGroupJournal(journal); err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	if a.logs, err = OpenLogFiles(filepath.Join(cfg.DataDir, "logs"), max(cfg.Slots, 1)); err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	for _, ad := range a.adopted {
		if err := a.groups.Started(ad.at.id, ad.proc.pgid); err != nil {
			return nil, fmt.Errorf("agent: %w", err)
		}
	}
	return a, nil
}

func loadWorkerID(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err == nil && len(strings.TrimSpace(string(data))) > 0 {
		return strings.TrimSpace(string(data)), nil
	}
	var ids berth.IDGen
	id := "w-" + strings.ToLower(ids.New(time.Now()))
	if err := os.WriteFile(path, []byte(id+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("agent: save worker id: %w", err)
	}
	return id, nil
}

// WorkerID returns the id this agent registers as.
func (a *Agent) WorkerID() string { return a.workerID }

// Registered is closed once the agent has registered with the server.
func (a *Agent) Registered() <-chan struct{} { return a.registered }

// Parked reports whether the server last said that every queue of this
// worker is off.
func (a *Agent) Parked() bool { return a.parked.Load() }

// Run serves the progress endpoint on loopback, connects to the server (or
// to one of several, see connect) and serves assignments until ctx ends,
// reconnecting with backoff, or until the server refuses the agent's
// credential, which retrying would not change. When ctx ends it stops its
// attempts and reports them before it closes its session (see drain). On
// return every attempt has been stopped but the services kept for the
// next agent (Config.KeepServices). It returns nil when ctx ends;
// otherwise the refusal (a *RefusedError), or why the join token could
// not be traded or the progress endpoint cannot listen.
func (a *Agent) Run(ctx context.Context) error {
	defer a.lock.Release()
	defer a.groups.Close()
	defer a.prewarms.Wait() // the end of the session kills them
	if a.cfg.Token == "" && a.cfg.JoinToken != "" {
		if err := a.join(ctx); err != nil {
			return err
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("agent: progress endpoint: %w", err)
	}
	srv := &http.Server{Handler: a.progressHandler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	a.progressURL = "http://" + ln.Addr().String() + progressPath
	// The session, and what reports to the server, outlive ctx until the
	// attempts are reported.
	life, endSession := context.WithCancel(context.WithoutCancel(ctx))
	defer endSession()
	for _, ad := range a.adopted {
		ad.follow(life, a)
	}
	go a.fence(life)
	go a.shipLoop(life)
	if a.cfg.NvidiaSMI != "" && len(a.cfg.GPUs) > 0 {
		go a.watchGPUs(life)
	}
	served := make(chan error, 1)
	go func() { served <- a.serve(life) }()
	select {
	case err = <-served: // refused: there is no server to report to
	case <-ctx.Done():
		a.drain()
		endSession()
		err = <-served
	}
	endSession() // prewarm commands and services' watchers stop with the session
	a.stopAll()
	return err
}

// serve keeps a session with the server, reconnecting with backoff, until
// ctx ends (nil) or the server refuses the agent's credential (its
// *RefusedError).
func (a *Agent) serve(ctx context.Context) error {
	backoff := 100 * time.Millisecond
	for {
		start := time.Now()
		err := a.connect(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, ErrRefused) {
			return err
		}
		if time.Since(start) > 10*time.Second {
			backoff = 100 * time.Millisecond
		}
		a.log.Warn("server connection lost; reconnecting", "err", err, "in", backoff)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return nil
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// shutdownReason is the reason of an attempt stopped because its agent is
// shutting down.
const shutdownReason = "agent shutting down"

// drain stops the attempts (see stopAll) while the session stays open, so
// that their last output and results reach the server, then waits, for at
// most ReportTimeout, until the server has acknowledged every result.
func (a *Agent) drain() {
	a.log.Info("stopping: stopping attempts and reporting them to the server")
	a.stopAll()
	if left := a.awaitReported(time.Now().Add(a.cfg.ReportTimeout)); left > 0 {
		a.log.Warn("stopping without the server's acknowledgement of every result", "unacknowledged", left)
	}
}

// stopAll stops, with cause shutdown, every attempt but the services kept
// for the next agent, and waits for them to end. From then on the agent
// starts nothing more (see start).
func (a *Agent) stopAll() {
	a.mu.Lock()
	a.stopping.Store(true)
	procs := make([]Process, 0, len(a.attempts))
	for _, at := range a.attempts {
		if at.proc != nil && !at.keep {
			procs = append(procs, at.proc)
		}
	}
	a.mu.Unlock()
	for _, p := range procs {
		p.Stop(berth.CauseShutdown, shutdownReason)
	}
	for _, p := range procs {
		<-p.Done()
	}
}

// awaitReported waits until the server has acknowledged the result of
// every attempt but the services left running for the next agent, or
// until deadline. It returns how many results are still unacknowledged.
func (a *Agent) awaitReported(deadline time.Time) int {
	timeout := time.NewTimer(time.Until(deadline))
	defer timeout.Stop()
	for {
		a.mu.Lock()
		left, forgot := 0, a.forgot
		for _, at := range a.attempts {
			if !at.keep || hasEnded(at.proc) {
				left++
			}
		}
		a.mu.Unlock()
		if left == 0 {
			return 0
		}
		select {
		case <-forgot:
		case <-timeout.C:
			return left
		}
	}
}

// hasEnded reports whether p has ended.
func hasEnded(p Process) bool {
	select {
	case <-p.Done():
		return true
	default:
		return false
	}
}

// fence kills every attempt once the server has been silent past the lease.
func (a *Agent) fence(ctx context.Context) {
	t := time.NewTicker(a.cfg.ShipEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		last := a.lastContact.Load()
		if last == 0 || time.Since(time.Unix(0, last)) <= time.Duration(a.lease.Load()) {
			continue
		}
		a.mu.Lock()
		for _, at := range a.attempts {
			if at.proc != nil && !hasEnded(at.proc) {
				a.log.Warn("self-fencing: server unreachable past the lease; killing attempt", "attempt", at.id)
				at.proc.Kill("", "self-fenced: the server was unreachable for longer than the lease")
			}
		}
		a.mu.Unlock()
	}
}

// wsURL returns the agent WebSocket's URL on server.
func wsURL(server string) string {
	switch {
	case strings.HasPrefix(server, "https://"):
		server = "wss://" + strings.TrimPrefix(server, "https://")
	case strings.HasPrefix(server, "http://"):
		server = "ws://" + strings.TrimPrefix(server, "http://")
	}
	return server + "/api/v1/agent"
}

// outboxLimit bounds the messages queued for the server, so that shipping
// a large output waits for the connection rather than filling memory.
const outboxLimit = 256

// errNotConnected is send's error while no session is up.
var errNotConnected = errors.New("not connected")

// send queues one message on the current session, waiting while its
// outbox is full; it fails while disconnected (what matters is resent
// after the next register).
func (a *Agent) send(ctx context.Context, typ string, payload any) error {
	a.mu.Lock()
	out := a.out
	a.mu.Unlock()
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
func (a *Agent) connect(ctx context.Context) error {
	round := a.servers.Round()
	var leader string
	var err error
	var refused *RefusedError
	for server, ok := round.Next(""); ok; server, ok = round.Next(leader) {
		var c *websocket.Conn
		if c, leader, err = a.dial(ctx, server); err == nil {
			round.Answered()
			return a.session(ctx, c, server)
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

// dial opens the agent WebSocket on server; when server refuses it, it
// also returns the leader named in the refusal, if any.
func (a *Agent) dial(ctx context.Context, server string) (c *websocket.Conn, leader string, err error) {
	hdr := http.Header{}
	if a.cfg.Token != "" {
		hdr.Set("Authorization", "Bearer "+a.cfg.Token)
	}
	dialCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	opts := &websocket.DialOptions{HTTPHeader: hdr}
	if a.cfg.TLS != nil {
		opts.HTTPClient = &http.Client{Transport: &http.Transport{TLSClientConfig: a.cfg.TLS}}
	}
	c, resp, err := websocket.Dial(dialCtx, wsURL(server), opts)
	if err != nil {
		if resp == nil {
			return nil, "", fmt.Errorf("dial %s: %w", server, err)
		}
		if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
			return nil, "", a.refusal(server, resp)
		}
		return nil, resp.Header.Get(berth.LeaderHeader), fmt.Errorf("dial %s: %w", server, err)
	}
	c.SetReadLimit(16 << 20)
	return c, "", nil
}

// refusal returns the *RefusedError of resp, server's refusal of the
// agent's credential: the reason is the message of its error body, else
// its status text.
func (a *Agent) refusal(server string, resp *http.Response) *RefusedError {
	reason := http.StatusText(resp.StatusCode)
	var body berth.ErrorBody
	if json.NewDecoder(io.LimitReader(resp.Body, 4096)).Decode(&body) == nil && body.Error != nil {
		reason = body.Error.Message
	}
	return &RefusedError{Server: server, Status: resp.StatusCode, Reason: reason, Sent: a.cfg.Token != "", Saved: a.credFile}
}

// session registers on c, a new connection to server, and serves the
// server's messages until the connection ends.
func (a *Agent) session(ctx context.Context, c *websocket.Conn, server string) error {
	defer c.CloseNow()
	sctx, cancelSession := context.WithCancel(ctx)
	defer cancelSession()

	reg := &wire.Register{Version: wire.Version, WorkerID: a.workerID, Host: a.cfg.Host, Queues: a.cfg.Queues,
		GPUs: a.cfg.GPUs, CPUs: a.cfg.CPUs, Memory: a.cfg.Memory, Slots: a.cfg.Slots, Labels: a.cfg.Labels, Agent: a.cfg.Version}
	a.mu.Lock()
	reg.Models = a.modelsLocked()
	for id, at := range a.attempts {
		at.mu.Lock()
		if at.result != nil {
			reg.Finished = append(reg.Finished, id)
		} else {
			reg.Running = append(reg.Running, id)
		}
		at.sent = at.acked // the server has what it acknowledged; resend the rest
		at.mu.Unlock()
	}
	a.mu.Unlock()
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
	a.touch()
	if ack.Lease > 0 {
		a.lease.Store(int64(ack.Lease))
	}
	if ack.Heartbeat > 0 {
		a.heartbeat.Store(int64(ack.Heartbeat))
	}
	out := wire.NewOutbox(outboxLimit)
	go func() {
		if err := out.Run(sctx, func(ctx context.Context, frame []byte) error {
			return c.Write(ctx, websocket.MessageText, frame)
		}); err != nil && sctx.Err() == nil {
			a.log.Warn("write to server failed", "err", err)
			c.CloseNow()
		}
	}()
	a.mu.Lock()
	a.out = out
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		if a.out == out {
			a.out = nil
		}
		a.mu.Unlock()
	}()
	a.kill(ack.Kill)
	a.regOnce.Do(func() { close(a.registered) })
	a.log.Info("registered", "server", server, "worker", a.workerID, "host", a.cfg.Host)

	// Results the server has not acknowledged yet, each after its output.
	a.mu.Lock()
	var ended []*attempt
	for _, at := range a.attempts {
		if at.proc != nil && hasEnded(at.proc) {
			ended = append(ended, at)
		}
	}
	a.mu.Unlock()
	for _, at := range ended {
		a.report(sctx, at)
	}
	if err := a.send(sctx, wire.TypeReadyForWork, &wire.ReadyForWork{}); err != nil {
		return err
	}
	go a.heartbeatLoop(sctx)
	for _, m := range early {
		a.handle(ctx, sctx, m.Type, m.Body)
	}
	for {
		_, data, err := c.Read(sctx)
		if err != nil {
			return fmt.Errorf("read: %w", err)
		}
		a.touch()
		msgs, err := wire.DecodeFrame(data)
		if err != nil {
			return err
		}
		for _, m := range msgs {
			a.handle(ctx, sctx, m.Type, m.Body)
		}
	}
}

func (a *Agent) touch() { a.lastContact.Store(time.Now().UnixNano()) }

func (a *Agent) heartbeatLoop(ctx context.Context) {
	t := time.NewTicker(time.Duration(a.heartbeat.Load()))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		a.mu.Lock()
		hb := &wire.Heartbeat{FaultyGPUs: slices.Sorted(maps.Keys(a.faults)), Models: a.modelsLocked(), GPUStats: a.gpuStats}
		for id, at := range a.attempts {
			if at.proc != nil && !hasEnded(at.proc) {
				hb.Running = append(hb.Running, id)
				a.ports.Touch(id) // its ports are in use
			}
		}
		a.mu.Unlock()
		if freed, err := a.ports.Reclaim(time.Now()); err != nil || len(freed) > 0 {
			a.log.Warn("reclaimed service ports of attempts no longer running", "ports", freed, "err", err)
		}
		if err := a.send(ctx, wire.TypeHeartbeat, hb); err != nil {
			return
		}
	}
}

// handle acts on one server message. runCtx outlives the session (attempts
// keep running across reconnects); sctx is the session's.
func (a *Agent) handle(runCtx, sctx context.Context, typ string, msg any) {
	switch m := msg.(type) {
	case *wire.JobAssign:
		a.start(runCtx, sctx, m)
	case *wire.JobCancel:
		cause := m.Cause
		if _, known := berth.CauseExitCode(cause); cause != "" && !known {
			a.log.Warn("cancel with an unknown cause; cancelling without", "attempt", m.AttemptID, "cause", cause)
			cause = ""
		}
		if at := a.get(m.AttemptID); at != nil {
			at.proc.Stop(cause, m.Reason)
		}
	case *wire.Control:
		a.control(m)
	case *wire.PrewarmHint:
		if !a.stopping.Load() {
			a.prewarm(runCtx, m.Model)
		}
	case *wire.Ack:
		switch m.Of {
		case wire.AckHeartbeat:
			a.kill(m.Kill)
			if m.Control != nil {
				a.control(m.Control)
			}
		case wire.AckLog:
			if at := a.get(m.AttemptID); at != nil {
				at.mu.Lock()
				at.acked = max(at.acked, m.Offset)
				if m.Resend {
					at.acked, at.sent = m.Offset, m.Offset
				}
				at.mu.Unlock()
			}
		case wire.AckResult:
			if at := a.forget(m.AttemptID); at != nil {
				at.mu.Lock()
				if at.file != nil {
					_ = at.file.Close()
					at.file = nil
				}
				at.mu.Unlock()
				a.removeFiles(at)
			}
		}
	case *wire.NoWork:
	default:
		a.log.Warn("unexpected message from server", "type", typ)
	}
}

// forget drops attempt id, whose result the server has acknowledged, and
// returns it (nil if unknown).
func (a *Agent) forget(id string) *attempt {
	a.mu.Lock()
	defer a.mu.Unlock()
	at := a.attempts[id]
	if at != nil {
		delete(a.attempts, id)
		close(a.forgot)
		a.forgot = make(chan struct{})
	}
	return at
}

// removeFiles releases the attempt's log and deletes, if Start made it,
// its scratch directory.
func (a *Agent) removeFiles(at *attempt) {
	if p, ok := at.proc.(*doneProcess); ok && p.noFiles {
		return
	}
	a.logs.Release(at.log)
	if at.scratch {
		_ = os.RemoveAll(at.dir)
	}
}

func (a *Agent) get(id string) *attempt {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.attempts[id]
}

// reassigned is the reason of an attempt killed because the server says
// it belongs elsewhere.
const reassigned = "reassigned: the server says this attempt now belongs elsewhere"

// kill kills, now, attempts the server no longer wants here.
func (a *Agent) kill(ids []string) {
	for _, id := range ids {
		if at := a.get(id); at != nil {
			at.proc.Kill(berth.CauseReassigned, reassigned)
		}
	}
}

// control acts on the worker's desired state: it remembers whether the
// worker is parked, logging the change, and stops every running attempt of
// a queue turned off with the hard policy (a safety net behind the
// server's own hard stop).
func (a *Agent) control(c *wire.Control) {
	if a.parked.Swap(c.Parked) != c.Parked {
		if c.Parked {
			a.log.Warn("parked: every queue of this worker is off")
		} else {
			a.log.Info("resumed")
		}
	}
	var stops []stopRequest
	a.mu.Lock()
	for _, at := range a.attempts {
		if off, ok := c.OffFor(at.queue); ok && off.Policy == berth.StopHard {
			stops = append(stops, stopRequest{at, operatorStop(a.cfg.Host, off)})
		}
	}
	a.mu.Unlock()
	a.stopFor(berth.CauseOperator, "stopping attempt: its queue is off", stops)
}

// stopRequest is an attempt to stop, and why.
type stopRequest struct {
	at     *attempt
	reason string
}

// stopFor stops attempts for cause, logging msg for each it began to stop.
func (a *Agent) stopFor(cause, msg string, stops []stopRequest) {
	for _, s := range stops {
		if s.at.proc.Stop(cause, s.reason) {
			a.log.Warn(msg, "attempt", s.at.id, "reason", s.reason)
		}
	}
}

// operatorStop says who stopped an attempt of host and why, in the
// server's words.
func operatorStop(host string, off wire.QueueOff) string {
	return berth.OperatorStopReason(host, off.Queue, off.Policy, off.RequestedBy)
}

// watchGPUs checks the GPUs' health now and every HealthEvery until ctx
// ends; a failed check is logged and changes nothing.
func (a *Agent) watchGPUs(ctx context.Context) {
	health := newGPUHealth(a.cfg.NvidiaSMI, a.cfg.GPUs)
	t := time.NewTicker(a.cfg.HealthEvery)
	defer t.Stop()
	for {
		faults, err := health.check(ctx)
		switch {
		case err == nil:
			a.setFaults(faults)
		case ctx.Err() == nil:
			a.log.Warn("GPU health check failed; ignored", "err", err)
		}
		if stats, err := gpuStats(ctx, a.cfg.NvidiaSMI); err == nil {
			a.mu.Lock()
			a.gpuStats = stats
			a.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// setFaults records which GPUs are faulty, logging changes, and stops the
// attempts on them.
func (a *Agent) setFaults(faults map[int]string) {
	var stops []stopRequest
	a.mu.Lock()
	for idx, what := range faults {
		if _, was := a.faults[idx]; !was {
			a.log.Error("GPU faulty", "gpu", idx, "fault", what)
		}
	}
	for idx := range a.faults {
		if _, still := faults[idx]; !still {
			a.log.Info("GPU healthy again", "gpu", idx)
		}
	}
	a.faults = faults
	for _, at := range a.attempts {
		for _, g := range at.gpus {
			if what, faulty := faults[g]; faulty {
				stops = append(stops, stopRequest{at, "gpu health: " + what})
				break
			}
		}
	}
	a.mu.Unlock()
	a.stopFor(berth.CauseGPUHealth, "stopping attempt: its GPU is faulty", stops)
}

func (a *Agent) start(runCtx, sctx context.Context, m *wire.JobAssign) {
	if a.stopping.Load() {
		a.refuse(runCtx, m)
		return
	}
	dir := filepath.Join(a.attDir, m.AttemptID)
	// A batch attempt appends to a kept file. A service has its own (a
	// restarted agent finds it by its name; readiness reads it), and so
	// has an attempt with secrets, whose values then leave the worker's
	// disk once its output is shipped (Release deletes the file).
	log, logStart := dir+".log", int64(0)
	if m.Service == nil && len(m.Secrets) == 0 {
		log, logStart = a.logs.Take()
	}
	at := &attempt{id: m.AttemptID, dir: dir, scratch: m.Workdir == "", log: log, logStart: logStart,
		queue: m.Queue, gpus: m.GPUs, token: rand.Text(), secrets: secretRedactor(m)}
	run, err := expandSecrets(m)
	var svc *serviceRun
	if err == nil && m.Service != nil {
		svc = &serviceRun{}
		run, err = a.prepareService(run, svc)
	}
	var proc Process
	if err != nil {
		proc = failedProcess(fmt.Sprintf("start: %v", err))
	} else if proc, err = a.cfg.Executor.Start(runCtx, Spec{AttemptID: m.AttemptID, JobID: m.JobID, TaskIndex: m.TaskIndex,
		ArrayIndex: m.ArrayIndex, JobName: m.JobName, User: m.User, Attempt: m.Attempt, Host: a.cfg.Host,
		Command: run.Command, Env: run.Env, Workdir: run.Workdir, Dir: dir, LogPath: at.log, GPUs: m.GPUs,
		MaxRuntime: m.MaxRuntime, StallTimeout: m.StallTimeout, Grace: m.Grace, Groups: a.groups,
		ProgressURL: a.progressURL + url.PathEscape(m.AttemptID) + "/" + at.token, Detached: adoptable(m)}); err != nil {
		proc = failedProcess(fmt.Sprintf("start: %v", err))
	}
	at.proc = proc
	if svc != nil && err == nil && adoptable(m) {
		at.keep = a.cfg.KeepServices
		if err := a.saveServiceRecord(m, svc.port); err != nil {
			a.log.Warn("keep a service's record for a restarted agent", "attempt", m.AttemptID, "err", err)
		}
	}
	a.mu.Lock()
	if orig, dup := a.attempts[m.AttemptID]; dup {
		a.mu.Unlock()
		proc.Kill("", "")
		if at.log != orig.log { // a file of its own: give it back once the process is gone
			go func() { <-proc.Done(); a.logs.Release(at.log) }()
		}
		return
	}
	a.attempts[m.AttemptID] = at
	missed := a.stopping.Load() && !at.keep // stopAll began after the check above
	a.mu.Unlock()
	if missed {
		proc.Stop(berth.CauseShutdown, shutdownReason)
	}
	_ = a.send(sctx, wire.TypeJobAccepted, &wire.JobAccepted{AttemptID: m.AttemptID})
	if err != nil {
		svc = nil // never started: no readiness to watch
	}
	a.follow(runCtx, at, m, svc)
}

// refuse answers an assignment that comes while the agent is stopping:
// the attempt ends without starting, with cause shutdown, so that the
// server places it again without spending a retry.
func (a *Agent) refuse(runCtx context.Context, m *wire.JobAssign) {
	code, _ := berth.CauseExitCode(berth.CauseShutdown)
	at := &attempt{id: m.AttemptID, proc: &doneProcess{noFiles: true, exit: Exit{State: stoppedState(berth.CauseShutdown),
		ExitCode: &code, Reason: "not started: " + shutdownReason, Cause: berth.CauseShutdown}}}
	a.mu.Lock()
	_, dup := a.attempts[m.AttemptID]
	if !dup {
		a.attempts[m.AttemptID] = at
	}
	a.mu.Unlock()
	if !dup {
		a.follow(runCtx, at, m, nil)
	}
}

// follow watches a started attempt (and a service's readiness, when svc
// is set) until it ends, then reports its result.
func (a *Agent) follow(runCtx context.Context, at *attempt, m *wire.JobAssign, svc *serviceRun) {
	proc := at.proc
	if svc != nil {
		svc.watched = make(chan struct{})
		go a.watchService(runCtx, at, m, svc)
	}
	go func() {
		<-proc.Done()
		ex := proc.Exit()
		if svc != nil {
			if _, err := a.ports.Release(m.AttemptID); err != nil {
				a.log.Warn("release a service's port", "attempt", m.AttemptID, "err", err)
			}
			a.dropServiceRecord(m.AttemptID)
		}
		if ex.State == berth.AttemptSucceeded && m.Model != "" {
			a.warm(m.Model) // before the result, so that a heartbeat after it reports the model
		}
		if ex.Cause == berth.CauseOperator {
			ex.Reason += "; " + a.confirmStopped(runCtx, at.gpus, ex.Lingering)
		}
		at.mu.Lock()
		at.result = &wire.JobResult{AttemptID: at.id, State: ex.State, ExitCode: ex.ExitCode, Reason: at.secrets.Redact(ex.Reason),
			Cause: ex.Cause, Class: svc.failureClass()}
		at.mu.Unlock()
		a.report(runCtx, at)
	}()
}

// confirmStopped checks what a hard stop must have freed, once the attempt
// has ended: no process of its group is left (lingering lists those that
// are) and, when the agent has nvidia-smi, no compute app holds memory on
// its GPUs any more. It says what it found: "processes gone; GPU memory
// released on GPU 0,1".
func (a *Agent) confirmStopped(ctx context.Context, gpus, lingering []int) string {
	found := "processes gone"
	if len(lingering) > 0 {
		pids := make([]string, len(lingering))
		for i, pid := range lingering {
			pids[i] = strconv.Itoa(pid)
		}
		found = "processes still alive after SIGKILL: pid " + strings.Join(pids, ", ")
	}
	var held []berth.GPU
	for _, g := range a.cfg.GPUs {
		if slices.Contains(gpus, g.Index) {
			held = append(held, g)
		}
	}
	if a.cfg.NvidiaSMI == "" || len(held) == 0 {
		return found
	}
	return found + "; " + awaitGPURelease(ctx, a.cfg.NvidiaSMI, held, a.cfg.ReleaseTimeout)
}

// report ships the rest of an ended attempt's output and its last
// progress, then its result.
func (a *Agent) report(ctx context.Context, at *attempt) {
	at.mu.Lock()
	defer at.mu.Unlock()
	if at.result == nil {
		return
	}
	if err := a.shipLocked(ctx, at); err != nil {
		return
	}
	if err := a.sendProgress(ctx, at); err != nil {
		return
	}
	res := *at.result // a copy: an earlier send of it may still be encoding
	res.LogSize = at.sent
	_ = a.send(ctx, wire.TypeJobResult, &res)
}

// sendProgress sends at's latest progress unless the server has it.
func (a *Agent) sendProgress(ctx context.Context, at *attempt) error {
	v, ok := at.progress.pending()
	if !ok {
		return nil
	}
	if err := a.send(ctx, wire.TypeProgress, &wire.Progress{AttemptID: at.id, Progress: at.secrets.Redact(v)}); err != nil {
		return err
	}
	at.progress.sent(v)
	return nil
}

const chunkSize = 64 << 10

// shipLocked sends the output from at.sent (counted from at.logStart) to
// the end of the file.
func (a *Agent) shipLocked(ctx context.Context, at *attempt) error {
	if p, never := at.proc.(*doneProcess); never && !p.output {
		return nil // it ended before it began: no output to look for
	}
	if at.file == nil {
		// Most short jobs print nothing: look before opening.
		if info, err := os.Stat(at.log); err == nil && info.Size()-at.logStart <= at.sent {
			return nil
		}
		f, err := os.Open(at.log)
		if errors.Is(err, os.ErrNotExist) {
			return nil // no output file yet
		}
		if err != nil {
			return err
		}
		at.file = f
	}
	var buf []byte
	for {
		info, err := at.file.Stat()
		if err != nil {
			return err
		}
		if info.Size()-at.logStart <= at.sent {
			return nil
		}
		if buf == nil {
			buf = make([]byte, chunkSize)
		}
		n, err := at.file.ReadAt(buf, at.logStart+at.sent)
		if n > 0 {
			at.scan(buf[:n])
			final := at.result != nil && errors.Is(err, io.EOF) // the whole output is read
			if n = at.secrets.Mask(buf[:n], final); n == 0 {
				return nil // what is there may be the start of a secret: wait for more
			}
			chunk := append([]byte(nil), buf[:n]...)
			if err := a.send(ctx, wire.TypeLog, &wire.Log{AttemptID: at.id, Offset: at.sent, Data: chunk}); err != nil {
				return err
			}
			at.sent += int64(n)
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
	}
}

// scan looks for progress lines in output read at at.sent, past what was
// scanned before (output is shipped again after a reconnect).
func (at *attempt) scan(output []byte) {
	end := at.sent + int64(len(output))
	if end <= at.scanned {
		return
	}
	if v, ok := at.lines.scan(output[max(0, at.scanned-at.sent):]); ok {
		at.progress.set(v)
	}
	at.scanned = end
}

// shipLoop ships the output and the latest progress, when it changed, of
// running attempts every ShipEvery.
func (a *Agent) shipLoop(ctx context.Context) {
	t := time.NewTicker(a.cfg.ShipEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		a.mu.Lock()
		live := make([]*attempt, 0, len(a.attempts))
		for _, at := range a.attempts {
			live = append(live, at)
		}
		a.mu.Unlock()
		for _, at := range live {
			at.mu.Lock()
			if at.result == nil && a.shipLocked(ctx, at) == nil {
				_ = a.sendProgress(ctx, at)
			}
			at.mu.Unlock()
		}
	}
}
