package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/client"
)

// watchedWriter is a buffer that closes seen once what was written holds
// want.
type watchedWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	seen chan struct{}
}

func newWatchedWriter(want string) *watchedWriter {
	return &watchedWriter{want: want, seen: make(chan struct{})}
}

func (w *watchedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	had := strings.Contains(w.buf.String(), w.want)
	n, err := w.buf.Write(p)
	if !had && strings.Contains(w.buf.String(), w.want) {
		close(w.seen)
	}
	return n, err
}

func (w *watchedWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// TestClientsRideOutAServerRestart runs berth wait and berth logs -f on a
// pending job while its server is down: each says once that it is trying
// again, and once the server is back and the job is cancelled there, ends
// as it would have without the restart.
func TestClientsRideOutAServerRestart(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args     func(id string) []string
		wantCode int
		wantOut  string
		errLines int // the notice, and the line of the exit status
	}{
		{func(id string) []string { return []string{"wait", id} }, exitFailed, "1 cancelled\n", 2},
		{func(id string) []string { return []string{"logs", "-f", id} }, 0, "", 1},
	} {
		t.Run(tc.args("ID")[0], func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			rs, err := startServer(context.Background(), &serverConfig{DataDir: dir, Listen: "127.0.0.1:0"})
			if err != nil {
				t.Fatal(err)
			}
			c := &cli{t: t, url: rs.URL}
			_, out, _ := c.run("submit", "--", "sleep", "1000")
			id := strings.TrimSpace(out)
			if err := rs.Close(context.Background()); err != nil {
				t.Fatal(err)
			}

			stderr := newWatchedWriter("trying again for up to 2m0s")
			var stdout bytes.Buffer
			m := &Main{Stdout: &stdout, Stderr: stderr, Getenv: func(k string) string {
				if k == "BERTH_SERVER" {
					return c.url
				}
				return ""
			}}
			code := make(chan int, 1)
			go func() { code <- m.Run(context.Background(), tc.args(id)) }()
			select {
			case <-stderr.seen:
			case got := <-code:
				t.Fatalf("berth %s with the server down: exit %d, %q; want it to try again", tc.args(id)[0], got, stderr)
			}
			rs, err = startServer(context.Background(), &serverConfig{DataDir: dir, Listen: strings.TrimPrefix(c.url, "http://")})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { rs.Close(context.Background()) })
			if got, _, errOut := c.run("cancel", id); got != 0 {
				t.Fatalf("cancel after the restart: exit %d: %s", got, errOut)
			}
			select {
			case got := <-code:
				if got != tc.wantCode || stdout.String() != tc.wantOut || strings.Count(stderr.String(), "\n") != tc.errLines ||
					strings.Count(stderr.String(), "trying again") != 1 {
					t.Errorf("berth %s across a restart: exit %d, stdout %q, stderr %q; want exit %d, %q and %d lines, one saying it tries again",
						tc.args(id)[0], got, stdout.String(), stderr, tc.wantCode, tc.wantOut, tc.errLines)
				}
			case <-time.After(time.Minute):
				t.Fatalf("berth %s still running a minute after the restart", tc.args(id)[0])
			}
		})
	}
}

// TestInterruptedCommandsExit130 interrupts (Ctrl-C: the context ends)
// commands that wait: each exits 130, as a shell reports an interrupted
// command, without blaming the server.
func TestInterruptedCommandsExit130(t *testing.T) {
	t.Parallel()
	rs, err := startServer(context.Background(), &serverConfig{DataDir: t.TempDir(), Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close(context.Background()) })
	c := &cli{t: t, url: rs.URL}
	_, out, _ := c.run("submit", "--", "sleep", "1000")
	id := strings.TrimSpace(out)
	interrupted, stop := context.WithCancel(context.Background())
	stop()
	for _, args := range [][]string{{"wait", id}, {"logs", "-f", id}, {"submit", "--wait", "--", "true"}} {
		if code, _, errOut := c.runCtx(interrupted, args...); code != exitStopped || errOut != "" {
			t.Errorf("berth %s interrupted: exit %d, stderr %q; want 130 and nothing", strings.Join(args, " "), code, errOut)
		}
	}
}

