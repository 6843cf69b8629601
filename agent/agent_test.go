package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/auth"
	"github.com/berth-dev/berth/internal/dirlock"
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

// TestSecondAgentOnADataDirIsRefused starts a second agent on the data dir
// of one that runs an attempt: it is refused, naming the dir, and does not
// kill that attempt as one a previous agent left behind.
func TestSecondAgentOnADataDirIsRefused(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t)
	var dir string
	startAgent(t, fs, func(c *Config) { dir = c.DataDir })
	pidFile := filepath.Join(t.TempDir(), "pid")
	fs.assign(&wire.JobAssign{AttemptID: "a1", Command: []string{"sh", "-c", "echo $$ > " + pidFile + "; echo ready; exec sleep 1000"}})
	fs.output("a1", "ready")
	_, err := New(Config{Server: fs.srv.URL, DataDir: dir, Host: "box"})
	if !errors.Is(err, dirlock.ErrInUse) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("second New on %s: got %v, want an in-use error naming the dir", dir, err)
	}
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("the first agent's attempt (pid %d) is gone after the second agent was refused: %v", pid, err)
	}
}

func TestAgentBudget(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t)
	startAgent(t, fs, nil)
	fs.assign(&wire.JobAssign{AttemptID: "a1", Command: []string{"sleep", "1000"}, MaxRuntime: 200 * time.Millisecond})
	checkResult(t, fs.result("a1"), berth.AttemptFailed, berth.CauseBudget, intp(75), "max_runtime exceeded (200ms)")
}

func TestAgentStall(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t)
	startAgent(t, fs, nil)
	fs.assign(&wire.JobAssign{AttemptID: "a1", Command: []string{"sh", "-c", "echo loading; sleep 1000"},
		StallTimeout: 300 * time.Millisecond})
	checkResult(t, fs.result("a1"), berth.AttemptFailed, berth.CauseStall, intp(76), "stalled: no output and no progress for 300ms")
}

func TestAgentSendsProgressFromOutput(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t)
	a, _ := startAgent(t, fs, nil)
	// Past the first 64 KiB read, so that the lines cross a read's end;
	// one write with two values, of which only the latest is sent. Then
	// another once the test has seen that.
	fs.assign(&wire.JobAssign{AttemptID: "a1", Command: []string{"sh", "-c",
		`mkfifo next; yes filler | head -c 65530; printf '\nBERTH_PROGRESS 0.25\nBERTH_PROGRESS 0.5\n'; read x <next; echo "BERTH_PROGRESS done"; sleep 1000`}})
	isProgress := func(v string) func(wire.Message) bool {
		return func(m wire.Message) bool {
			p, ok := m.Body.(*wire.Progress)
			return ok && p.AttemptID == "a1" && (v == "" || p.Progress == v)
		}
	}
	fs.await("progress 0.5", isProgress("0.5"))
	if err := os.WriteFile(filepath.Join(a.work.attDir, "a1", "next"), []byte("go\n"), 0); err != nil {
		t.Fatal(err)
	}
	fs.await("progress done", isProgress("done"))
	fs.send(wire.TypeJobCancel, &wire.JobCancel{AttemptID: "a1", Reason: "cancelled by alice"})
	checkResult(t, fs.result("a1"), berth.AttemptCancelled, "", nil, "cancelled by alice")
	var values []string
	for _, m := range fs.sent(isProgress("")) {
		values = append(values, m.Body.(*wire.Progress).Progress)
	}
	if !slices.Equal(values, []string{"0.5", "done"}) {
		t.Fatalf("progress sent: %q, want [0.5 done]", values)
	}
}

func TestAgentSendsLastProgressBeforeResult(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t)
	startAgent(t, fs, func(c *Config) { c.ShipEvery = time.Hour }) // nothing is shipped while it runs
	fs.assign(&wire.JobAssign{AttemptID: "a1", Command: []string{"sh", "-c", `echo "BERTH_PROGRESS 1"`}})
	checkResult(t, fs.result("a1"), berth.AttemptSucceeded, "", intp(0), "")
	var order []string
	for _, m := range fs.sent(func(m wire.Message) bool { return m.Type == wire.TypeProgress || m.Type == wire.TypeJobResult }) {
		order = append(order, m.Type)
		if p, ok := m.Body.(*wire.Progress); ok && p.Progress != "1" {
			t.Fatalf("progress = %q, want 1", p.Progress)
		}
	}
	if !slices.Equal(order, []string{wire.TypeProgress, wire.TypeJobResult}) {
		t.Fatalf("the agent sent %q, want the progress, then the result", order)
	}
}

