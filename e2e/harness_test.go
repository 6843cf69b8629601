// Package e2e runs the real berth binary — server and agents as separate
// processes on loopback — and real child processes for jobs.
package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/agent"
	"github.com/berth-dev/berth/client"
	"github.com/berth-dev/berth/internal/freeport"
)

var berthBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "berth-e2e-bin-")
	if err != nil {
		panic(err)
	}
	berthBin = filepath.Join(dir, "berth")
	if prebuilt := os.Getenv("BERTH_E2E_BIN"); prebuilt != "" {
		berthBin = prebuilt // a machine without Go, such as a GPU host given a compiled e2e.test
	} else {
		build := exec.Command("go", "build", "-race", "-o", berthBin, "../cmd/berth")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if os.Getenv("BERTH_E2E_NORACE") != "" {
			build.Args = []string{"go", "build", "-o", berthBin, "../cmd/berth"}
		}
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build berth:", err)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a running berth process.
type proc struct {
	t    *testing.T
	cmd  *exec.Cmd
	out  *lineBuffer
	done chan struct{} // closed once the process has exited and all its output is in out
}

// lineBuffer collects a process's output and lets tests await a line.
type lineBuffer struct {
	mu    sync.Mutex
	lines []string
	wake  chan struct{}
}

func newLineBuffer() *lineBuffer { return &lineBuffer{wake: make(chan struct{})} }

func (b *lineBuffer) add(line string) {
	b.mu.Lock()
	b.lines = append(b.lines, line)
	close(b.wake)
	b.wake = make(chan struct{})
	b.mu.Unlock()
}

// await returns the first line containing substr, waiting up to timeout.
func (b *lineBuffer) await(substr string, timeout time.Duration) (string, bool) {
	deadline := time.After(timeout)
	for {
		b.mu.Lock()
		for _, l := range b.lines {
			if strings.Contains(l, substr) {
				b.mu.Unlock()
				return l, true
			}
		}
		wake := b.wake
		b.mu.Unlock()
		select {
		case <-wake:
		case <-deadline:
			return "", false
		}
	}
}

func (b *lineBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Join(b.lines, "\n")
}

// start runs berth with args; its output is kept and shown if the test fails.
func start(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	return startAs(t, "", name, args...)
}

// startAs is start with BERTH_TOKEN=token.
func startAs(t *testing.T, token, name string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(berthBin, args...)
	cmd.Dir = t.TempDir() // a default --data-dir (.berth) or a job's relative path is not the source tree
	cmd.Env = append(os.Environ(), "BERTH_TOKEN="+token, "BERTH_CREDENTIALS="+filepath.Join(t.TempDir(), "credentials.json"))
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	p := &proc{t: t, cmd: cmd, out: newLineBuffer(), done: make(chan struct{})}
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			p.out.add(sc.Text())
		}
		_, _ = io.Copy(io.Discard, pr) // past a line too long, so the process is never stuck writing
	}()
	go func() {
		_ = cmd.Wait()
		pw.Close()
		<-read // every line is in out once done is closed
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill()
		killLeftJobs(t, args)
		if t.Failed() {
			t.Logf("--- output of %s ---\n%s", name, p.out)
		}
	})
	return p
}

// killLeftJobs kills the jobs still running that an agent started with
// args left behind when it was killed (services outlive their agent by
// design, as they do an agent's restart; the agent's watchdog kills the
// rest), so that no test leaves processes running after it.
func killLeftJobs(t *testing.T, args []string) {
	i := slices.Index(args, "--data-dir")
	if len(args) == 0 || args[0] != "agent" || i < 0 || i+1 >= len(args) {
		return
	}
	if _, err := agent.KillStale(filepath.Join(args[i+1], "groups")); err != nil {
		t.Errorf("killing the jobs agent %s left: %v", args[i+1], err)
	}
}

func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

func (p *proc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		p.kill()
	}
}

// freeAddr returns a loopback address nothing listens on now, which no
// outgoing connection will take (freeport).
func freeAddr(t *testing.T) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(freeport.ForTest(t)))
}

// cluster is a server and its agents, each a berth process.
type cluster struct {
	t      *testing.T
	dir    string
	addr   string
	url    string
	server *proc
	agents map[string]*proc
	c      *client.Client
	args   []string
}

