package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/wire"
)

// fakeServer speaks the server's side of the agent protocol for one agent:
// it acknowledges each register with registerAck, records every message
// the agent sends, and sends what a test tells it to. As a standby (see
// standBy) it refuses the agent's WebSocket as a real standby does; told
// to refuse the agent's credential (see refuse), it does so as a real
// server does. With ackResults set it acknowledges each result as it
// arrives.
type fakeServer struct {
	t   *testing.T
	srv *httptest.Server

	mu          sync.Mutex
	registerAck func(n int, reg *wire.Register) *wire.Ack // n: 1 for the first register
	registers   int
	ackResults  bool
	dials       int     // requests for the agent WebSocket
	leader      *string // while set, a standby naming this leader
	refusal     *refusal
	conn        *websocket.Conn
	msgs        []wire.Message
	changed     chan struct{} // closed and replaced when msgs grows
}

func newFakeServer(t *testing.T) *fakeServer {
	t.Helper()
	fs := &fakeServer{t: t, changed: make(chan struct{}),
		registerAck: func(int, *wire.Register) *wire.Ack { return &wire.Ack{} }}
	fs.srv = httptest.NewServer(http.HandlerFunc(fs.serve))
	t.Cleanup(fs.srv.Close)
	return fs
}

func (fs *fakeServer) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/api/v1/agent" {
		http.NotFound(w, r)
		return
	}
	fs.mu.Lock()
	fs.dials++
	leader, refused := fs.leader, fs.refusal
	fs.mu.Unlock()
	if refused != nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(refused.status)
		_ = json.NewEncoder(w).Encode(berth.ErrorBody{Error: &berth.Error{Code: refused.code, Message: refused.message}})
		return
	}
	if leader != nil {
		w.Header().Set(berth.LeaderHeader, *leader)
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, `{"error":{"code":"unavailable","message":"this server is a standby; the leader is %s"}}`, *leader)
		return
	}
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer c.CloseNow()
	c.SetReadLimit(16 << 20) // as the server's
	ctx := r.Context()
	for first := true; ; first = false {
		_, data, err := c.Read(ctx)
		if err != nil {
			return
		}
		msgs, err := wire.DecodeFrame(data)
		if err != nil {
			fs.t.Errorf("agent sent a bad frame: %v", err)
			return
		}
		for _, m := range msgs {
			fs.record(m)
			if err := fs.ackResult(ctx, c, m); err != nil {
				return
			}
			if reg, ok := m.Body.(*wire.Register); ok && first {
				fs.mu.Lock()
				fs.registers++
				ack := fs.registerAck(fs.registers, reg)
				fs.conn = c
				fs.mu.Unlock()
				ack.Of, ack.Lease, ack.Heartbeat = wire.AckRegister, time.Minute, 50*time.Millisecond
				frame, _ := wire.Encode(wire.TypeAck, ack)
				if err := c.Write(ctx, websocket.MessageText, frame); err != nil {
					return
				}
			}
		}
	}
}

// ackResult acknowledges m on c if it is a result and the server
// acknowledges results.
func (fs *fakeServer) ackResult(ctx context.Context, c *websocket.Conn, m wire.Message) error {
	res, ok := m.Body.(*wire.JobResult)
	fs.mu.Lock()
	ack := ok && fs.ackResults
	fs.mu.Unlock()
	if !ack {
		return nil
	}
	frame, _ := wire.Encode(wire.TypeAck, &wire.Ack{Of: wire.AckResult, AttemptID: res.AttemptID})
	return c.Write(ctx, websocket.MessageText, frame)
}

func (fs *fakeServer) record(m wire.Message) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.msgs = append(fs.msgs, m)
	close(fs.changed)
	fs.changed = make(chan struct{})
}

// send sends one message to the agent on its current session.
func (fs *fakeServer) send(typ string, payload any) {
	fs.t.Helper()
	fs.mu.Lock()
	c := fs.conn
	fs.mu.Unlock()
	frame, err := wire.Encode(typ, payload)
	if err != nil {
		fs.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Write(ctx, websocket.MessageText, frame); err != nil {
		fs.t.Fatalf("send %s: %v", typ, err)
	}
}

// standBy makes the server a standby naming leader ("" for none).
func (fs *fakeServer) standBy(leader string) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.leader = &leader
}

