package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
)

func (c *cli) listSchedules() []berth.Schedule {
	return listJSON[berth.Schedule](c, "schedule", "list", "-o", "json")
}

func TestScheduleAddListRm(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	if list := c.listSchedules(); len(list) != 0 {
		t.Fatalf("schedules of a new server: %+v", list)
	}
	code, out, errOut := c.run("schedule", "add", "--id", "daily-vol", "--name", "Daily Vol", "--owner", "openclaw",
		"--cron", "0 6 * * *", "--next-run", "2026-06-18T06:00:00Z", "--description", "Swaps to the big model")
	if code != 0 || out != "daily-vol\n" || errOut != "" {
		t.Fatalf("schedule add: exit %d, %q, %q", code, out, errOut)
	}
	code, out, _ = c.run("schedule", "add", "--name", "ad hoc", "-o", "json")
	var gen berth.Schedule
	if code != 0 || json.Unmarshal([]byte(out), &gen) != nil || !regexp.MustCompile(`^[0-9a-f]{12}$`).MatchString(gen.ID) ||
		gen.RegisteredAt.IsZero() {
		t.Fatalf("schedule add -o json: exit %d, %q", code, out)
	}
	// Re-registering the id updates in place.
	if code, out, _ := c.run("schedule", "add", "--id", "daily-vol", "--name", "Daily Vol v2", "--cron", "@daily"); code != 0 || out != "daily-vol\n" {
		t.Fatalf("schedule add again: exit %d, %q", code, out)
	}
	list := c.listSchedules()
	if len(list) != 2 || list[0].ID != "daily-vol" || list[0].Name != "Daily Vol v2" || list[0].Owner != "" || list[1].ID != gen.ID {
		t.Fatalf("schedule list -o json = %+v", list)
	}
	code, out, _ = c.run("schedule", "list")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 || strings.Join(strings.Fields(lines[0]), " ") != "ID NAME OWNER CRON NEXT RUN LAST RUN UPDATED" ||
		!strings.HasPrefix(lines[1], "daily-vol ") || !strings.Contains(lines[1], "@daily") || !strings.HasPrefix(lines[2], gen.ID+" ") {
		t.Fatalf("schedule list: exit %d:\n%s", code, out)
	}

	if code, out, _ := c.run("schedule", "rm", "daily-vol"); code != 0 || out != "daily-vol removed\n" {
		t.Fatalf("schedule rm: exit %d, %q", code, out)
	}
	code, out, errOut = c.run("schedule", "rm", "daily-vol")
	if code != exitUsage || out != "" || !strings.Contains(errOut, "not_found") || strings.Count(errOut, "\n") != 1 {
		t.Fatalf("schedule rm of a removed id: exit %d, %q, %q", code, out, errOut)
	}
	if list := c.listSchedules(); len(list) != 1 || list[0].ID != gen.ID {
		t.Fatalf("schedules after rm: %+v", list)
	}
}

func TestScheduleBadInput(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"schedule"}, "subcommand"},
		{[]string{"schedule", "add"}, "--name"},
		{[]string{"schedule", "add", "--name", "n", "--id", "a b"}, "id:"},
		{[]string{"schedule", "add", "--name", "n", "--cron", "0 6 * *"}, "cron:"},
		{[]string{"schedule", "add", "--name", "n", "--cron", "61 * * * *"}, "cron:"},
		{[]string{"schedule", "add", "--name", "n", "--next-run", "tomorrow"}, "next_run:"},
		{[]string{"schedule", "rm"}, "schedule id"},
		{[]string{"schedule", "rm", "a", "b"}, "schedule id"},
	} {
		code, out, errOut := c.run(tc.args...)
		if code != exitUsage || out != "" || !strings.Contains(errOut, tc.want) {
			t.Errorf("berth %s: exit %d, %q, %q; want exit 2 naming %s", strings.Join(tc.args, " "), code, out, errOut, tc.want)
		}
	}
	if list := c.listSchedules(); len(list) != 0 {
		t.Fatalf("bad input registered %+v", list)
	}
	if code, out, _ := c.run("schedule", "help"); code != 0 || !strings.Contains(out, "berth schedule add --name N") {
		t.Errorf("schedule help: exit %d, %q", code, out)
	}
}

