package e2e

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
)

// serveCLI runs berth serve against cl with args and returns the job id
// it prints.
func (cl *cluster) serveCLI(args ...string) string {
	cl.t.Helper()
	out := mustCLI(cl.t, "", "", append([]string{"serve", "--server", cl.url}, args...)...)
	return strings.TrimSpace(out)
}

// TestServiceThatCannotStartFailsAtOnce runs services whose program cannot
// start on a real agent — no such program, a file that is not executable,
// a shell that cannot find its command (exit 127) — and checks that each
// fails at once, not restarted, with class and reason cannot_start and
// the error text on the job, its events and berth job; and that a
// service that was ready before and then exits 127 is restarted as usual.
func TestServiceThatCannotStartFailsAtOnce(t *testing.T) {
	t.Parallel()
	cl := newCluster(t)
	cl.addAgent("w1")
	notExec := filepath.Join(t.TempDir(), "serve.sh")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\nexec sleep 100\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		command []string
		code    int
		reason  []string // what the job's reason starts with, then holds
	}{
		{"missing", []string{"berth-no-such-server", "--port", "8000"}, 127,
			[]string{`cannot_start: start: exec: "berth-no-such-server": executable file not found in $PATH`}},
		{"not-executable", []string{notExec}, 126, []string{"cannot_start: start: ", notExec, "permission denied"}},
		// With a port: the readiness probe watches it.
		{"shell", []string{"sh", "-c", "berth-no-such-server --port {{SERVICE_PORT}}"}, 127,
			[]string{"cannot_start: exit code 127: ", "berth-no-such-server", "not found"}},
	} {
		id := cl.serveCLI(append([]string{"--name", tc.name, "--"}, tc.command...)...)
		d := cl.awaitState(id, 30*time.Second, berth.JobFailed)
		t.Logf("%s: failed %v after it was submitted: %s", tc.name, d.FinishedAt.Sub(d.CreatedAt).Round(time.Millisecond), d.Reason)
		if !strings.HasPrefix(d.Reason, tc.reason[0]) {
			t.Errorf("%s: reason %q, want it to start %q", tc.name, d.Reason, tc.reason[0])
		}
		for _, want := range tc.reason[1:] {
			if !strings.Contains(d.Reason, want) {
				t.Errorf("%s: reason %q, want %q in it", tc.name, d.Reason, want)
			}
		}
		if d.ExitCode == nil || *d.ExitCode != tc.code {
			t.Errorf("%s: exit code %v, want %d", tc.name, d.ExitCode, tc.code)
		}
		if len(d.AttemptList) != 1 || d.AttemptList[0].FailureClass != berth.FailureCannotStart {
			t.Fatalf("%s: attempts %+v, want 1 (no restart) of class cannot_start", tc.name, d.AttemptList)
		}
		cl.awaitEvent(10*time.Second, tc.name+"'s job.failed", func(e map[string]any) bool {
			return e["type"] == berth.EventJobFailed && e["job_id"] == id && e["reason"] == d.Reason
		})
		cl.awaitEvent(10*time.Second, tc.name+"'s service.failed", func(e map[string]any) bool {
			r, _ := e["reason"].(string)
			return e["type"] == berth.EventServiceFailed && e["job_id"] == id && strings.HasPrefix(r, "cannot_start: ")
		})
		if out := mustCLI(t, "", "", "job", "--server", cl.url, id); !strings.Contains(out, "cannot_start") {
			t.Errorf("%s: berth job says nothing of cannot_start:\n%s", tc.name, out)
		}
	}

	// A service that was ready (it ran past the 1 s grace of a service
	// with no readiness check) and then exits 127 is restarted.
	id := cl.serveCLI("--name", "was-ready", "--retries", "1", "--", "sh", "-c", "sleep 2; exit 127")
	cl.awaitEvent(10*time.Second, "was-ready's service.ready", func(e map[string]any) bool {
		return e["type"] == berth.EventServiceReady && e["job_id"] == id
	})
	d := cl.awaitState(id, 30*time.Second, berth.JobFailed)
	if len(d.AttemptList) != 2 || !strings.Contains(d.Reason, "service ended 2 times in a row (limit 1)") {
		t.Fatalf("a service ready before it exited 127: %d attempts, reason %q; want restarted once, then failed", len(d.AttemptList), d.Reason)
	}
}