// refusal is how a server refuses an agent's credential.
type refusal struct {
	status        int // 401 or 403
	code, message string
}

// refuse makes the server refuse the agent's WebSocket from now on: with
// 401 or 403 (status) saying message, as a real server refuses a
// credential that is missing, unknown or revoked (401) or that may not
// speak the agent protocol (403).
func (fs *fakeServer) refuse(status int, message string) {
	code := berth.ECodeUnauthorized
	if status == http.StatusForbidden {
		code = berth.ECodeForbidden
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.refusal = &refusal{status: status, code: code, message: message}
}

// lead makes a standby the leader.
func (fs *fakeServer) lead() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.leader = nil
}

// dialed returns how many times the agent asked for its WebSocket.
func (fs *fakeServer) dialed() int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.dials
}

// dropSession closes the agent's session, as a restarted server would.
func (fs *fakeServer) dropSession() {
	fs.mu.Lock()
	c := fs.conn
	fs.conn = nil
	fs.mu.Unlock()
	c.CloseNow()
}

// await returns the first message the agent sent that matches, failing the
// test if none comes within 30s.
func (fs *fakeServer) await(what string, match func(wire.Message) bool) wire.Message {
	fs.t.Helper()
	return fs.awaitFrom(0, what, match)
}

// awaitFrom is await for the messages the agent sent after the first from.
func (fs *fakeServer) awaitFrom(from int, what string, match func(wire.Message) bool) wire.Message {
	fs.t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		fs.mu.Lock()
		msgs, changed := fs.msgs[from:], fs.changed
		fs.mu.Unlock()
		if i := slices.IndexFunc(msgs, match); i >= 0 {
			return msgs[i]
		}
		select {
		case <-changed:
		case <-timeout:
			fs.t.Fatalf("the agent sent no %s within 30s", what)
		}
	}
}

// sent returns every message the agent has sent that matches.
func (fs *fakeServer) sent(match func(wire.Message) bool) []wire.Message {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	var out []wire.Message
	for _, m := range fs.msgs {
		if match(m) {
			out = append(out, m)
		}
	}
	return out
}

// nextHeartbeat awaits the first heartbeat the agent sends after the call.
func (fs *fakeServer) nextHeartbeat() *wire.Heartbeat {
	fs.t.Helper()
	fs.mu.Lock()
	from := len(fs.msgs)
	fs.mu.Unlock()
	return fs.awaitFrom(from, "heartbeat", func(m wire.Message) bool {
		_, ok := m.Body.(*wire.Heartbeat)
		return ok
	}).Body.(*wire.Heartbeat)
}

// result awaits the result of attempt id.
func (fs *fakeServer) result(id string) *wire.JobResult {
	fs.t.Helper()
	return fs.await("result of "+id, func(m wire.Message) bool {
		r, ok := m.Body.(*wire.JobResult)
		return ok && r.AttemptID == id
	}).Body.(*wire.JobResult)
}

// assign starts an attempt and awaits the agent's acceptance.
func (fs *fakeServer) assign(m *wire.JobAssign) {
	fs.t.Helper()
	if m.JobID == "" {
		m.JobID = "j-" + m.AttemptID
	}
	if m.Grace == 0 {
		m.Grace = 200 * time.Millisecond
	}
	fs.send(wire.TypeJobAssign, m)
	fs.await("job_accepted for "+m.AttemptID, func(msg wire.Message) bool {
		a, ok := msg.Body.(*wire.JobAccepted)
		return ok && a.AttemptID == m.AttemptID
	})
}

// output awaits output of attempt id containing want and returns that
// chunk.
func (fs *fakeServer) output(id, want string) string {
	fs.t.Helper()
	return string(fs.await(fmt.Sprintf("output %q from %s", want, id), func(m wire.Message) bool {
		l, ok := m.Body.(*wire.Log)
		return ok && l.AttemptID == id && bytes.Contains(l.Data, []byte(want))
	}).Body.(*wire.Log).Data)
}

// lockedBuffer is a log destination the agent and the test share.
type lockedBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{} // closed and replaced on every write; nil until awaited
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.changed != nil {
		close(b.changed)
		b.changed = nil
	}
	return b.buf.Write(p)
}

