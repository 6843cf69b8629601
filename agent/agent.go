// Package agent is the worker side of Berth: it registers with the server
// over the agent WebSocket, runs each assigned attempt as a child process
// group (the agent supervises, the job is a child), ships its output, reports
// its end until the server acknowledges it, and kills its own attempts if it
// cannot reach the server for longer than its lease (self-fencing).
package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/wire"
)

// Config configures an Agent. Server, DataDir and Host are required.
type Config struct {
	Server    string // http://host:7070
	Token     string
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
	ShipEvery time.Duration // how often running output is shipped; default 250ms
	Version   string
}

// Agent runs attempts for one worker. Create it with New and call Run.
type Agent struct {
	cfg      Config
	log      *slog.Logger
	workerID string
	attDir   string
	groups   *GroupJournal

	mu       sync.Mutex
	attempts map[string]*attempt
	out      *wire.Outbox // the current session's, nil while disconnected

	lastContact atomic.Int64 // unix nanos of the last server message
	lease       atomic.Int64 // nanoseconds
	heartbeat   atomic.Int64
	registered  chan struct{} // closed at the first successful register
	regOnce     sync.Once
}

type attempt struct {
	id      string
	dir     string
	scratch bool // dir was made as the working directory
	log     string
	proc    Process

	mu     sync.Mutex // serialises shipping and result sending
	sent   int64
	acked  int64
	result *wire.JobResult // set once ended; kept until acknowledged
	file   *os.File
}