// TestGaveUpExits124 checks how giving up for want of a server ends a
// command: one line and exit 124, unlike bad input's 2.
func TestGaveUpExits124(t *testing.T) {
	t.Parallel()
	outage := &client.OutageError{For: 2 * time.Minute, Err: errors.New("cannot reach the server at http://x: connection refused")}
	var ee *exitError
	err := gaveUp(fmt.Errorf("wait: %w", outage), "the jobs may still be running")
	if !errors.As(err, &ee) || ee.code != exitTimeout || strings.Contains(ee.msg, "\n") ||
		ee.msg != "no server answered for 2m0s, giving up: cannot reach the server at http://x: connection refused; the jobs may still be running" {
		t.Errorf("gaveUp(outage) = %#v; want exit 124 with one line", err)
	}
	refused := &berth.Error{Code: berth.ECodeNotFound, Message: "no job"}
	if err := gaveUp(refused, "hint"); err != refused {
		t.Errorf("gaveUp(not found) = %v; want the error as it was", err)
	}
}

// TestWaitAllSaysItLeavesServicesOut: berth wait --all waits for the batch
// jobs, not for a service, and says how many services it left out.
func TestWaitAllSaysItLeavesServicesOut(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	if code, _, errOut := c.run("serve", "--name", "svc", "--", "sleep", "1000"); code != 0 {
		t.Fatalf("serve: exit %d: %s", code, errOut)
	}
	_, out, _ := c.run("submit", "--", "sleep", "1000")
	batch := strings.TrimSpace(out)
	if code, out, _ := c.run("wait", "--all", "--timeout", "50ms"); code != exitTimeout ||
		out != "waited for 1 batch job active at the call: 1 still active, 1 service not waited for\n" {
		t.Errorf("wait --all with the batch job pending: exit %d, %q; want %d and the service left out", code, out, exitTimeout)
	}
	if code, _, errOut := c.run("cancel", batch); code != 0 {
		t.Fatalf("cancel: exit %d: %s", code, errOut)
	}
	if code, out, errOut := c.run("wait", "--all", "--timeout", "10s"); code != 0 || out != "no batch jobs to wait for, 1 service not waited for\n" {
		t.Errorf("wait --all with only a service active: exit %d, %q, %q; want 0 and the service left out", code, out, errOut)
	}
}

// TestWaitAllSaysHowManyJobsItWaitedFor: berth wait --all counts the
// batch jobs active at the call and says how many they were; a job that
// had ended before is not among them.
func TestWaitAllSaysHowManyJobsItWaitedFor(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	var ids []string
	for range 3 {
		code, out, errOut := c.run("submit", "--", "sleep", "1000")
		if code != 0 {
			t.Fatalf("submit: exit %d, %q, %q", code, out, errOut)
		}
		ids = append(ids, strings.TrimSpace(out))
	}
	if code, _, errOut := c.run("cancel", ids[0]); code != 0 {
		t.Fatalf("cancel: exit %d: %s", code, errOut)
	}
	want := "waited for 2 batch jobs active at the call: 2 still active\n"
	if code, out, _ := c.run("wait", "--all", "--timeout", "50ms"); code != exitTimeout || out != want {
		t.Errorf("wait --all with 2 of 3 jobs active: exit %d, %q; want %d, %q", code, out, exitTimeout, want)
	}

	// The counts of the jobs that ended while it waited add up to the
	// number it waited for.
	for _, tc := range []struct {
		res  berth.WaitResult
		want string
	}{
		{berth.WaitResult{Done: true, Total: 968, Counts: map[berth.JobState]int{berth.JobSucceeded: 968}},
			"waited for 968 batch jobs active at the call: 968 succeeded"},
		{berth.WaitResult{Done: true, Total: 1, Counts: map[berth.JobState]int{berth.JobFailed: 1}, Services: 2},
			"waited for 1 batch job active at the call: 1 failed, 2 services not waited for"},
		{berth.WaitResult{Total: 10, Counts: map[berth.JobState]int{berth.JobSucceeded: 6, berth.JobCancelled: 1}, Pending: 3},
			"waited for 10 batch jobs active at the call: 6 succeeded, 1 cancelled, 3 still active"},
	} {
		if got := waitSummary(&tc.res, true); got != tc.want {
			t.Errorf("summary of %+v = %q, want %q", tc.res, got, tc.want)
		}
	}
	// Waiting for named jobs says what they did, as before.
	res := berth.WaitResult{Done: true, Total: 2, Counts: map[berth.JobState]int{berth.JobSucceeded: 2}}
	if got := waitSummary(&res, false); got != "2 succeeded" {
		t.Errorf("summary of a wait for ids = %q, want %q", got, "2 succeeded")
	}
}