func TestScheduleAddJob(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	code, out, errOut := c.run("schedule", "add", "--id", "nightly", "--name", "Nightly eval", "--cron", "0 2 * * *",
		"--", "python", "eval.py", "--split", "test")
	if code != 0 || out != "nightly\n" || errOut != "" {
		t.Fatalf("schedule add -- COMMAND: exit %d, %q, %q", code, out, errOut)
	}
	file := filepath.Join(t.TempDir(), "job.yaml")
	if err := os.WriteFile(file, []byte("name: warm\nqueue: gpu\nresources:\n  gpus: 2\ncommand: [python, warm.py]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := c.run("schedule", "add", "--id", "warm", "--name", "Warm", "--cron", "@hourly", "-f", file); code != 0 || out != "warm\n" {
		t.Fatalf("schedule add -f: exit %d, %q, %q", code, out, errOut)
	}
	if code, _, errOut := c.run("schedule", "add", "--id", "display", "--name", "Display", "--cron", "@daily"); code != 0 {
		t.Fatalf("schedule add without a job: exit %d, %q", code, errOut)
	}
	list := c.listSchedules()
	if len(list) != 3 || list[0].Job == nil || strings.Join(list[0].Job.Command, " ") != "python eval.py --split test" ||
		list[0].Job.Queue != berth.DefaultQueue || !list[0].LastRun.IsZero() {
		t.Fatalf("schedule list -o json = %+v; want nightly's job first", list)
	}
	if j := list[1].Job; j == nil || j.Name != "warm" || j.Queue != "gpu" || j.Resources.GPUs != 2 || list[2].Job != nil {
		t.Fatalf("schedule list -o json = %+v %+v; want warm's job from the file, display without one", list[1], list[2])
	}
	// NEXT RUN: the next 02:00 UTC for nightly's job; LAST RUN: none yet
	// (the columns' padding depends on the other rows' "(in …)").
	noLastRun := regexp.MustCompile(`\(in [^)]*\) +- `)
	code, out, _ = c.run("schedule", "list")
	next := time.Now().UTC().Truncate(24 * time.Hour).Add(2 * time.Hour)
	if !next.After(time.Now()) {
		next = next.Add(24 * time.Hour)
	}
	if lines := strings.Split(out, "\n"); code != 0 || len(lines) < 2 || !strings.HasPrefix(lines[1], "nightly ") ||
		!strings.Contains(lines[1], next.Format("2006-01-02 15:04Z")+" (in ") || !noLastRun.MatchString(lines[1]) {
		t.Errorf("schedule list: exit %d:\n%s\nwant nightly's next run at %s and no last run", code, out, next)
	}

	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("name: x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"schedule", "add", "--name", "n", "--", "true"}, "--cron"},
		{[]string{"schedule", "add", "--name", "n", "--cron", "@daily", "-f", bad}, "job.command"},
		{[]string{"schedule", "add", "--name", "n", "--cron", "@daily", "-f", filepath.Join(t.TempDir(), "missing.yaml")}, "-f"},
		{[]string{"schedule", "add", "--name", "n", "--cron", "@daily", "--", "true", "{{SECRET:NO_SUCH}}"}, "job.command"},
	} {
		code, out, errOut := c.run(tc.args...)
		if code != exitUsage || out != "" || !strings.Contains(errOut, tc.want) {
			t.Errorf("berth %s: exit %d, %q, %q; want exit 2 naming %s", strings.Join(tc.args, " "), code, out, errOut, tc.want)
		}
	}
	if list := c.listSchedules(); len(list) != 3 {
		t.Fatalf("bad input registered %+v", list)
	}
}
