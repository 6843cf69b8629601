package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/client"
)

// outputWatch is an output destination a test can wait on.
type outputWatch struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{} // closed and replaced on every write
}

func newOutputWatch() *outputWatch { return &outputWatch{changed: make(chan struct{})} }

func (w *outputWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	close(w.changed)
	w.changed = make(chan struct{})
	return w.buf.Write(p)
}

func (w *outputWatch) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// await waits until what was written holds want, failing the test if it
// does not within 60s.
func (w *outputWatch) await(t *testing.T, what, want string) {
	t.Helper()
	timeout := time.After(60 * time.Second)
	for {
		w.mu.Lock()
		found, changed := strings.Contains(w.buf.String(), want), w.changed
		w.mu.Unlock()
		if found {
			return
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("%s: no %q within 60s in:\n%s", what, want, w)
		}
	}
}

// TestUpStopsItsAgentsBeforeItsServer runs berth up with one agent and a
// job that traps SIGTERM, then interrupts it (Ctrl-C ends its context):
// the agent stops the job and reports it before the server stops. The
// server, started again on the data dir, has the job back in the queue
// (no retry spent: it has none) with the attempt's end and the output the
// job printed after SIGTERM.
func TestUpStopsItsAgentsBeforeItsServer(t *testing.T) {
	t.Parallel()
	data := filepath.Join(t.TempDir(), "data")
	ctx := context.Background()
	url, _, interrupt := upInProcess(t, data, "--agents", "1", "--gpus", "0", "--demo=false")
	c := client.New(url, "", nil)
	req := berth.SubmitRequest{JobSpec: berth.DefaultJobSpec()}
	req.Command = berth.Argv{"sh", "-c", `trap 'echo got TERM; exit 143' TERM; echo start; sleep 300 & wait`}
	jobs, err := c.Submit(ctx, &req)
	if err != nil {
		t.Fatal(err)
	}
	id := jobs[0].ID
	output := newOutputWatch()
	follow, unfollow := context.WithCancel(ctx)
	go func() { _ = c.Logs(follow, id, client.LogOptions{Follow: true}, output) }()
	output.await(t, "the job's output", "start")
	unfollow()

	interrupt()

	rs, err := startServer(context.Background(), &serverConfig{DataDir: data, Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close(context.Background()) })
	c = client.New(rs.URL, "", nil)
	d, err := c.Job(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	code, _ := berth.CauseExitCode(berth.CauseShutdown)
	var ends []string
	for _, a := range d.AttemptList {
		ends = append(ends, fmt.Sprintf("%s (exit %s: %s)", a.State, exitDesc(a.ExitCode), a.Reason))
	}
	if d.State != berth.JobPending || len(d.AttemptList) != 1 || d.AttemptList[0].ExitCode == nil || *d.AttemptList[0].ExitCode != code {
		t.Fatalf("job %s after attempts %q; want pending after one that exited %d", d.State, ends, code)
	}
	var logs bytes.Buffer
	if err := c.Logs(context.Background(), id, client.LogOptions{}, &logs); err != nil || !strings.Contains(logs.String(), "got TERM") {
		t.Fatalf("logs %q (err %v); want the output printed after SIGTERM", logs.String(), err)
	}
}

// exitDesc is an exit code, or "none".
func exitDesc(code *int) string {
	if code == nil {
		return "none"
	}
	return fmt.Sprint(*code)
}

// upInProcess runs berth up on data with args and returns once it is
// ready: its URL, its output, and interrupt, which stops it as Ctrl-C does
// and fails the test unless it exits 0 within 60s.
func upInProcess(t *testing.T, data string, args ...string) (url string, stdout *outputWatch, interrupt func()) {
	t.Helper()
	stdout, stderr := newOutputWatch(), newOutputWatch()
	creds := filepath.Join(t.TempDir(), "credentials.json")
	m := &Main{Stdout: stdout, Stderr: stderr, Getenv: func(k string) string {
		if k == "BERTH_CREDENTIALS" {
			return creds
		}
		return ""
	}}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	exit := make(chan int, 1)
	go func() {
		exit <- m.Run(ctx, append([]string{"up", "--data-dir", data, "--listen", "127.0.0.1:0"}, args...))
	}()
	stdout.await(t, "berth up", "Ready.")
	url = regexp.MustCompile(`berth server on (\S+)`).FindStringSubmatch(stdout.String())[1]
	return url, stdout, func() {
		t.Helper()
		cancel()
		select {
		case code := <-exit:
			if code != 0 {
				t.Fatalf("berth up exited %d:\n%s", code, stderr)
			}
		case <-time.After(60 * time.Second):
			t.Fatal("berth up did not stop within 60s of its interruption")
		}
	}
}

// TestUpRunsTheDemoOnItsFirstStart starts berth up twice on one data dir:
// the first start runs the demo job, the second does not add another
// unless --demo is given.
func TestUpRunsTheDemoOnItsFirstStart(t *testing.T) {
	t.Parallel()
	data := filepath.Join(t.TempDir(), "data")
	demos := func(url string) int {
		t.Helper()
		list, err := client.New(url, "", nil).Jobs(context.Background(), client.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, j := range list.Jobs {
			if j.Name == "demo" {
				n++
			}
		}
		return n
	}
	for i, tc := range []struct {
		args  []string
		demos int
	}{
		{[]string{"--agents", "1", "--gpus", "0"}, 1},
		{[]string{"--agents", "1", "--gpus", "0"}, 1},
		{[]string{"--agents", "1", "--gpus", "0", "--demo"}, 2},
	} {
		url, stdout, interrupt := upInProcess(t, data, tc.args...)
		ran := strings.Contains(stdout.String(), "demo job")
		if got := demos(url); got != tc.demos || ran != (i != 1) {
			t.Errorf("start %d (%q): %d demo jobs, demo shown %v; want %d, shown %v", i+1, tc.args, got, ran, tc.demos, i != 1)
		}
		if i == 0 { // the job names the host it ran on as berth up does
			ran := regexp.MustCompile(`attempt \S+ on (\S+)\n`).FindStringSubmatch(stdout.String())
			ended := regexp.MustCompile(`succeeded on (\S+)\n`).FindStringSubmatch(stdout.String())
			if ran == nil || ended == nil || ran[1] != ended[1] {
				t.Errorf("the demo's host %q and where it succeeded %q differ in:\n%s", ran, ended, stdout)
			}
		}
		interrupt()
	}
}

// TestUpOnABusyPortLeavesNoDataDir: berth up on an address in use fails
// with the address named and creates nothing, so that its next start is
// still the first (it shows the admin token and runs the demo).
func TestUpOnABusyPortLeavesNoDataDir(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	data := filepath.Join(t.TempDir(), "data")
	var stdout, stderr bytes.Buffer
	m := &Main{Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }}
	code := m.Run(t.Context(), []string{"up", "--data-dir", data, "--listen", busy.Addr().String(), "--agents", "0"})
	if code != exitUsage || !strings.Contains(stderr.String(), "address already in use") {
		t.Errorf("berth up on a busy port: exit %d, %q; want %d naming the address", code, stderr.String(), exitUsage)
	}
	if _, err := os.Stat(data); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("data dir after the failed start: %v, want none", err)
	}
}
