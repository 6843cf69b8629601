package main

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/berth-dev/berth/market"
)

func TestSimMarketPrintsOneColumnPerStrategy(t *testing.T) {
	t.Parallel()
	code, out, errOut := runSimCLI(t, "sim", "market", "--seed", "4", "--markets", "2", "--runs", "20", "--machines", "30")
	if code != 0 {
		t.Fatalf("sim market: exit %d: %s", code, errOut)
	}
	if !strings.HasPrefix(out, "berth sim market: seeds 4 to 5, 20 runs an hour apart in each, 30 machines, faults "+market.DefaultMix.String()+", Berth's pool balanced\n") {
		t.Errorf("first line:\n%s", out)
	}
	rows := map[string][]string{}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 4 {
			rows[strings.Join(f[:len(f)-4], " ")] = f[len(f)-4:]
		}
	}
	if got := rows["metric"]; strings.Join(got, " ") != "berth berth-nomemory skypilot dstack" {
		t.Fatalf("header %q:\n%s", got, out)
	}
	for _, r := range []string{"ready", "failed provisions", "rentals", "rentals of a faulty machine", "wasted minutes per ready",
		"wasted minutes", "wasted $", "time to ready p50", "time to ready p90", "time to ready max"} {
		if rows[r] == nil {
			t.Errorf("no row %q in:\n%s", r, out)
		}
	}
}

func TestSimMarketJSONIsTheReport(t *testing.T) {
	t.Parallel()
	args := []string{"sim", "market", "--seed", "9", "--markets", "3", "--runs", "10", "--machines", "40", "--faults", "ssh=0.2,stall=0.1", "--strictness", "strict", "-o", "json"}
	code, out, errOut := runSimCLI(t, args...)
	if code != 0 {
		t.Fatalf("sim market -o json: exit %d: %s", code, errOut)
	}
	var rep market.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("printed %q: %v", out, err)
	}
	mix, err := market.ParseMix("ssh=0.2,stall=0.1")
	if err != nil {
		t.Fatal(err)
	}
	want := market.Compare(market.Config{Seed: 9, Markets: 3, Runs: 10, Machines: 40, Mix: mix, Strictness: "strict"})
	want.Mix = nil // not in the JSON
	if !reflect.DeepEqual(rep, want) {
		t.Errorf("printed %+v, want %+v", rep, want)
	}
	if _, again, _ := runSimCLI(t, args...); again != out {
		t.Errorf("the same seed printed two reports")
	}
}

func TestSimMarketBadInputExitsTwoWithOneLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--runs", "0"}, "--runs"},
		{[]string{"--markets", "0"}, "--markets"},
		{[]string{"--markets", "100", "--runs", "1001"}, "--runs"},
		{[]string{"--machines", "10001"}, "--machines"},
		{[]string{"--faults", "melt=0.1"}, "--faults"},
		{[]string{"--faults", "ssh=0.7,gpu=0.7"}, "--faults"},
		{[]string{"--strictness", "lax"}, "--strictness"},
		{[]string{"-o", "yaml"}, "-o"},
		{[]string{"--seed", "-1"}, "--seed"},
		{[]string{"extra"}, "unexpected argument"},
	} {
		args := append([]string{"sim", "market"}, tc.args...)
		code, out, errOut := runSimCLI(t, args...)
		lines := strings.Split(strings.TrimSpace(errOut), "\n")
		if code != exitUsage || out != "" || len(lines) != 1 || !strings.Contains(errOut, tc.want) {
			t.Errorf("berth %s: exit %d, stdout %q, stderr %q; want exit 2 and one line naming %q",
				strings.Join(args, " "), code, out, errOut, tc.want)
		}
	}
}
