package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth"
)

// TestRunRefusesWhatItCannotAttachTo checks that berth run refuses, in one
// line naming the flag or field and storing nothing, what is not one batch
// job to follow: an array, a service, JSON output while attached, bad job
// flags (the same table as berth submit's).
func TestRunRefusesWhatItCannotAttachTo(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	service := filepath.Join(t.TempDir(), "service.yaml")
	if err := os.WriteFile(service, []byte("kind: service\ncommand: [python3, -m, http.server]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--array", "3", "--", "true"}, "--array: berth run runs one job"},
		{[]string{"run", "-o", "json", "--", "true"}, "-o: json goes with --detach"},
		{[]string{"run", "-f", service}, "kind: berth run waits for a batch job"},
		{[]string{"run"}, "command: give the command after --, e.g. berth run --"},
		{[]string{"run", "--gpus", "10000", "--", "true"}, "resources.gpus"},
		{[]string{"run", "--max-runtime", "soon", "--", "true"}, `--max-runtime: "soon" is not a duration`},
	} {
		code, out, errOut := c.run(tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) || out != "" || strings.Count(errOut, "\n") != 1 {
			t.Errorf("berth %s: exit %d, stdout %q, stderr %q; want exit 2 and one line with %q",
				strings.Join(tc.args, " "), code, out, errOut, tc.want)
		}
	}
	if jobs := c.listJobs(); len(jobs) != 0 {
		t.Fatalf("refused runs stored %d jobs", len(jobs))
	}
}

// TestRunDetachJSONPrintsTheJob checks that berth run --detach -o json
// prints the job, as berth submit -o json does.
func TestRunDetachJSONPrintsTheJob(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	jobs := listJSON[berth.Job](c, "run", "--detach", "-o", "json", "--name", "attached", "--", "true")
	if len(jobs) != 1 || jobs[0].Name != "attached" || jobs[0].State != berth.JobPending {
		t.Fatalf("berth run --detach -o json printed %+v, want the one pending job", jobs)
	}
}

// TestRunCancelsAPendingJobOnInterrupt checks that the end of berth run's
// context (Ctrl-C) cancels its job even before the job has started, and
// that berth run then exits 130 once the job has ended.
func TestRunCancelsAPendingJobOnInterrupt(t *testing.T) {
	t.Parallel()
	c := newCLI(t) // no agents: the job stays pending until cancelled
	ctx, interrupt := context.WithCancel(context.Background())
	done := make(chan struct{})
	var code int
	var errOut string
	go func() {
		defer close(done)
		code, _, errOut = c.runCtx(ctx, "run", "--name", "waiting", "--", "true")
	}()
	// The job is submitted before berth run follows it; interrupt it then.
	c.awaitJobs(1)
	interrupt()
	<-done
	if code != exitStopped || !strings.Contains(errOut, "cancelling job") {
		t.Errorf("berth run interrupted: exit %d, stderr %q; want 130 and a line saying it cancels the job", code, errOut)
	}
	if jobs := c.listJobs(); len(jobs) != 1 || jobs[0].State != berth.JobCancelled {
		t.Errorf("jobs after the interrupt: %+v, want the one job cancelled", jobs)
	}
}

// TestRunSaysWhyItsJobWaits checks berth run says on stderr why a job
// that has printed nothing is pending, as srun says a job is queued.
func TestRunSaysWhyItsJobWaits(t *testing.T) {
	t.Parallel()
	c := newCLI(t) // no agents: the job stays pending until cancelled
	errOut := &noticeWriter{want: "is pending: ", seen: make(chan struct{})}
	m := &Main{Stdout: io.Discard, Stderr: errOut, Getenv: func(k string) string {
		if k == "BERTH_SERVER" {
			return c.url
		}
		return ""
	}}
	ctx, interrupt := context.WithCancel(context.Background())
	done := make(chan int)
	go func() { done <- m.Run(ctx, []string{"run", "--", "true"}) }()
	select {
	case <-errOut.seen:
	case code := <-done:
		t.Fatalf("berth run ended (exit %d) before saying why its job waits:\n%s", code, errOut)
	case <-time.After(30 * time.Second):
		t.Fatalf("berth run did not say why its job waits within 30 s:\n%s", errOut)
	}
	interrupt()
	<-done
	jobs := c.listJobs()
	if len(jobs) != 1 || !strings.Contains(errOut.String(), "job "+jobs[0].ID+" is pending: no worker") {
		t.Errorf("stderr %q; want it to name job %v and why it waits", errOut, jobs)
	}
}

// noticeWriter collects what is written and closes seen once it holds
// want.
type noticeWriter struct {
	mu   sync.Mutex
	buf  strings.Builder
	want string
	seen chan struct{}
}

func (w *noticeWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	had := strings.Contains(w.buf.String(), w.want)
	w.buf.Write(p)
	if !had && strings.Contains(w.buf.String(), w.want) {
		close(w.seen)
	}
	return len(p), nil
}

func (w *noticeWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// awaitJobs waits until the server lists n jobs (a job submitted by a
// command running alongside).
func (c *cli) awaitJobs(n int) {
	c.t.Helper()
	for deadline := time.Now().Add(30 * time.Second); len(c.listJobs()) < n; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			c.t.Fatalf("the server lists fewer than %d jobs after 30s", n)
		}
	}
}

// TestOutputPrinter checks how berth run writes records: a single job's
// bytes as they come, on their stream; a gang's whole lines after their
// rank, a line split across records joined, an unended one ended at the
// end; a retry introduced on stderr.
func TestOutputPrinter(t *testing.T) {
	t.Parallel()
	var out, errOut strings.Builder
	p := &outputPrinter{stdout: &out, stderr: &errOut, partial: map[lineKey][]byte{}}
	for _, r := range []berth.LogRecord{
		{Placement: 1, Data: []byte("50%\r")},
		{Placement: 1, Stream: berth.StreamStderr, Data: []byte("warn\n")},
		{Placement: 2, Data: []byte("again\n")},
	} {
		if err := p.print(&r); err != nil {
			t.Fatal(err)
		}
	}
	p.flush()
	if out.String() != "50%\ragain\n" || errOut.String() != "warn\nberth: attempt 2\n" {
		t.Errorf("single job: stdout %q, stderr %q", out.String(), errOut.String())
	}

	out.Reset()
	errOut.Reset()
	p = &outputPrinter{stdout: &out, stderr: &errOut, gang: true, partial: map[lineKey][]byte{}}
	for _, r := range []berth.LogRecord{
		{Placement: 1, Rank: 0, Data: []byte("hel")},
		{Placement: 1, Rank: 1, Data: []byte("one\ntw")},
		{Placement: 1, Rank: 0, Data: []byte("lo\n")},
		{Placement: 1, Rank: 1, Stream: berth.StreamStderr, Data: []byte("oops\n")},
		{Placement: 1, Rank: 1, Data: []byte("o")},
	} {
		if err := p.print(&r); err != nil {
			t.Fatal(err)
		}
	}
	p.flush()
	if out.String() != "[1] one\n[0] hello\n[1] two\n" || errOut.String() != "[1] oops\n" {
		t.Errorf("gang: stdout %q, stderr %q", out.String(), errOut.String())
	}
}
