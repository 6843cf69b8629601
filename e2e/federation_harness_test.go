package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/client"
)

// The federation's paths on a peer, as the proxy tells them apart.
const (
	handoffsPath = "/api/v1/federation/handoffs"
	changesPath  = "/api/v1/federation/changes"
	cancelsPath  = "/api/v1/federation/cancels"
)

// federation is three clusters, each its own berth server with its own
// data dir and store: A, the origin, with one CPU-only agent; B, a peer
// with H100s; C, a peer with A100s. A reaches B through proxy, which a
// test can pause; it reaches C directly.
type federation struct {
	t       *testing.T
	a, b, c *cluster
	proxy   *peerProxy
}

// fedOptions shape a federation: extra server flags for B and extra
// berth peer add flags for B (on A).
type fedOptions struct {
	bServer []string
	bPeer   []string
	noC     bool
}

// newFederation starts A, B and C and their agents, mints a peer token
// named a on B and on C, and adds both as peers on A (B through the
// proxy), then waits until A has heard from them.
func newFederation(t *testing.T, o fedOptions) *federation {
	t.Helper()
	f := &federation{t: t}
	f.b = newCluster(t, o.bServer...)
	f.b.addAgent("b1", "--gpus", "2xH100:80GiB")
	f.a = newCluster(t)
	f.a.addAgent("a1", "--gpus", "0")
	f.proxy = newPeerProxy(t, f.b.url)
	f.a.addPeer("b", f.proxy.url, f.b.peerToken("a"), o.bPeer...)
	if !o.noC {
		f.c = newCluster(t)
		f.c.addAgent("c1", "--gpus", "2xA100:40GiB")
		f.a.addPeer("c", f.c.url, f.c.peerToken("a"))
		f.a.awaitPeer("c", berth.PeerReady)
	}
	f.a.awaitPeer("b", berth.PeerReady)
	return f
}

// cli runs berth with args against the server of cl (a loopback admin)
// and fails the test unless it exits 0.
func (cl *cluster) cli(args ...string) string {
	cl.t.Helper()
	return mustCLI(cl.t, "", "", append([]string{"--server", cl.url}, args...)...)
}

// peerToken mints a token of role peer named name on cl with berth token
// create, writes it to a private file and returns the file's path.
func (cl *cluster) peerToken(name string) string {
	cl.t.Helper()
	tok := strings.TrimSpace(cl.cli("token", "create", "--role", "peer", "--name", name))
	if tok == "" || strings.ContainsAny(tok, " \n") {
		cl.t.Fatalf("berth token create --role peer printed %q, want one token", tok)
	}
	path := filepath.Join(cl.t.TempDir(), name+".token")
	if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
		cl.t.Fatal(err)
	}
	return path
}

// addPeer runs berth peer add on cl.
func (cl *cluster) addPeer(name, url, tokenFile string, extra ...string) {
	cl.t.Helper()
	cl.cli(append([]string{"peer", "add", name, "--url", url, "--token-file", tokenFile}, extra...)...)
}

// peers returns berth peers -o json of cl.
func (cl *cluster) peers() map[string]berth.PeerInfo {
	cl.t.Helper()
	var list []berth.PeerInfo
	out := cl.cli("-o", "json", "peers")
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		cl.t.Fatalf("berth peers -o json: %v\n%s", err, out)
	}
	m := map[string]berth.PeerInfo{}
	for _, p := range list {
		m[p.Name] = p
	}
	return m
}

// awaitPeer waits until cl sees peer name in state.
func (cl *cluster) awaitPeer(name string, state berth.PeerState) berth.PeerInfo {
	cl.t.Helper()
	var p berth.PeerInfo
	cl.eventually(time.Minute, fmt.Sprintf("peer %s %s", name, state), func() bool {
		p = cl.peers()[name]
		return p.Peer != nil && p.Status.State == state
	})
	return p
}

// awaitIdlePeer waits until cl counts no active job handed to peer name.
func (cl *cluster) awaitIdlePeer(name string) {
	cl.t.Helper()
	var p berth.PeerInfo
	cl.eventually(30*time.Second, "peer "+name+" with no active jobs", func() bool {
		p = cl.peers()[name]
		return p.Peer != nil && p.Status.State == berth.PeerReady && p.Status.ActiveJobs == 0
	})
}

// awaitHandoff waits until the latest handle of job id on cl is in state,
// and returns the job.
func (cl *cluster) awaitHandoff(id string, state berth.HandoffState) *berth.JobDetail {
	cl.t.Helper()
	var d *berth.JobDetail
	cl.eventually(time.Minute, fmt.Sprintf("job %s %s", id, state), func() bool {
		d = cl.job(id)
		return len(d.Handoffs) > 0 && d.Handoffs[len(d.Handoffs)-1].State == state
	})
	return d
}