// newCluster starts a server with extra server flags; agents join with addAgent.
func newCluster(t *testing.T, serverArgs ...string) *cluster {
	t.Helper()
	cl := &cluster{t: t, dir: t.TempDir(), addr: freeAddr(t), agents: map[string]*proc{}, args: serverArgs}
	cl.url = "http://" + cl.addr
	cl.c = client.New(cl.url, "", nil)
	cl.startServer()
	return cl
}

func (cl *cluster) startServer() {
	cl.t.Helper()
	args := append([]string{"server", "--data-dir", filepath.Join(cl.dir, "server"), "--listen", cl.addr}, cl.args...)
	cl.server = start(cl.t, "server", args...)
	if _, ok := cl.server.out.await("listening on", 30*time.Second); !ok {
		cl.t.Fatalf("server did not start:\n%s", cl.server.out)
	}
}

// addAgent starts an agent for host with extra flags, two fake T4s unless
// extra gives --gpus (a flag given twice is refused), and waits for its
// worker to take work.
func (cl *cluster) addAgent(host string, extra ...string) *proc {
	cl.t.Helper()
	args := []string{"agent", "--server", cl.url, "--host", host, "--data-dir", filepath.Join(cl.dir, "agent-"+host)}
	if !slices.Contains(extra, "--gpus") {
		args = append(args, "--gpus", "2xT4:16GiB")
	}
	args = append(args, extra...)
	p := start(cl.t, "agent "+host, args...)
	cl.agents[host] = p
	cl.awaitWorker(host, berth.WorkerReady, berth.WorkerBusy)
	return p
}

// awaitWorker waits until the worker with host is in one of states.
func (cl *cluster) awaitWorker(host string, states ...berth.WorkerState) {
	cl.t.Helper()
	cl.eventually(30*time.Second, fmt.Sprintf("worker %s in %v", host, states), func() bool {
		ws, err := cl.c.Workers(context.Background())
		if err != nil {
			return false
		}
		for _, w := range ws {
			for _, st := range states {
				if w.Host == host && w.State == st {
					return true
				}
			}
		}
		return false
	})
}

// eventually polls cond until it holds or timeout passes. It is for
// conditions no event announces (a process gone, a file written).
func (cl *cluster) eventually(timeout time.Duration, what string, cond func() bool) {
	cl.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			cl.t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (cl *cluster) submit(req *berth.SubmitRequest) []*berth.Job {
	cl.t.Helper()
	jobs, err := cl.c.Submit(context.Background(), req)
	if err != nil {
		cl.t.Fatalf("submit: %v", err)
	}
	return jobs
}

func (cl *cluster) job(id string) *berth.JobDetail {
	cl.t.Helper()
	d, err := cl.c.Job(context.Background(), id)
	if err != nil {
		cl.t.Fatalf("job %s: %v", id, err)
	}
	return d
}

func (cl *cluster) awaitState(id string, timeout time.Duration, states ...berth.JobState) *berth.JobDetail {
	cl.t.Helper()
	var d *berth.JobDetail
	cl.eventually(timeout, fmt.Sprintf("job %s in %v", id, states), func() bool {
		d = cl.job(id)
		for _, st := range states {
			if d.State == st {
				return true
			}
		}
		return false
	})
	return d
}

func shellJob(script string) *berth.SubmitRequest {
	req := &berth.SubmitRequest{JobSpec: berth.DefaultJobSpec()}
	req.Command = berth.Argv{"sh", "-c", script}
	return req
}

// alive reports whether a process group still has members.
func alive(pgid int) bool {
	return syscall.Kill(-pgid, 0) == nil
}

// awaitEvent reads the server's event stream from the start until an event
// matches, and returns it.
func (cl *cluster) awaitEvent(timeout time.Duration, what string, match func(map[string]any) bool) map[string]any {
	cl.t.Helper()
	return awaitEventAt(cl.t, cl.url, timeout, what, match)
}

// awaitEventAt reads the event stream of the server at url from the start
// until an event matches, and returns it.
func awaitEventAt(t *testing.T, url string, timeout time.Duration, what string, match func(map[string]any) bool) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/api/v1/events?after=0", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("events: %v", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var e map[string]any
		if json.Unmarshal([]byte(data), &e) == nil && match(e) {
			return e
		}
	}
	t.Fatalf("no event %s within %s", what, timeout)
	return nil
}

// exitCode is the exit status of a command that ended with err.
func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}
