package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
)

// cli runs berth commands in-process against one server on real SQLite
// with no agents: jobs stay pending unless cancelled.
type cli struct {
	t   *testing.T
	url string
}

func newCLI(t *testing.T) *cli {
	t.Helper()
	return newCLIIn(t, t.TempDir())
}

// newCLIIn is newCLI with the server's data directory dir.
func newCLIIn(t *testing.T, dir string) *cli {
	t.Helper()
	rs, err := startServer(context.Background(), &serverConfig{DataDir: dir, Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close(context.Background()) })
	return &cli{t: t, url: rs.URL}
}

// run returns the exit status, stdout and stderr of one command.
func (c *cli) run(args ...string) (int, string, string) {
	c.t.Helper()
	return c.runCtx(context.Background(), args...)
}

// runCtx is run under ctx.
func (c *cli) runCtx(ctx context.Context, args ...string) (int, string, string) {
	c.t.Helper()
	var out, errOut bytes.Buffer
	m := &Main{Stdout: &out, Stderr: &errOut, Getenv: func(k string) string {
		if k == "BERTH_SERVER" {
			return c.url
		}
		return ""
	}}
	code := m.Run(ctx, args)
	return code, out.String(), errOut.String()
}

// runJSON runs a command that prints JSON (args ask for -o json) and
// returns what it printed, decoded; a failed command or other output fails
// the test.
func runJSON[T any](c *cli, args ...string) T {
	c.t.Helper()
	code, out, errOut := c.run(args...)
	var v T
	if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil {
		c.t.Fatalf("berth %s: exit %d, %q, %q; want JSON: %v", strings.Join(args, " "), code, out, errOut, err)
	}
	return v
}

// listJSON is runJSON for a listing: the output must be a JSON array,
// empty or not, never null.
func listJSON[T any](c *cli, args ...string) []T {
	c.t.Helper()
	list := runJSON[[]T](c, args...)
	if list == nil {
		c.t.Fatalf("berth %s printed null, want a JSON array", strings.Join(args, " "))
	}
	return list
}

func (c *cli) listJobs() []berth.Job {
	return listJSON[berth.Job](c, "jobs", "-o", "json", "--limit", "0")
}