// TestServeNamesTemplatedServicesAfterTheirModel: berth serve --template
// names the service after the model it serves; --name wins; a plain
// command keeps its program's name.
func TestServeNamesTemplatedServicesAfterTheirModel(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, "--templates", fakeLLMTemplate(t))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--template", "fakellm", "--var", "MODEL_NAME=org/chat-7b"}, "chat-7b"},
		{[]string{"--template", "fakellm", "--var", "MODEL_NAME=org/chat-7b", "--name", "web"}, "web"},
		{[]string{"--", "python3", "-m", "http.server"}, "python3"},
	} {
		id := cl.serveCLI(tc.args...)
		if j := cl.job(id); j.Name != tc.want {
			t.Errorf("berth serve %v: named %q, want %q", tc.args, j.Name, tc.want)
		}
		if _, err := cl.c.Cancel(context.Background(), id); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSwapFailsAtTheFirstDeathBeforeReady swaps a pool of a real agent
// to models whose service dies before it is ever ready — one crashes
// while warming, one's program does not exist — and checks that each
// swap fails at the first death, with the reason, its service stopped
// after one attempt and never reported ready; and that berth swap
// --dry-run prints what the server answered.
func TestSwapFailsAtTheFirstDeathBeforeReady(t *testing.T) {
	t.Parallel()
	catalog := filepath.Join(t.TempDir(), "catalog.yaml")
	if err := os.WriteFile(catalog, []byte(`pools:
  spark: {labels: {pool: spark}}
  empty: {labels: {pool: empty}}
models:
  small: {pool: spark, template: fakellm, vars: {MODEL_NAME: org/small}}
  crashy: {pool: spark, template: fakellm, vars: {MODEL_NAME: org/crashy, FLAGS: "--warmup 5s --crash-after 300ms"}}
  missing: {pool: spark, template: nostart}
  nowhere: {pool: empty, template: fakellm, vars: {MODEL_NAME: org/nowhere}}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	templates := fakeLLMTemplate(t)
	if err := os.WriteFile(filepath.Join(templates, "nostart.yaml"), []byte(`name: nostart
command: [berth-no-such-server, --port, "{{SERVICE_PORT}}"]
port: true
readiness: {probe: {kind: http, path: /v1/models}}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	cl := newCluster(t, "--templates", templates, "--catalog", catalog)
	cl.addAgent("spark1", "--labels", "pool=spark", "--ports", "18500-18549")
	ctx := context.Background()
	swap := func(key string) *berth.Swap {
		t.Helper()
		begin := time.Now()
		defer func() {
			t.Logf("swap to %s ended %v after it was asked for", key, time.Since(begin).Round(10*time.Millisecond))
		}()
		sw, err := cl.c.Swap(ctx, berth.SwapRequest{ModelKey: key}, "")
		if err != nil {
			t.Fatalf("swap to %s: %v", key, err)
		}
		cl.eventually(60*time.Second, "swap to "+key+" ended", func() bool {
			sw, err = cl.c.GetSwap(ctx, sw.ID)
			return err == nil && (sw.State == berth.SwapStateReady || sw.State == berth.SwapStateFailed)
		})
		return sw
	}
	dryRun := func(key string, code int, want string) {
		t.Helper()
		out, errOut, err := runCLI(t, "", "", "swap", "--server", cl.url, "--dry-run", key)
		if got := exitCode(err); got != code || strings.TrimSpace(out) != want {
			t.Errorf("berth swap --dry-run %s: exit %d, printed %q (stderr %q); want exit %d, %q", key, got, out, errOut, code, want)
		}
	}

	dryRun("small", 0, "dry run: a swap to small on pool spark can start; it would stop nothing and start small (nothing was changed)")
	dryRun("nowhere", 1, "dry run: a swap to nowhere on pool empty would fail: pool empty has no worker taking work (nothing was changed)")
	small := swap("small")
	if small.State != berth.SwapStateReady {
		t.Fatalf("swap to small: %+v", small)
	}
	dryRun("crashy", 0, "dry run: a swap to crashy on pool spark can start; it would stop "+small.Service+" and start crashy (nothing was changed)")

	for _, tc := range []struct {
		key    string
		reason []string
		state  berth.JobState // its service's end
	}{
		{"crashy", []string{"died before it was ready (attempt ", " failed: exit code 1 (workload_fatal): process exited before ready: ",
			"CUDA out of memory", "the swap stopped it"}, berth.JobCancelled},
		{"missing", []string{"failed before it was ready: cannot_start: ", "berth-no-such-server"}, berth.JobFailed},
	} {
		sw := swap(tc.key)
		if sw.State != berth.SwapStateFailed || sw.Returncode == nil || *sw.Returncode != 1 || sw.Service == "" {
			t.Fatalf("swap to %s: %+v, want failed with returncode 1", tc.key, sw)
		}
		for _, want := range tc.reason {
			if !strings.Contains(sw.Reason, want) {
				t.Errorf("swap to %s: reason %q, want %q in it", tc.key, sw.Reason, want)
			}
		}
		d := cl.awaitState(sw.Service, 30*time.Second, tc.state)
		if len(d.AttemptList) != 1 {
			t.Errorf("swap to %s: its service ran %d attempts, want 1: the swap failed at the first death", tc.key, len(d.AttemptList))
		}
		if d.AttemptList[0].Phase == berth.PhaseReady {
			t.Errorf("swap to %s: its service's attempt is ready", tc.key)
		}
		// Its end is the last of its events: no service.ready before it.
		end := "job." + string(tc.state)
		cl.awaitEvent(10*time.Second, tc.key+"'s service ended", func(e map[string]any) bool {
			if e["job_id"] == sw.Service && e["type"] == berth.EventServiceReady {
				t.Errorf("swap to %s: service.ready for its service %s", tc.key, sw.Service)
			}
			return e["job_id"] == sw.Service && e["type"] == end
		})
		t.Logf("swap to %s failed: %s", tc.key, sw.Reason)
	}
}

// TestWorkerIsBusyWhileFull checks a real agent's worker is busy while
// its GPUs, or its slots, are all held, and ready again once they are
// given back; berth workers shows it.
func TestWorkerIsBusyWhileFull(t *testing.T) {
	t.Parallel()
	cl := newCluster(t)
	cl.addAgent("gpus") // 2 GPUs, 16 slots
	cl.addAgent("slot", "--slots", "1", "--gpus", "0")
	for _, tc := range []struct {
		host string
		gpus int
	}{{"gpus", 2}, {"slot", 0}} {
		req := shellJob("sleep 60")
		req.Resources.GPUs, req.Constraints.Host = tc.gpus, tc.host
		id := cl.submit(req)[0].ID
		cl.awaitWorker(tc.host, berth.WorkerBusy)
		if out := mustCLI(t, "", "", "workers", "--server", cl.url); !regexp.MustCompile(`(?m)^` + tc.host + `\s+\S+\s+busy\b`).MatchString(out) {
			t.Errorf("berth workers while %s is full:\n%s", tc.host, out)
		}
		if _, err := cl.c.Cancel(context.Background(), id); err != nil {
			t.Fatal(err)
		}
		cl.awaitWorker(tc.host, berth.WorkerReady)
	}
}