// progressURL returns the BERTH_PROGRESS_URL an attempt printed as
// "url=URL.".
func progressURL(t *testing.T, fs *fakeServer, id string) string {
	t.Helper()
	out := fs.output(id, "url=")
	return out[strings.Index(out, "url=")+4 : strings.Index(out, ".\n")]
}

func TestAgentProgressEndpointKeepsStallAway(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t)
	startAgent(t, fs, nil)
	done := filepath.Join(t.TempDir(), "done")
	// Silent after printing its URL, with an 800ms stall timeout: only the
	// reports posted to the URL over 1.2s keep it from stalling.
	fs.assign(&wire.JobAssign{AttemptID: "a1", StallTimeout: 800 * time.Millisecond, Command: []string{"sh", "-c",
		`echo "url=$BERTH_PROGRESS_URL."; while [ ! -e ` + done + ` ]; do sleep 0.05; done`}})
	u := progressURL(t, fs, "a1")
	for i := range 10 {
		resp, err := http.Post(u, "text/plain", strings.NewReader("0."+strconv.Itoa(i)))
		if err != nil || resp.StatusCode != http.StatusNoContent {
			t.Fatalf("report %d: %v %v", i, resp, err)
		}
		resp.Body.Close()
		time.Sleep(120 * time.Millisecond) // the pace of a slow job's reports
	}
	if err := os.WriteFile(done, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	checkResult(t, fs.result("a1"), berth.AttemptSucceeded, "", intp(0), "")
	fs.await("progress 0.9", func(m wire.Message) bool {
		p, ok := m.Body.(*wire.Progress)
		return ok && p.AttemptID == "a1" && p.Progress == "0.9"
	})
}

func TestAgentProgressEndpoint(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t)
	startAgent(t, fs, nil)
	fs.assign(&wire.JobAssign{AttemptID: "a1", Command: []string{"sh", "-c", `echo "url=$BERTH_PROGRESS_URL."; sleep 1000`}})
	u := progressURL(t, fs, "a1")
	if !strings.HasPrefix(u, "http://127.0.0.1:") || !strings.Contains(u, "/v1/progress/a1/") {
		t.Fatalf("BERTH_PROGRESS_URL = %q, want http://127.0.0.1:PORT/v1/progress/a1/TOKEN", u)
	}
	base, token := u[:strings.LastIndex(u, "/a1/")], u[strings.LastIndex(u, "/")+1:]
	for _, tc := range []struct {
		name, method, url, body string
		want                    int
	}{
		{"report", "POST", u, "0.5", http.StatusNoContent},
		{"trimmed 1 KiB", "POST", u, strings.Repeat("x", maxProgress) + "\n", http.StatusNoContent},
		{"empty", "POST", u, "", http.StatusBadRequest},
		{"blank", "POST", u, " \n", http.StatusBadRequest},
		{"over 1 KiB", "POST", u, strings.Repeat("x", maxProgress+1), http.StatusBadRequest},
		{"far over 1 KiB", "POST", u, strings.Repeat("x", 1<<20), http.StatusBadRequest},
		{"GET", "GET", u, "", http.StatusMethodNotAllowed},
		{"PUT", "PUT", u, "0.6", http.StatusMethodNotAllowed},
		{"wrong token", "POST", base + "/a1/" + strings.ToLower(token), "0.7", http.StatusNotFound},
		{"no token", "POST", base + "/a1/", "0.7", http.StatusNotFound},
		{"unknown attempt", "POST", base + "/a2/" + token, "0.7", http.StatusNotFound},
		{"last", "POST", u, "step 9/10", http.StatusNoContent},
	} {
		req, err := http.NewRequest(tc.method, tc.url, strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: %s = %d, want %d", tc.name, tc.method, resp.StatusCode, tc.want)
		}
	}
	fs.await("progress from the last report", func(m wire.Message) bool {
		p, ok := m.Body.(*wire.Progress)
		return ok && p.AttemptID == "a1" && p.Progress == "step 9/10"
	})
}