// New prepares an agent: it creates DataDir, loads or makes the worker id
// and kills process groups a previous agent left behind in DataDir.
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
	a := &Agent{cfg: cfg, log: cfg.Log, attDir: filepath.Join(cfg.DataDir, "attempts"),
		attempts: map[string]*attempt{}, registered: make(chan struct{})}
	a.lease.Store(int64(cfg.Lease))
	a.heartbeat.Store(int64(5 * time.Second))
	if err := os.MkdirAll(a.attDir, 0o755); err != nil {
		return nil, fmt.Errorf("agent: data dir: %w", err)
	}
	id, err := loadWorkerID(filepath.Join(cfg.DataDir, "worker-id"))
	if err != nil {
		return nil, err
	}
	a.workerID = id
	journal := filepath.Join(cfg.DataDir, "groups")
	if n, err := KillStale(journal); err != nil {
		return nil, fmt.Errorf("agent: kill stale attempts: %w", err)
	} else if n > 0 {
		a.log.Warn("killed attempts left by a previous agent", "count", n)
	}
	entries, _ := os.ReadDir(a.attDir)
	for _, e := range entries {
		_ = os.RemoveAll(filepath.Join(a.attDir, e.Name()))
	}
	if a.groups, err = OpenGroupJournal(journal); err != nil {
		return nil, fmt.Errorf("agent: %w", err)
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

// Run connects to the server and serves assignments until ctx ends,
// reconnecting with backoff. On return every attempt has been stopped.
func (a *Agent) Run(ctx context.Context) error {
	defer a.groups.Close()
	fenceCtx, stopFence := context.WithCancel(ctx)
	defer stopFence()
	go a.fence(fenceCtx)
	go a.shipLoop(fenceCtx)
	backoff := 100 * time.Millisecond
	for {
		start := time.Now()
		err := a.session(ctx)
		if ctx.Err() != nil {
			a.stopAll("agent shutting down")
			return nil
		}
		if time.Since(start) > 10*time.Second {
			backoff = 100 * time.Millisecond
		}
		a.log.Warn("server connection lost; reconnecting", "err", err, "in", backoff)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			a.stopAll("agent shutting down")
			return nil
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

func (a *Agent) stopAll(reason string) {
	a.mu.Lock()
	procs := make([]Process, 0, len(a.attempts))
	for _, at := range a.attempts {
		if at.proc != nil {
			procs = append(procs, at.proc)
		}
	}
	a.mu.Unlock()
	for _, p := range procs {
		p.Stop(reason)
	}
	for _, p := range procs {
		<-p.Done()
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
			if at.proc != nil {
				select {
				case <-at.proc.Done():
				default:
					a.log.Warn("self-fencing: server unreachable past the lease; killing attempt", "attempt", at.id)
					at.proc.Kill()
				}
			}
		}
		a.mu.Unlock()
	}
}

func (a *Agent) wsURL() string {
	u := strings.TrimSuffix(a.cfg.Server, "/")
	switch {
	case strings.HasPrefix(u, "https://"):
		u = "wss://" + strings.TrimPrefix(u, "https://")
	case strings.HasPrefix(u, "http://"):
		u = "ws://" + strings.TrimPrefix(u, "http://")
	}
	return u + "/api/v1/agent"
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

func (a *Agent) session(ctx context.Context) error {
	hdr := http.Header{}
	if a.cfg.Token != "" {
		hdr.Set("Authorization", "Bearer "+a.cfg.Token)
	}
	dialCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	c, _, err := websocket.Dial(dialCtx, a.wsURL(), &websocket.DialOptions{HTTPHeader: hdr})
	cancel()
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	c.SetReadLimit(16 << 20)
	defer c.CloseNow()
	sctx, cancelSession := context.WithCancel(ctx)
	defer cancelSession()

	reg := &wire.Register{Version: wire.Version, WorkerID: a.workerID, Host: a.cfg.Host, Queues: a.cfg.Queues,
		GPUs: a.cfg.GPUs, CPUs: a.cfg.CPUs, Memory: a.cfg.Memory, Slots: a.cfg.Slots, Labels: a.cfg.Labels, Agent: a.cfg.Version}
	a.mu.Lock()
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
	a.log.Info("registered", "server", a.cfg.Server, "worker", a.workerID, "host", a.cfg.Host)

	// Results the server has not acknowledged yet, each after its output.
	a.mu.Lock()
	var ended []*attempt
	for _, at := range a.attempts {
		if at.proc != nil {
			select {
			case <-at.proc.Done():
				ended = append(ended, at)
			default:
			}
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
		hb := &wire.Heartbeat{}
		a.mu.Lock()
		for id, at := range a.attempts {
			if at.proc != nil {
				select {
				case <-at.proc.Done():
				default:
					hb.Running = append(hb.Running, id)
				}
			}
		}
		a.mu.Unlock()
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
		if at := a.get(m.AttemptID); at != nil && at.proc != nil {
			at.proc.Stop(m.Reason)
		}
	case *wire.Ack:
		switch m.Of {
		case wire.AckHeartbeat:
			a.kill(m.Kill)
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
			a.mu.Lock()
			at := a.attempts[m.AttemptID]
			delete(a.attempts, m.AttemptID)
			a.mu.Unlock()
			if at != nil {
				at.mu.Lock()
				if at.file != nil {
					_ = at.file.Close()
					at.file = nil
				}
				at.mu.Unlock()
				at.removeFiles()
			}
		}
	case *wire.NoWork:
	default:
		a.log.Warn("unexpected message from server", "type", typ)
	}
}

// removeFiles deletes the attempt's log and, if Start made it, its
// scratch directory.
func (at *attempt) removeFiles() {
	_ = os.Remove(at.log)
	if at.scratch {
		_ = os.RemoveAll(at.dir)
	}
}

func (a *Agent) get(id string) *attempt {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.attempts[id]
}

// kill stops attempts the server no longer wants here.
func (a *Agent) kill(ids []string) {
	for _, id := range ids {
		if at := a.get(id); at != nil && at.proc != nil {
			at.proc.Kill()
		}
	}
}

func (a *Agent) start(runCtx, sctx context.Context, m *wire.JobAssign) {
	dir := filepath.Join(a.attDir, m.AttemptID)
	at := &attempt{id: m.AttemptID, dir: dir, scratch: m.Workdir == "", log: dir + ".log"}
	proc, err := a.cfg.Executor.Start(runCtx, Spec{AttemptID: m.AttemptID, JobID: m.JobID, TaskIndex: m.TaskIndex,
		ArrayIndex: m.ArrayIndex, Command: m.Command, Env: m.Env, Workdir: m.Workdir, Dir: dir, LogPath: at.log,
		GPUs: m.GPUs, MaxRuntime: m.MaxRuntime, Grace: m.Grace, Groups: a.groups})
	if err != nil {
		proc = failedProcess(fmt.Sprintf("start: %v", err))
	}
	at.proc = proc
	a.mu.Lock()
	if _, dup := a.attempts[m.AttemptID]; dup {
		a.mu.Unlock()
		proc.Kill()
		return
	}
	a.attempts[m.AttemptID] = at
	a.mu.Unlock()
	_ = a.send(sctx, wire.TypeJobAccepted, &wire.JobAccepted{AttemptID: m.AttemptID})
	go func() {
		<-proc.Done()
		ex := proc.Exit()
		at.mu.Lock()
		at.result = &wire.JobResult{AttemptID: at.id, State: ex.State, ExitCode: ex.ExitCode, Reason: ex.Reason}
		at.mu.Unlock()
		a.report(runCtx, at)
	}()
}

// report ships the rest of an ended attempt's output, then its result.
func (a *Agent) report(ctx context.Context, at *attempt) {
	at.mu.Lock()
	defer at.mu.Unlock()
	if at.result == nil {
		return
	}
	if err := a.shipLocked(ctx, at); err != nil {
		return
	}
	at.result.LogSize = at.sent
	_ = a.send(ctx, wire.TypeJobResult, at.result)
}

const chunkSize = 64 << 10

// shipLocked sends the output from at.sent to the end of the file.
func (a *Agent) shipLocked(ctx context.Context, at *attempt) error {
	if at.file == nil {
		f, err := os.Open(at.log)
		if errors.Is(err, os.ErrNotExist) {
			return nil // no output file (start failed, or the no-op executor)
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
		if info.Size() <= at.sent {
			return nil
		}
		if buf == nil {
			buf = make([]byte, chunkSize)
		}
		n, err := at.file.ReadAt(buf, at.sent)
		if n > 0 {
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

// shipLoop ships the output of running attempts every ShipEvery.
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
			if at.result == nil {
				_ = a.shipLocked(ctx, at)
			}
			at.mu.Unlock()
		}
	}
}