// TestRefusedSavedTokenSaysWhereItComesFrom checks that when a server
// refuses the token berth up saved for its address (another server runs
// there now), the one error line names the credentials file and the way
// out; a refused $BERTH_TOKEN gets no such hint.
func TestRefusedSavedTokenSaysWhereItComesFrom(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	other := t.TempDir() // a server gone since, which issued the saved token
	rs, err := startServer(context.Background(), &serverConfig{DataDir: other, Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	rs.Close(context.Background())
	stale, err := os.ReadFile(filepath.Join(other, adminTokenFile))
	if err != nil {
		t.Fatal(err)
	}
	creds := filepath.Join(t.TempDir(), "credentials.json")
	saved, _ := json.Marshal(map[string]savedServer{c.url: {Token: strings.TrimSpace(string(stale))}})
	if err := os.WriteFile(creds, saved, 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(env map[string]string) (int, string) {
		var out, errOut bytes.Buffer
		m := &Main{Stdout: &out, Stderr: &errOut, Getenv: func(k string) string { return env[k] }}
		return m.Run(context.Background(), []string{"jobs"}), errOut.String()
	}
	env := map[string]string{"BERTH_SERVER": c.url, "BERTH_CREDENTIALS": creds}
	code, errOut := run(env)
	if code == 0 || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "(unauthorized)") ||
		!strings.Contains(errOut, c.url+" in "+creds) || !strings.Contains(errOut, "BERTH_TOKEN") {
		t.Errorf("with a stale saved token: exit %d, %q; want one line naming %s and BERTH_TOKEN", code, errOut, creds)
	}
	env["BERTH_TOKEN"] = strings.TrimSpace(string(stale))
	if code, errOut := run(env); code == 0 || !strings.Contains(errOut, "(unauthorized)") || strings.Contains(errOut, creds) {
		t.Errorf("with a stale BERTH_TOKEN: exit %d, %q; want unauthorized, without the saved-token hint", code, errOut)
	}
	delete(env, "BERTH_TOKEN")
	env["BERTH_CREDENTIALS"] = filepath.Join(t.TempDir(), "none.json") // nothing saved: a local client
	if code, errOut := run(env); code != 0 {
		t.Errorf("with no token on loopback: exit %d, %q", code, errOut)
	}
}

func TestSubmitPrintsOneIDPerJob(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	code, out, errOut := c.run("submit", "--array", "3", "--gpus", "2", "--priority", "300", "--", "python", "train.py")
	if code != 0 {
		t.Fatalf("submit: exit %d: %s", code, errOut)
	}
	ids := strings.Fields(out)
	if len(ids) != 3 {
		t.Fatalf("submit printed %q, want 3 ids", out)
	}
	jobs := c.listJobs()
	if len(jobs) != 3 {
		t.Fatalf("%d jobs stored, want 3", len(jobs))
	}
	for _, j := range jobs {
		if j.Resources.GPUs != 2 || j.Priority != 300 || j.State != berth.JobPending || strings.Join(j.Command, " ") != "python train.py" {
			t.Fatalf("stored job %+v", j)
		}
	}
}

func TestSubmitFromYAMLWithFlagOverride(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	file := filepath.Join(t.TempDir(), "job.yaml")
	yaml := "name: train-llama\nqueue: gpu\nresources: {gpus: 4, gpu_type: H100, gpu_memory: 80GiB}\ncommand: [\"python\", \"train.py\"]\nretries: 2\nmax_runtime: 6h\n"
	if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := c.run("submit", "-f", file, "--priority", "700"); code != 0 {
		t.Fatalf("submit -f: exit %d: %s", code, errOut)
	}
	jobs := c.listJobs()
	if len(jobs) != 1 {
		t.Fatalf("%d jobs, want 1", len(jobs))
	}
	j := jobs[0]
	if j.Name != "train-llama" || j.Queue != "gpu" || j.Resources.GPUs != 4 || j.Resources.GPUMemory != 80<<30 ||
		j.Retries != 2 || j.Priority != 700 || time.Duration(j.MaxRuntime) != 6*time.Hour {
		t.Fatalf("job from YAML: %+v", j)
	}
}

func TestSubmitSchedulingFlags(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	if code, _, errOut := c.run("submit", "--nodes", "2", "--gpus", "8", "--preemptible", "--model", "llama-70b",
		"--user", "alice", "--", "torchrun", "train.py"); code != 0 {
		t.Fatalf("submit: exit %d: %s", code, errOut)
	}
	j := c.listJobs()[0]
	if j.Nodes != 2 || !j.Preemptible || j.Model != "llama-70b" || j.User != "alice" {
		t.Fatalf("job: nodes %d preemptible %v model %q user %q", j.Nodes, j.Preemptible, j.Model, j.User)
	}
}

// TestBadInputFailsWithOneLineAndStoresNothing checks each mistake gives
// exit 2 and one error line naming the field, and that nothing is stored.
func TestBadInputFailsWithOneLineAndStoresNothing(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	malformed := write("bad.yaml", "command: [python\nresources: {gpus: 1\n")
	unknown := write("unknown.yaml", "command: [\"true\"]\ngpuz: 4\n")
	for _, tc := range []struct {
		args []string
		want string // in the error line
	}{
		{[]string{"submit", "--gpus", "10000", "--", "true"}, "resources.gpus"},
		{[]string{"submit", "--queue", "BAD", "--", "true"}, "queue"},
		{[]string{"submit", "--priority", "5000", "--", "true"}, "priority"},
		{[]string{"submit", "--array", "-1", "--", "true"}, "array"},
		{[]string{"submit"}, "command"},
		{[]string{"submit", "--memory", "lots", "--", "true"}, "memory"},
		{[]string{"submit", "--memory", "16000", "--", "true"}, "--memory: 16000 is a bare number; write the unit"},
		{[]string{"submit", "--gpus", "1", "--gpu-memory", "80", "--", "true"}, "--gpu-memory: 80 is a bare number"},
		{[]string{"submit", "--", "   "}, "command"},
		{[]string{"submit", "--env", "BERTH_X=1", "--", "true"}, "env"},
		{[]string{"submit", "-f", malformed}, "bad.yaml"},
		{[]string{"submit", "-f", unknown}, "gpuz"},
		{[]string{"submit", "-f", filepath.Join(dir, "missing.yaml")}, "missing.yaml"},
		{[]string{"job", "01NOSUCHJOB"}, "not_found"},
		{[]string{"jobs", "--state", "sleeping"}, "state"},
		{[]string{"cancel", "01NOSUCHJOB"}, "no job"}, // a line per failed id, then a summary
		{[]string{"frobnicate"}, "unknown command"},
		// Flag errors name the flag and what it takes, in one line.
		{[]string{"submit", "--max-runtime", "soon", "--", "true"}, `--max-runtime: "soon" is not a duration such as 90s`},
		{[]string{"submit", "--nope", "--", "true"}, "--nope: no such flag; berth submit -h lists the flags"},
		{[]string{"submit", "--wait=maybe", "--", "true"}, `--wait: must be true or false, not "maybe"`},
		{[]string{"submit", "--cpus", "many", "--", "true"}, `--cpus: must be a number, not "many"`},
		{[]string{"submit", "-f"}, "-f: needs a value"},
		{[]string{"jobs", "--limit", "x"}, `--limit: must be a whole number, not "x"`},
		{[]string{"jobs", "--limit", "99999999999999999999"}, `--limit: "99999999999999999999" is out of range`},
		{[]string{"wait", "--all", "--timeout", "forever"}, `--timeout: "forever" is not a duration`},
		{[]string{"submit", "-f", write("memory.yaml", "command: [\"true\"]\nresources: {memory: -5GiB}\n")},
			`resources.memory: in ` + filepath.Join(dir, "memory.yaml") + `: "-5GiB" is not a size`},
		{[]string{"submit", "-f", write("priority.yaml", "command: [\"true\"]\npriority: high\n")}, "priority: in "},
		// A fraction of a GPU is below 1: it never spans GPUs.
		{[]string{"submit", "--gpus", "1.5", "--", "true"}, "--gpus: 1.5: a fraction of a GPU must be below 1 (a fraction never spans GPUs)"},
		{[]string{"submit", "--gpu-milli", "1000", "--", "true"}, "resources.gpu_milli: must be between 1 and 999"},
		{[]string{"submit", "-f", write("frac.yaml", "command: [\"true\"]\nresources: {gpus: 2.5}\n")}, "resources.gpus: in "},
	} {
		code, out, errOut := c.run(tc.args...)
		lines := strings.Split(strings.TrimSpace(errOut), "\n")
		if code != exitUsage || !strings.Contains(errOut, tc.want) || out != "" {
			t.Errorf("berth %s: exit %d, stdout %q, stderr %q; want exit 2 and an error naming %q",
				strings.Join(tc.args, " "), code, out, errOut, tc.want)
		}
		if tc.args[0] != "cancel" && len(lines) != 1 {
			t.Errorf("berth %s: error is %d lines: %q", strings.Join(tc.args, " "), len(lines), errOut)
		}
	}
	if jobs := c.listJobs(); len(jobs) != 0 {
		t.Fatalf("bad input stored %d jobs", len(jobs))
	}
}

func TestCancelAndWaitExitCodes(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	_, out, _ := c.run("submit", "--", "sleep", "1000")
	id := strings.TrimSpace(out)
	if code, _, errOut := c.run("cancel", id); code != 0 {
		t.Fatalf("cancel pending job: exit %d: %s", code, errOut)
	}
	if code, out, _ := c.run("wait", id); code != exitFailed || !strings.Contains(out, "cancelled") {
		t.Fatalf("wait on a cancelled job: exit %d, %q; want 1 and a cancelled count", code, out)
	}
	code, out, errOut := c.run("cancel", id)
	if code != 0 || out != "" || !strings.Contains(errOut, "already ended (cancelled); nothing to cancel") || strings.Count(errOut, "\n") != 1 {
		t.Fatalf("second cancel: exit %d, %q, %q; want 0 (idempotent) and one note on stderr", code, out, errOut)
	}
	_, out, _ = c.run("submit", "--", "sleep", "1000")
	pending := strings.TrimSpace(out)
	if code, _, _ := c.run("wait", "--timeout", "50ms", pending); code != exitTimeout {
		t.Fatalf("wait --timeout on a pending job: exit %d, want %d", code, exitTimeout)
	}
	code, out, _ = c.run("job", pending)
	if code != 0 || !strings.Contains(out, "no worker serves queue") {
		t.Fatalf("job on a pending job with no workers: exit %d, %q; want why it waits", code, out)
	}
}

// TestCancelAndWaitPrintJSON: with -o json, cancel prints the cancelled
// jobs as an array (an id it could not cancel goes to stderr) and wait the
// outcome as an object, with the same exit codes as their tables.
func TestCancelAndWaitPrintJSON(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	_, out, _ := c.run("submit", "--", "sleep", "1000")
	id := strings.TrimSpace(out)
	code, out, errOut := c.run("cancel", "-o", "json", id, "01NOSUCHJOB")
	var cancelled []berth.Job
	if err := json.Unmarshal([]byte(out), &cancelled); err != nil || code != exitUsage ||
		len(cancelled) != 1 || cancelled[0].ID != id || cancelled[0].State != berth.JobCancelled ||
		!strings.Contains(errOut, "01NOSUCHJOB") {
		t.Fatalf("cancel -o json: exit %d, %q (%v), %q; want exit 2, the one job cancelled, the unknown id on stderr",
			code, out, err, errOut)
	}
	code, out, _ = c.run("wait", "-o", "json", id)
	var res berth.WaitResult
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != exitFailed || !res.Done ||
		res.Counts[berth.JobCancelled] != 1 || len(res.Failures) != 1 || res.Failures[0] != id {
		t.Fatalf("wait -o json: exit %d, %q (%v); want exit 1 and the job cancelled", code, out, err)
	}
}

// TestFlagsMayFollowIDs gives the flags of commands that take ids after
// them, as people type them.
func TestFlagsMayFollowIDs(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	_, out, _ := c.run("submit", "--", "sleep", "1000")
	id := strings.TrimSpace(out)
	if j := runJSON[berth.JobDetail](c, "job", id, "-o", "json"); j.ID != id {
		t.Errorf("job ID -o json: got job %q, want %q", j.ID, id)
	}
	if code, _, errOut := c.run("wait", id, "--timeout", "20ms"); code != exitTimeout {
		t.Errorf("wait ID --timeout 20ms: exit %d, %q; want %d", code, errOut, exitTimeout)
	}
	if code, out, errOut := c.run("cancel", id, "--server", c.url); code != 0 || !strings.Contains(out, id+" cancelled") {
		t.Errorf("cancel ID --server URL: exit %d, %q, %q; want the job cancelled", code, out, errOut)
	}
	if code, _, errOut := c.run("logs", id, "-f"); code != 0 {
		t.Errorf("logs ID -f of an ended job: exit %d, %q", code, errOut)
	}
	if code, _, errOut := c.run("job", id, "--", "-o"); code != exitUsage || !strings.Contains(errOut, "give exactly one job id") {
		t.Errorf("job ID -- -o: exit %d, %q; want -o taken as a second id after --", code, errOut)
	}
}

func TestServerList(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	failover := &cli{t: t, url: dead + "," + c.url} // in BERTH_SERVER
	if code, out, errOut := failover.run("submit", "--", "true"); code != 0 || strings.TrimSpace(out) == "" {
		t.Fatalf("submit past a dead server: exit %d, %q, %s", code, out, errOut)
	}
	if jobs := c.listJobs(); len(jobs) != 1 {
		t.Fatalf("%d jobs stored, want 1", len(jobs))
	}
	code, _, errOut := c.run("jobs", "--server", c.url+",localhost:7070")
	if want := `--server: "localhost:7070": must be an http:// or https:// URL`; code != exitUsage || !strings.Contains(errOut, want) {
		t.Fatalf("jobs with a bad URL in --server: exit %d, %q; want 2 and %q", code, errOut, want)
	}
}

// TestSecondServerOnADataDirIsRefused starts berth server on the data dir
// of a running server: it exits with one line naming --data-dir and the
// holder, and leaves the first server's audit log as it was.
func TestSecondServerOnADataDirIsRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	rs, err := startServer(context.Background(), &serverConfig{DataDir: dir, Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	auditLog := filepath.Join(dir, "audit.log")
	before, err := os.ReadFile(auditLog)
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	m := &Main{Stdout: &out, Stderr: &errOut, Getenv: func(string) string { return "" }}
	code := m.Run(context.Background(), []string{"server", "--data-dir", dir, "--listen", "127.0.0.1:0"})
	if code == 0 || strings.Count(errOut.String(), "\n") != 1 || !strings.Contains(errOut.String(), "--data-dir") ||
		!strings.Contains(errOut.String(), fmt.Sprintf("in use by another process (pid %d)", os.Getpid())) {
		t.Errorf("second server: exit %d, %q; want one line naming --data-dir and this process", code, errOut.String())
	}
	if after, err := os.ReadFile(auditLog); err != nil || !bytes.Equal(after, before) {
		t.Errorf("the audit log changed under the refused server (%v)", err)
	}
	if err := rs.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	rs, err = startServer(context.Background(), &serverConfig{DataDir: dir, Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatalf("a server on the data dir once the first has stopped: %v", err)
	}
	rs.Close(context.Background())
}

// TestCancelByFilter cancels a whole array by its name and a queue's
// pending jobs, leaving the rest; filters and ids do not mix.
func TestCancelByFilter(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	_, out, _ := c.run("submit", "--name", "sweep", "--array", "3", "--", "sleep", "1000")
	sweep := strings.Fields(out)
	_, out, _ = c.run("submit", "--name", "keep", "--", "sleep", "1000")
	keep := strings.TrimSpace(out)
	_, out, _ = c.run("submit", "--queue", "cpu", "--", "sleep", "1000")
	cpu := strings.TrimSpace(out)
	cancelled := runJSON[[]berth.Job](c, "cancel", "--name", "sweep", "-o", "json")
	if len(cancelled) != 3 || cancelled[0].ID != sweep[0] || cancelled[2].ID != sweep[2] {
		t.Fatalf("cancel --name sweep cancelled %d jobs, want the array %v", len(cancelled), sweep)
	}
	if code, out, _ := c.run("cancel", "--queue", "cpu", "--state", "pending"); code != 0 || out != cpu+" cancelled\n" {
		t.Errorf("cancel --queue cpu: exit %d, %q; want %s cancelled", code, out, cpu)
	}
	if code, out, errOut := c.run("cancel", "--name", "sweep"); code != 0 || out != "" || !strings.Contains(errOut, "no active job matches") {
		t.Errorf("cancel --name sweep again: exit %d, %q, %q; want 0 and nothing matching", code, out, errOut)
	}
	for _, args := range [][]string{{"cancel", "--name", "keep", keep}, {"cancel", "--state", "pending", keep}, {"cancel", "--name", "keep", "--state", "done"}} {
		if code, _, _ := c.run(args...); code != exitUsage {
			t.Errorf("berth %s: exit %d, want %d", strings.Join(args, " "), code, exitUsage)
		}
	}
	if j := runJSON[berth.JobDetail](c, "job", keep, "-o", "json"); j.State != berth.JobPending {
		t.Errorf("the job no filter matched: %s, want pending", j.State)
	}
}