func TestAgentHardStop(t *testing.T) {
	t.Parallel()
	smi := newStateSMI(t)
	smi.set("gpus", "0, GPU-aaaa, 0\n1, GPU-bbbb, 0\n")
	fs := newFakeServer(t)
	a, _ := startAgent(t, fs, func(c *Config) { c.GPUs, c.NvidiaSMI, c.ReleaseTimeout = testGPUs, smi.path, 300*time.Millisecond })
	const reason = "stopped by operator: queue gpu of box turned off (hard) by alice"

	// A process tree: a child and a grandchild, both ignoring SIGTERM.
	fs.assign(&wire.JobAssign{AttemptID: "a1", Queue: "gpu", GPUs: []int{0, 1}, Command: []string{"sh", "-c",
		`trap "" TERM; sh -c 'sleep 1000 & echo $! >grandchild; wait' & echo $! >child; while [ ! -s grandchild ]; do sleep 0.01; done; echo ready; wait`}})
	fs.output("a1", "ready")
	dir := filepath.Join(a.work.attDir, "a1")
	pids := append(pidsIn(t, filepath.Join(dir, "child")), pidsIn(t, filepath.Join(dir, "grandchild"))...)
	fs.send(wire.TypeJobCancel, &wire.JobCancel{AttemptID: "a1", Reason: reason, Cause: berth.CauseOperator})
	checkResult(t, fs.result("a1"), berth.AttemptCancelled, berth.CauseOperator, intp(79),
		reason+"; processes gone; GPU memory released on GPU 0,1")
	assertDead(t, pids...)

	smi.set("apps", "GPU-bbbb, 4242, 500\n")
	fs.assign(&wire.JobAssign{AttemptID: "a2", Queue: "gpu", GPUs: []int{1}, Command: []string{"sleep", "1000"}})
	fs.send(wire.TypeJobCancel, &wire.JobCancel{AttemptID: "a2", Reason: reason, Cause: berth.CauseOperator})
	checkResult(t, fs.result("a2"), berth.AttemptCancelled, berth.CauseOperator, intp(79),
		reason+"; processes gone; GPU memory still held on GPU 1 (pid 4242, 500 MiB) after 300ms")
}

func TestConfirmStoppedNamesLingeringProcesses(t *testing.T) {
	t.Parallel()
	s := &supervisor{cfg: &Config{}}
	if got, want := s.confirmStopped(context.Background(), nil, []int{12, 34}), "processes still alive after SIGKILL: pid 12, 34"; got != want {
		t.Fatalf("confirmStopped = %q, want %q", got, want)
	}
}

func TestAgentUserCancelHasNoCause(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t)
	startAgent(t, fs, nil)
	fs.assign(&wire.JobAssign{AttemptID: "a1", Command: []string{"sleep", "1000"}})
	fs.send(wire.TypeJobCancel, &wire.JobCancel{AttemptID: "a1", Reason: "cancelled by bob"})
	checkResult(t, fs.result("a1"), berth.AttemptCancelled, "", nil, "cancelled by bob")
}