// received returns the jobs cl received from origin for the origin's job
// remoteID, whatever their nonce.
func (cl *cluster) received(origin, remoteID string) []*berth.Job {
	cl.t.Helper()
	list, err := cl.c.Jobs(context.Background(), client.ListOptions{})
	if err != nil {
		cl.t.Fatalf("list jobs: %v", err)
	}
	var out []*berth.Job
	for _, j := range list.Jobs {
		if j.Origin != nil && j.Origin.Cluster == origin && j.Origin.RemoteID == remoteID {
			out = append(out, j)
		}
	}
	return out
}

// awaitMirror waits until job id has ended on cl (the origin) and on peer,
// in the same state, and returns both.
func (f *federation) awaitMirror(peer *cluster, id string) (*berth.JobDetail, *berth.Job) {
	f.t.Helper()
	var d *berth.JobDetail
	var r *berth.Job
	f.a.eventually(2*time.Minute, "job "+id+" ended alike on the origin and the peer", func() bool {
		d = f.a.job(id)
		got := peer.received("a", id)
		if len(got) == 0 {
			return false
		}
		r = got[len(got)-1]
		return d.State.Terminal() && d.State == r.State
	})
	return d, r
}

// markedJob is a job that appends a line to its own marks file when it
// starts and then, when gate is not empty, waits for the file gate
// before it exits 0: each line of marks is a run.
func markedJob(marks, gate string) *berth.SubmitRequest {
	script := `echo "$BERTH_JOB_ID" >> ` + marks
	if gate != "" {
		script += `; while [ ! -e ` + gate + ` ]; do sleep 0.05; done`
	}
	return shellJob(script)
}

// runs returns how many times the job that writes marks ran.
func runs(t *testing.T, marks string) int {
	t.Helper()
	data, err := os.ReadFile(marks)
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(data), "\n")
}

// touch creates the file path (a job's gate).
func touch(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// copyDir copies the directory src to dst (which must not exist) with its
// files' modes, as an operator's backup would.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	if out, err := exec.Command("cp", "-a", src, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp -a %s %s: %v\n%s", src, dst, err, out)
	}
}

// peerProxy sits between an origin and a peer on loopback and forwards
// every request, streaming, unseen (a peer that is down is a connection
// closed unanswered); a test can hold one request before it
// reaches the peer, or forward it and hold the peer's answer, and it
// records every answer to a federation path.
type peerProxy struct {
	t      *testing.T
	url    string
	target string
	rp     *httputil.ReverseProxy
	closed chan struct{}

	mu    sync.Mutex
	holds []*hold
	log   []proxied
	paths []string // every request's method and path, as it came
}

// proxied is one federation request the proxy forwarded and its answer
// (status 0: the peer could not be reached).
type proxied struct {
	Method, Path string
	Status       int
	Body         []byte
	At           time.Time
}

// hold pauses the first request that matches it (every one until
// released, with all): before the peer sees it, or, with response, once
// the peer answered it, before the origin gets the answer.
type hold struct {
	match         func(*http.Request) bool
	response, all bool
	arrived       chan struct{} // closed when the first request is held
	release       chan struct{} // closed by Release
	done          chan struct{} // closed once the peer answered the first held request
	arriveOnce    sync.Once
	doneOnce      sync.Once
	answer        proxied       // the peer's answer to the first held request
	first         *http.Request // the first held request, its body in firstBody
	firstBody     []byte
	used          bool
}

func newPeerProxy(t *testing.T, target string) *peerProxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := &peerProxy{t: t, target: target, closed: make(chan struct{})}
	p.rp = httputil.NewSingleHostReverseProxy(u)
	p.rp.FlushInterval = -1 // berth logs -f streams through it
	p.rp.ModifyResponse = func(resp *http.Response) error {
		if !strings.HasPrefix(resp.Request.URL.Path, "/api/v1/federation/") {
			return nil
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		p.record(proxied{Method: resp.Request.Method, Path: resp.Request.URL.Path, Status: resp.StatusCode, Body: body, At: time.Now()})
		return err
	}
	p.rp.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
		if strings.HasPrefix(r.URL.Path, "/api/v1/federation/") {
			p.record(proxied{Method: r.Method, Path: r.URL.Path, At: time.Now()})
		}
		drop(w)
	}
	srv := httptest.NewServer(http.HandlerFunc(p.serve))
	p.url = srv.URL
	t.Cleanup(func() {
		close(p.closed) // releases whatever is still held
		srv.CloseClientConnections()
		srv.Close()
	})
	return p
}

func (p *peerProxy) record(e proxied) {
	p.mu.Lock()
	p.log = append(p.log, e)
	p.mu.Unlock()
}

// Hold pauses the next request for which match holds: before it reaches
// the peer, or, with response, once the peer answered it.
func (p *peerProxy) Hold(response bool, match func(*http.Request) bool) *hold {
	return p.add(&hold{match: match, response: response})
}

