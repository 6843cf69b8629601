package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fillScenario writes a cluster and a pool in Berth's YAML: 0.6-GPU
// tasks on one 2-GPU worker strand 0.4 of each GPU.
func fillScenario(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fill.yaml")
	doc := `workers:
  - {name: w, gpus: 2xA100:80GiB, cpus: 16, memory: 64GiB}
jobs:
  - {id: p, gpus: 0.6, cpus: 1, duration: 1h}
`
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestSimFillPrintsATablePerTrace(t *testing.T) {
	t.Parallel()
	f := fillScenario(t)
	svg := filepath.Join(t.TempDir(), "fill.svg")
	code, out, errOut := runSimCLI(t, "sim", "fill", "--cluster", f, "--svg", svg, f)
	if code != 0 {
		t.Fatalf("sim fill: exit %d: %s", code, errOut)
	}
	for _, want := range []string{"(1 workers, 2 GPUs), seed 1", "arrived load", "bestfit", "fgd", "berth",
		"50%               40.0%", "100%              40.0%", "at first failure  40.0%", "(arrived then)  90.0%", "tasks placed      2 of 4"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	data, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	if s := string(data); !strings.HasPrefix(s, "<svg") || strings.Count(s, `fill="none" stroke="#`) != 3 || !strings.Contains(s, "fill.yaml") {
		t.Fatalf("the plot has not one line per policy and the trace's name:\n%s", s)
	}
}

func TestSimFillJSONHasTheShareAtFullPerPolicy(t *testing.T) {
	t.Parallel()
	f := fillScenario(t)
	code, out, errOut := runSimCLI(t, "sim", "fill", "--cluster", f, "--policy", "fgd,berth", "--points", "90", "-o", "json", f)
	if code != 0 {
		t.Fatalf("sim fill -o json: exit %d: %s", code, errOut)
	}
	var rep struct {
		GPUs   int `json:"gpus"`
		Traces []struct {
			Results map[string]map[string]any `json:"results"`
		} `json:"traces"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("printed %q: %v", out, err)
	}
	if rep.GPUs != 2 || len(rep.Traces) != 1 || len(rep.Traces[0].Results) != 2 {
		t.Fatalf("report %+v", rep)
	}
	for _, p := range []string{"fgd", "berth"} {
		r := rep.Traces[0].Results[p]
		if r["unallocated_gpu_share_at_full"] != 0.4 || r["arrived_at_full"] != 0.9 {
			t.Errorf("%s: %v", p, r)
		}
	}
}

func TestSimFillBadInputNamesTheFlag(t *testing.T) {
	t.Parallel()
	f := fillScenario(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--cluster", f}, "name at least one trace"},
		{[]string{f}, "--cluster"},
		{[]string{"--cluster", f, "--points", "50,x", f}, "--points"},
		{[]string{"--cluster", f, "--points", "0", f}, "--points"},
		{[]string{"--cluster", f, "--policy", "fgd,lottery", f}, `unknown policy "lottery"`},
		{[]string{"--cluster", f, "-o", "yaml", f}, "-o"},
		{[]string{"--cluster", f, "no-such.csv"}, "no-such.csv: cannot read"},
	} {
		code, out, errOut := runSimCLI(t, append([]string{"sim", "fill"}, tc.args...)...)
		if code != exitUsage || out != "" || !strings.Contains(errOut, tc.want) {
			t.Errorf("berth sim fill %s: exit %d, stdout %q, stderr %q; want exit 2 naming %q",
				strings.Join(tc.args, " "), code, out, errOut, tc.want)
		}
	}
}