func TestAgentControl(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t)
	a, logs := startAgent(t, fs, nil)
	sleep := []string{"sleep", "1000"}
	fs.assign(&wire.JobAssign{AttemptID: "g1", Queue: "gpu", Command: sleep})
	fs.assign(&wire.JobAssign{AttemptID: "c1", Queue: "cpu", Command: sleep})

	// Pushed: gpu off with the hard policy stops g1 only.
	fs.send(wire.TypeControl, &wire.Control{Off: []wire.QueueOff{{Queue: "gpu", Policy: berth.StopHard, RequestedBy: "alice"}}})
	checkResult(t, fs.result("g1"), berth.AttemptCancelled, berth.CauseOperator, intp(79),
		"stopped by operator: queue gpu of box turned off (hard) by alice; processes gone")

	// On heartbeat acks: drain stops nothing; then hard, by "*", stops c1.
	fs.send(wire.TypeAck, &wire.Ack{Of: wire.AckHeartbeat, Control: &wire.Control{Parked: true,
		Off: []wire.QueueOff{{Queue: berth.AllQueues, Policy: berth.StopDrain, RequestedBy: "bob"}}}})
	fs.send(wire.TypeAck, &wire.Ack{Of: wire.AckHeartbeat, Control: &wire.Control{Parked: true,
		Off: []wire.QueueOff{{Queue: berth.AllQueues, Policy: berth.StopHard}}}})
	checkResult(t, fs.result("c1"), berth.AttemptCancelled, berth.CauseOperator, intp(79),
		"stopped by operator: every queue of box turned off (hard); processes gone")
	if !a.Parked() {
		t.Fatal("Parked = false after a control that parks the worker")
	}

	// A queue turned on by name while "*" is off keeps its attempts.
	on := &wire.Control{Off: []wire.QueueOff{{Queue: berth.AllQueues, Policy: berth.StopHard}}, On: []string{"cpu"}}
	fs.send(wire.TypeControl, on)
	fs.assign(&wire.JobAssign{AttemptID: "c2", Queue: "cpu", Command: sleep})
	fs.send(wire.TypeAck, &wire.Ack{Of: wire.AckHeartbeat, Control: on})
	fs.send(wire.TypeJobCancel, &wire.JobCancel{AttemptID: "c2", Reason: "cancelled by carol"})
	checkResult(t, fs.result("c2"), berth.AttemptCancelled, "", nil, "cancelled by carol")
	if a.Parked() {
		t.Fatal("Parked = true after a control that does not park the worker")
	}
	for _, want := range []string{"parked: every queue of this worker is off", "resumed"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the agent did not log %q; its log:\n%s", want, logs)
		}
	}
}

func TestAgentKillsReassignedAttempts(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t)
	fs.registerAck = func(n int, reg *wire.Register) *wire.Ack {
		if n == 2 { // after a reconnect: a2 runs elsewhere now
			return &wire.Ack{Keep: slices.DeleteFunc(slices.Clone(reg.Running), func(id string) bool { return id == "a2" }), Kill: []string{"a2"}}
		}
		return &wire.Ack{}
	}
	startAgent(t, fs, nil)
	sleep := []string{"sleep", "1000"}
	fs.assign(&wire.JobAssign{AttemptID: "a1", Command: sleep})
	fs.assign(&wire.JobAssign{AttemptID: "a2", Command: sleep})
	fs.assign(&wire.JobAssign{AttemptID: "a3", Command: sleep})

	fs.send(wire.TypeAck, &wire.Ack{Of: wire.AckHeartbeat, Kill: []string{"a1"}})
	checkResult(t, fs.result("a1"), berth.AttemptFailed, berth.CauseReassigned, intp(77), reassigned)

	fs.dropSession()
	checkResult(t, fs.result("a2"), berth.AttemptFailed, berth.CauseReassigned, intp(77), reassigned)
	fs.send(wire.TypeJobCancel, &wire.JobCancel{AttemptID: "a3", Reason: "cancelled by dave"})
	checkResult(t, fs.result("a3"), berth.AttemptCancelled, "", nil, "cancelled by dave")
}

func TestAgentGPUHealth(t *testing.T) {
	t.Parallel()
	smi := newStateSMI(t)
	smi.set("gpus", "0, GPU-aaaa, 0\n1, GPU-bbbb, 0\n")
	fs := newFakeServer(t)
	startAgent(t, fs, func(c *Config) { c.GPUs, c.NvidiaSMI, c.HealthEvery = testGPUs, smi.path, 20*time.Millisecond })
	sleep := []string{"sleep", "1000"}
	fs.assign(&wire.JobAssign{AttemptID: "on0", GPUs: []int{0}, Command: sleep})
	fs.assign(&wire.JobAssign{AttemptID: "on1", GPUs: []int{1}, Command: sleep})

	smi.set("gpus", "0, GPU-aaaa, 0\n")
	checkResult(t, fs.result("on1"), berth.AttemptFailed, berth.CauseGPUHealth, intp(78), "gpu health: GPU 1 (GPU-bbbb) disappeared")
	fs.await("a heartbeat naming GPU 1 faulty", func(m wire.Message) bool {
		hb, ok := m.Body.(*wire.Heartbeat)
		return ok && slices.Equal(hb.FaultyGPUs, []int{1}) && slices.Equal(hb.Running, []string{"on0"})
	})

	// GPU 1 is back; the heartbeats carry the GPUs' load.
	smi.set("gpus", "0, GPU-aaaa, 0\n1, GPU-bbbb, 0\n")
	smi.set("stats", "0, 57, 1024\n1, [N/A], 0\n")
	fs.await("a heartbeat with no faulty GPU after the first, with GPU 0's load", func(m wire.Message) bool {
		hb, ok := m.Body.(*wire.Heartbeat)
		return ok && len(hb.FaultyGPUs) == 0 && slices.Equal(hb.Running, []string{"on0"}) &&
			slices.Equal(hb.GPUStats, []berth.GPUStat{{Index: 0, Utilization: 57, MemoryUsed: 1 << 30}})
	})
	fs.send(wire.TypeJobCancel, &wire.JobCancel{AttemptID: "on0", Reason: "cancelled by erin"})
	checkResult(t, fs.result("on0"), berth.AttemptCancelled, "", nil, "cancelled by erin")
}