// HoldAll pauses every request for which match holds, before it reaches
// the peer, until Release.
func (p *peerProxy) HoldAll(match func(*http.Request) bool) *hold {
	return p.add(&hold{match: match, all: true})
}

func (p *peerProxy) add(h *hold) *hold {
	h.arrived, h.release, h.done = make(chan struct{}), make(chan struct{}), make(chan struct{})
	p.mu.Lock()
	p.holds = append(p.holds, h)
	p.mu.Unlock()
	return h
}

// Await waits until the hold has caught its request, and returns the
// request's URL.
func (h *hold) Await(t *testing.T, timeout time.Duration, what string) *url.URL {
	t.Helper()
	select {
	case <-h.arrived:
	case <-time.After(timeout):
		t.Fatalf("the proxy held no %s within %s", what, timeout)
	}
	return h.first.URL
}

// Replay sends the peer a copy of the request h holds, as a retry of a
// request whose answer was lost would, and returns the answer.
func (p *peerProxy) Replay(h *hold) proxied {
	<-h.arrived
	return p.forward(h.first, h.firstBody)
}

// Release lets the held request go on and returns the peer's answer to
// it once there is one.
func (h *hold) Release(t *testing.T) proxied {
	t.Helper()
	close(h.release)
	h.Await(t, time.Minute, "request")
	select {
	case <-h.done:
	case <-time.After(time.Minute):
		t.Fatal("the peer did not answer the released request within a minute")
	}
	return h.answer
}

func (p *peerProxy) serve(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.paths = append(p.paths, r.Method+" "+r.URL.Path)
	var h *hold
	for _, c := range p.holds {
		if !c.used && c.match(r) {
			h, c.used = c, !c.all
			break
		}
	}
	p.mu.Unlock()
	if h == nil {
		p.rp.ServeHTTP(w, r)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		drop(w)
		return
	}
	arrived := func() { h.arriveOnce.Do(func() { h.first, h.firstBody = r, body; close(h.arrived) }) }
	if !h.response {
		arrived()
		p.wait(h)
	}
	// The origin may be dead by now: the request goes on without it, as
	// one already on the wire would.
	answer := p.forward(r, body)
	h.doneOnce.Do(func() { h.answer = answer; close(h.done) })
	if h.response {
		arrived()
		p.wait(h)
	}
	if answer.Status == 0 {
		drop(w)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(answer.Status)
	_, _ = w.Write(answer.Body)
}

// drop closes the origin's connection unanswered, as the peer's own
// address would when the peer is down: the proxy is not there for the
// origin (a gateway's 502 would be an answer).
func drop(w http.ResponseWriter) {
	if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
		conn.Close()
		return
	}
	w.WriteHeader(http.StatusBadGateway)
}

func (p *peerProxy) wait(h *hold) {
	select {
	case <-h.release:
	case <-p.closed:
	}
}

// forward sends a copy of r with body to the peer, detached from r's
// connection, and records and returns the answer.
func (p *peerProxy) forward(r *http.Request, body []byte) proxied {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := proxied{Method: r.Method, Path: r.URL.Path}
	out, err := http.NewRequestWithContext(ctx, r.Method, p.target+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		p.t.Errorf("proxy: %v", err)
		return e
	}
	out.Header = r.Header.Clone()
	if resp, err := http.DefaultClient.Do(out); err == nil {
		e.Status = resp.StatusCode
		e.Body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	e.At = time.Now()
	p.record(e)
	return e
}

// Answers returns the recorded answers to method path, oldest first.
func (p *peerProxy) Answers(method, path string) []proxied {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []proxied
	for _, e := range p.log {
		if e.Method == method && e.Path == path {
			out = append(out, e)
		}
	}
	return out
}

// Saw reports whether a request for method and path went through.
func (p *peerProxy) Saw(method, path string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Contains(p.paths, method+" "+path)
}

// isHandoff matches a delivery.
func isHandoff(r *http.Request) bool {
	return r.Method == http.MethodPost && r.URL.Path == handoffsPath
}

// handoffAnswers sorts the peer's answers to the deliveries that went
// through the proxy: how many created a job and how many were repeats it
// recognised; any other answer fails the test.
func (p *peerProxy) handoffAnswers(t *testing.T) (created, duplicates int) {
	t.Helper()
	for _, e := range p.Answers(http.MethodPost, handoffsPath) {
		var resp berth.HandoffResponse
		if json.Unmarshal(e.Body, &resp) != nil {
			continue
		}
		switch {
		case e.Status == http.StatusCreated && !resp.Duplicate:
			created++
		case e.Status == http.StatusOK && resp.Duplicate:
			duplicates++
		default:
			t.Errorf("a delivery was answered %d %s", e.Status, e.Body)
		}
	}
	return created, duplicates
}