// await waits until want occurs n times in what was written, failing the
// test if it does not within 30s.
func (b *lockedBuffer) await(t *testing.T, want string, n int) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		b.mu.Lock()
		found := strings.Count(b.buf.String(), want)
		if b.changed == nil {
			b.changed = make(chan struct{})
		}
		changed := b.changed
		b.mu.Unlock()
		if found >= n {
			return
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("the agent logged %q %d times within 30s, want %d:\n%s", want, found, n, b.String())
		}
	}
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// newAgent makes an agent of host "box" against fs; configure adjusts its
// configuration. Stopping, it waits at most 100ms for results to be
// acknowledged: the fake server acknowledges none unless told to.
func newAgent(t *testing.T, fs *fakeServer, configure func(*Config)) (*Agent, *lockedBuffer) {
	t.Helper()
	logs := &lockedBuffer{}
	cfg := Config{Server: fs.srv.URL, DataDir: t.TempDir(), Host: "box", ShipEvery: 20 * time.Millisecond,
		ReportTimeout: 100 * time.Millisecond, Log: slog.New(slog.NewTextHandler(logs, nil))}
	if configure != nil {
		configure(&cfg)
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a, logs
}

// agentRun is one call of an agent's Run.
type agentRun struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when Run has returned
	err    error         // Run's, once done
}

// runUntil calls a.Run until stop is called or the test ends.
func runUntil(t *testing.T, a *Agent) *agentRun {
	ctx, cancel := context.WithCancel(context.Background())
	r := &agentRun{cancel: cancel, done: make(chan struct{})}
	go func() { r.err = a.Run(ctx); close(r.done) }()
	t.Cleanup(func() { r.stop() })
	return r
}

// stop ends Run's context and returns Run's error.
func (r *agentRun) stop() error {
	r.cancel()
	<-r.done
	return r.err
}

// ended waits for Run to return by itself and returns its error, failing
// the test if it does not within 30s.
func (r *agentRun) ended(t *testing.T) error {
	t.Helper()
	select {
	case <-r.done:
		return r.err
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return within 30s")
		return nil
	}
}

// awaitRegistered waits for a, which r runs, to register, failing the test
// if Run ends first or a does not register within 30s.
func (r *agentRun) awaitRegistered(t *testing.T, a *Agent) {
	t.Helper()
	select {
	case <-a.Registered():
	case <-r.done:
		t.Fatalf("Run ended before registering: %v", r.err)
	case <-time.After(30 * time.Second):
		t.Fatal("the agent did not register within 30s")
	}
}

// startAgent runs an agent of host "box" against fs until the test ends
// and waits for it to register; configure adjusts its configuration. Run
// must end without error.
func startAgent(t *testing.T, fs *fakeServer, configure func(*Config)) (*Agent, *lockedBuffer) {
	t.Helper()
	a, logs := newAgent(t, fs, configure)
	r := runUntil(t, a)
	t.Cleanup(func() {
		if err := r.stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	r.awaitRegistered(t, a)
	return a, logs
}

// checkResult compares a result with what is expected.
func checkResult(t *testing.T, r *wire.JobResult, state berth.AttemptState, cause string, code *int, reason string) {
	t.Helper()
	if r.State != state || r.Cause != cause || r.Reason != reason || (r.ExitCode == nil) != (code == nil) ||
		(code != nil && *r.ExitCode != *code) {
		gotCode := "nil"
		if r.ExitCode != nil {
			gotCode = fmt.Sprint(*r.ExitCode)
		}
		t.Fatalf("result = {%s cause %q exit %s %q}, want {%s cause %q exit %v %q}",
			r.State, r.Cause, gotCode, r.Reason, state, cause, deref(code), reason)
	}
}

func deref(p *int) any {
	if p == nil {
		return "nil"
	}
	return *p
}

func intp(n int) *int { return &n }

// pidsIn parses the pids a script wrote, one per line.
func pidsIn(t *testing.T, path string) []int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read pids: %v", err)
	}
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("pids file holds %q", data)
		}
		pids = append(pids, pid)
	}
	return pids
}

// readFile returns the content of path, failing the test if it cannot.
func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