func TestAgentRejectsUnknownCancelCause(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t)
	startAgent(t, fs, nil)
	fs.assign(&wire.JobAssign{AttemptID: "a1", Command: []string{"sleep", "1000"}})
	fs.send(wire.TypeJobCancel, &wire.JobCancel{AttemptID: "a1", Reason: "because", Cause: "whim"})
	checkResult(t, fs.result("a1"), berth.AttemptCancelled, "", nil, "because")
}

// TestAgentFailsOver gives an agent three servers: the first, a standby,
// names the third as the leader, and the agent registers there without
// trying the second. When the third steps down naming the first, the
// agent reconnects to it with its running attempt, which keeps running.
func TestAgentFailsOver(t *testing.T) {
	t.Parallel()
	first, unsure, third := newFakeServer(t), newFakeServer(t), newFakeServer(t)
	first.standBy(third.srv.URL)
	unsure.standBy("")
	startAgent(t, third, func(c *Config) { c.Server = first.srv.URL + "," + unsure.srv.URL + "," + third.srv.URL })
	isRegister := func(m wire.Message) bool { return m.Type == wire.TypeRegister }
	third.await("register", isRegister)
	third.assign(&wire.JobAssign{AttemptID: "a1", Command: []string{"sleep", "1000"}})

	first.lead()
	third.standBy(first.srv.URL)
	third.dropSession()
	reg := first.await("register", isRegister).Body.(*wire.Register)
	if !slices.Equal(reg.Running, []string{"a1"}) || len(reg.Finished) != 0 {
		t.Fatalf("register after the failover: running %q, finished %q; want running [a1]", reg.Running, reg.Finished)
	}
	first.await("a heartbeat with a1 running", func(m wire.Message) bool {
		hb, ok := m.Body.(*wire.Heartbeat)
		return ok && slices.Equal(hb.Running, []string{"a1"})
	})
	first.send(wire.TypeJobCancel, &wire.JobCancel{AttemptID: "a1", Reason: "cancelled by frank"})
	checkResult(t, first.result("a1"), berth.AttemptCancelled, "", nil, "cancelled by frank")
	if f, u, th := first.dialed(), unsure.dialed(), third.dialed(); f != 2 || u != 0 || th != 2 {
		t.Fatalf("WebSocket requests: first %d, second %d, third %d; want 2, 0, 2", f, u, th)
	}
}

// checkRefused checks that err is Run's refusal by server, with status,
// reason and the credential the agent sent: none, the one given, or the
// one saved in a file (saved).
func checkRefused(t *testing.T, err error, server string, status int, reason string, sent bool, saved string) {
	t.Helper()
	var re *RefusedError
	if !errors.As(err, &re) || !errors.Is(err, ErrRefused) {
		t.Fatalf("Run: %v; want a *RefusedError", err)
	}
	if re.Server != server || re.Status != status || re.Reason != reason || re.Sent != sent || re.Saved != saved {
		t.Fatalf("Run's refusal = %+v; want server %s, status %d, reason %q, sent %v, saved %q",
			*re, server, status, reason, sent, saved)
	}
}

