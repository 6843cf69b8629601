package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-dev/berth/sim"
)

// runSimCLI runs one berth command in-process; sim needs no server.
func runSimCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	m := &Main{Stdout: &out, Stderr: &errOut, Getenv: func(string) string { return "" }}
	code := m.Run(context.Background(), args)
	return code, out.String(), errOut.String()
}

// simScenario writes a cluster and a workload in Berth's YAML format: a
// gang behind 16 one-GPU jobs on two 8-GPU workers.
func simScenario(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "scenario.yaml")
	doc := `workers:
  - {name: w, count: 2, gpus: 8xH100:80GiB, cpus: 64, memory: 512GiB}
jobs:
  - {id: fill, user: small, count: 16, gpus: 1, duration: 30m}
  - {id: gang, user: big, submit: 1m, nodes: 2, gpus: 8, duration: 1h}
  - {id: stream, user: small, submit: 2m, count: 40, every: 2m, gpus: 1, duration: 30m}
  - {id: huge, gpus: 16, duration: 1h}
`
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestSimPrintsOneColumnPerPolicy(t *testing.T) {
	t.Parallel()
	f := simScenario(t)
	code, out, errOut := runSimCLI(t, "sim", "--trace", f, "--cluster", f, "--policy", "fifo,berth")
	if code != 0 {
		t.Fatalf("sim: exit %d: %s", code, errOut)
	}
	lines := strings.Split(out, "\n")
	var header []string
	rows := map[string]bool{}
	for _, l := range lines {
		fields := strings.Fields(l)
		if len(fields) > 0 && fields[0] == "metric" {
			header = fields
		}
		if len(fields) > 2 {
			rows[strings.Join(fields[:len(fields)-2], " ")] = true
		}
	}
	if strings.Join(header, " ") != "metric fifo berth" {
		t.Fatalf("header %q, want metric fifo berth:\n%s", header, out)
	}
	for _, r := range []string{"jobs completed", "unschedulable", "makespan", "GPU utilisation", "JCT mean", "JCT p99",
		"wait p95", "wait max", "fragmentation", "preemptions", "scheduler passes", "replay wall time"} {
		if !rows[r] {
			t.Errorf("no row %q in:\n%s", r, out)
		}
	}
	if !strings.Contains(out, "fifo: 1 unschedulable: no worker has 16 GPUs") {
		t.Errorf("the unschedulable job's reason is not printed:\n%s", out)
	}
}

func TestSimJSONIsKeyedByPolicy(t *testing.T) {
	t.Parallel()
	f := simScenario(t)
	code, out, errOut := runSimCLI(t, "sim", f, "--cluster", f, "--policy", "greedy,berth", "-o", "json")
	if code != 0 {
		t.Fatalf("sim -o json: exit %d: %s", code, errOut)
	}
	var res map[string]sim.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("sim -o json printed %q: %v", out, err)
	}
	if len(res) != 2 || res["greedy"].Policy != "greedy" || res["berth"].Completed != 57 || res["berth"].Unschedulable != 1 {
		t.Fatalf("results %+v", res)
	}
}

func TestSimBadInputExitsTwoWithOneLine(t *testing.T) {
	t.Parallel()
	f := simScenario(t)
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("jobs:\n  - {id: a, gpus: 1, duration: later}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"sim", "--cluster", f}, "--trace"},
		{[]string{"sim", "--trace", f}, "--cluster"},
		{[]string{"sim", "--trace", f, "--cluster", f, "--policy", "fifo,lottery"}, `unknown policy "lottery"`},
		{[]string{"sim", "--trace", f, "--cluster", f, "--policy", "fifo,fifo"}, "named twice"},
		{[]string{"sim", "--trace", f, "--cluster", f, "--format", "slurm"}, "--format"},
		{[]string{"sim", "--trace", f, "--cluster", f, "-o", "yaml"}, "-o"},
		{[]string{"sim", "--trace", f, "--cluster", f, "--speedup", "0"}, "--speedup"},
		{[]string{"sim", "--trace", bad, "--cluster", f}, "bad.yaml:2: jobs[0].duration"},
		{[]string{"sim", "--trace", "no-such.csv", "--cluster", f}, "no-such.csv: cannot read"},
		{[]string{"sim", "--trace", f, "--cluster", f, "extra"}, "unexpected argument"},
	} {
		code, out, errOut := runSimCLI(t, tc.args...)
		lines := strings.Split(strings.TrimSpace(errOut), "\n")
		if code != exitUsage || out != "" || len(lines) != 1 || !strings.Contains(errOut, tc.want) {
			t.Errorf("berth %s: exit %d, stdout %q, stderr %q; want exit 2 and one line naming %q",
				strings.Join(tc.args, " "), code, out, errOut, tc.want)
		}
	}
}