// TestAgentStopsWhenRefused runs an agent without a credential against a
// server that requires one: Run returns the refusal at once, after one
// try, rather than reconnecting forever.
func TestAgentStopsWhenRefused(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t)
	fs.refuse(http.StatusUnauthorized, auth.MsgAuthRequired)
	a, logs := newAgent(t, fs, nil)
	err := runUntil(t, a).ended(t)
	checkRefused(t, err, fs.srv.URL, http.StatusUnauthorized, auth.MsgAuthRequired, false, "")
	want := "agent: the server " + fs.srv.URL + " refused this agent, which has no credential (401): " + auth.MsgAuthRequired
	if err.Error() != want {
		t.Fatalf("Run: %q\nwant %q", err, want)
	}
	if n := fs.dialed(); n != 1 {
		t.Fatalf("the agent asked for its WebSocket %d times, want 1", n)
	}
	if strings.Contains(logs.String(), "reconnecting") {
		t.Fatalf("the agent logged a reconnection:\n%s", logs)
	}
}

// TestAgentStopsWhenItsCredentialIsRevoked runs an attempt on an agent
// whose saved credential the server then refuses (revoked): at its next
// connection Run returns the refusal, naming the file, and has stopped the
// attempt, as at any end of Run.
func TestAgentStopsWhenItsCredentialIsRevoked(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t)
	dir := t.TempDir()
	if err := SaveCredential(dir, "credential-of-box"); err != nil {
		t.Fatal(err)
	}
	a, _ := newAgent(t, fs, func(c *Config) { c.DataDir = dir })
	r := runUntil(t, a)
	r.awaitRegistered(t, a)
	pidFile := filepath.Join(t.TempDir(), "pid")
	fs.assign(&wire.JobAssign{AttemptID: "a1", Command: []string{"sh", "-c", "echo $$ > " + pidFile + "; echo ready; exec sleep 1000"}})
	fs.output("a1", "ready")

	const revoked = "token 01JREVOKED was revoked"
	fs.refuse(http.StatusUnauthorized, revoked)
	fs.dropSession()
	checkRefused(t, r.ended(t), fs.srv.URL, http.StatusUnauthorized, revoked, true, filepath.Join(dir, "credential"))
	assertDead(t, pidsIn(t, pidFile)...)
}

// TestAgentTriesOtherServersWhenOneRefuses gives an agent two servers: the
// first refuses its credential (a standby that has not read a new
// credential yet), the second accepts it, and the agent registers there.
func TestAgentTriesOtherServersWhenOneRefuses(t *testing.T) {
	t.Parallel()
	stale, leader := newFakeServer(t), newFakeServer(t)
	stale.refuse(http.StatusUnauthorized, "token 01JNEW is not in the registry")
	startAgent(t, leader, func(c *Config) { c.Server = stale.srv.URL + "," + leader.srv.URL })
	if n := stale.dialed(); n != 1 {
		t.Fatalf("the refusing server got %d WebSocket requests, want 1", n)
	}
}

// TestAgentStopsWhenTheLeaderRefuses gives an agent a standby, which names
// the leader, and the leader, which refuses its credential (403: it may
// not speak the agent protocol): Run returns the leader's refusal.
func TestAgentStopsWhenTheLeaderRefuses(t *testing.T) {
	t.Parallel()
	standby, leader := newFakeServer(t), newFakeServer(t)
	standby.standBy(leader.srv.URL)
	const why = "alice (role user) may not GET /api/v1/agent: that needs an agent credential (berth agent --join-token) or admin"
	leader.refuse(http.StatusForbidden, why)
	a, _ := newAgent(t, standby, func(c *Config) { c.Server, c.Token = standby.srv.URL+","+leader.srv.URL, "token-of-alice" })
	checkRefused(t, runUntil(t, a).ended(t), leader.srv.URL, http.StatusForbidden, why, true, "")
	if s, l := standby.dialed(), leader.dialed(); s != 1 || l != 1 {
		t.Fatalf("WebSocket requests: standby %d, leader %d; want 1 each", s, l)
	}
}

func TestAgentSecrets(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t)
	a, _ := startAgent(t, fs, nil)
	const value = "s3cr3t-value-42"
	secrets := map[string]string{"KEY": value}
	// The value written in two pieces, the first shipped before the second
	// is written: neither may be shipped in the clear.
	fs.assign(&wire.JobAssign{AttemptID: "s1", Secrets: secrets, Env: map[string]string{"K": "{{SECRET:KEY}}"},
		Command: []string{"sh", "-c", `mkfifo next; echo hello, the key follows; printf 'key=%s' "${K%????}"; read x <next; printf '%s\n' "${K#"${K%????}"}"; ` +
			`echo "BERTH_PROGRESS 0.5 $K"; echo arg={{SECRET:KEY}}; exit 3`}})
	fs.output("s1", "hello")                    // shipped while the start of the value is held back
	ownLog := filepath.Join(a.work.attDir, "s1.log") // not a kept file other attempts append to
	if _, err := os.Stat(ownLog); err != nil {
		t.Fatalf("an attempt with secrets writes %s: %v", ownLog, err)
	}
	if err := os.WriteFile(filepath.Join(a.work.attDir, "s1", "next"), []byte("go\n"), 0); err != nil {
		t.Fatal(err)
	}
	checkResult(t, fs.result("s1"), berth.AttemptFailed, "", intp(3), "exit code 3")
	fs.send(wire.TypeAck, &wire.Ack{Of: wire.AckResult, AttemptID: "s1"})
	// A command whose program is the secret: the start error names it.
	fs.assign(&wire.JobAssign{AttemptID: "s2", Secrets: secrets, Command: []string{"{{SECRET:KEY}}"}})
	if _, err := os.Stat(ownLog); !os.IsNotExist(err) { // the ack came before s2's assignment
		t.Errorf("%s, with a secret's value, is still on disk once shipped (err %v)", ownLog, err)
	}
	res := fs.result("s2")
	// A reference the server sent no value for fails the attempt, naming it.
	fs.assign(&wire.JobAssign{AttemptID: "s3", Command: []string{"echo", "{{SECRET:GONE}}"}})
	gone := fs.result("s3")
	if gone.State != berth.AttemptFailed || !strings.Contains(gone.Reason, "GONE") {
		t.Errorf("a reference without a value: %s %q, want failed naming GONE", gone.State, gone.Reason)
	}

	var shipped strings.Builder
	for _, m := range fs.sent(func(m wire.Message) bool { _, ok := m.Body.(*wire.Log); return ok }) {
		shipped.Write(m.Body.(*wire.Log).Data)
	}
	for _, m := range fs.sent(func(m wire.Message) bool { _, ok := m.Body.(*wire.Progress); return ok }) {
		shipped.WriteString(m.Body.(*wire.Progress).Progress + "\n")
	}
	shipped.WriteString(res.Reason)
	out := shipped.String()
	if strings.Contains(out, value) || strings.Contains(out, value[:len(value)-4]) {
		t.Fatalf("the secret's value was shipped:\n%s", out)
	}
	masked := strings.Repeat("*", len(value))
	for _, want := range []string{"key=" + masked + "\n", "arg=" + masked + "\n", "0.5 ***", `"***"`} {
		if !strings.Contains(out, want) {
			t.Errorf("shipped output lacks %q (the substituted value, masked):\n%s", want, out)
		}
	}
}

func TestAgentAttemptsShareALogFileApart(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t)
	a, _ := startAgent(t, fs, func(c *Config) { c.Slots = 1 })
	for _, id := range []string{"first", "second"} {
		fs.assign(&wire.JobAssign{AttemptID: id, Command: []string{"echo", id}})
		checkResult(t, fs.result(id), berth.AttemptSucceeded, "", intp(0), "")
		fs.send(wire.TypeAck, &wire.Ack{Of: wire.AckResult, AttemptID: id}) // done with the file: the next attempt takes it
	}
	for _, id := range []string{"first", "second"} {
		var shipped strings.Builder
		for _, m := range fs.sent(func(m wire.Message) bool { l, ok := m.Body.(*wire.Log); return ok && l.AttemptID == id }) {
			l := m.Body.(*wire.Log)
			if l.Offset != int64(shipped.Len()) {
				t.Fatalf("%s: a chunk at offset %d after %d bytes", id, l.Offset, shipped.Len())
			}
			shipped.Write(l.Data)
		}
		if got := shipped.String(); got != id+"\n" {
			t.Errorf("%s shipped %q, want only its own output", id, got)
		}
	}
	dir := filepath.Join(a.cfg.DataDir, "logs")
	if names := spares(t, dir); len(names) != 1 || readFile(t, filepath.Join(dir, names[0])) != "first\nsecond\n" {
		t.Errorf("%s holds %v; want one file the second attempt appended to", dir, names)
	}
}
