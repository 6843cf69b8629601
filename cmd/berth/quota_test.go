package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/berth-dev/berth"
)

func (c *cli) listQuotas() []berth.QuotaRule {
	return listJSON[berth.QuotaRule](c, "quota", "list", "-o", "json")
}

func TestQuotaSetListRm(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	if rules := c.listQuotas(); len(rules) != 0 {
		t.Fatalf("rules of a new server: %+v", rules)
	}
	code, out, errOut := c.run("quota", "set", "user:alice", "gpus<=8", "jobs<=4", "weight=2")
	if code != 0 || out != "user:alice created: gpus<=8 jobs<=4 weight=2\n" || errOut != "" {
		t.Fatalf("quota set: exit %d, %q, %q", code, out, errOut)
	}
	code, out, _ = c.run("quota", "set", "user:alice", "jobs<=1")
	if code != 0 || out != "user:alice replaced: jobs<=1\n" {
		t.Fatalf("quota set again: exit %d, %q", code, out)
	}
	code, out, _ = c.run("quota", "set", "-o", "json", "queue:gpu", "gpus<=16")
	var q berth.QuotaRule
	if code != 0 || json.Unmarshal([]byte(out), &q) != nil || q.ID() != "queue:gpu" || q.MaxGPUs != 16 || q.MaxJobs != berth.NoLimit {
		t.Fatalf("quota set -o json: exit %d, %q", code, out)
	}

	code, out, _ = c.run("quota", "list")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 || strings.Join(strings.Fields(lines[0]), " ") != "RULE LIMITS UPDATED" ||
		!strings.HasPrefix(lines[1], "queue:gpu ") || !strings.Contains(lines[1], "gpus<=16") ||
		!strings.HasPrefix(lines[2], "user:alice ") || !strings.Contains(lines[2], "jobs<=1") {
		t.Fatalf("quota list: exit %d:\n%s", code, out)
	}
	rules := c.listQuotas()
	if len(rules) != 2 || rules[0].ID() != "queue:gpu" || rules[1].Limits() != "jobs<=1" || rules[1].UpdatedAt.IsZero() {
		t.Fatalf("quota list -o json = %+v", rules)
	}

	if code, out, errOut := c.run("quota", "rm", "user:alice"); code != 0 || out != "user:alice removed\n" {
		t.Fatalf("quota rm: exit %d, %q, %q", code, out, errOut)
	}
	code, out, errOut = c.run("quota", "rm", "user:alice")
	if code != exitUsage || out != "" || !strings.Contains(errOut, "not_found") || strings.Count(errOut, "\n") != 1 {
		t.Fatalf("quota rm of a removed rule: exit %d, %q, %q; want 2 and one not_found line", code, out, errOut)
	}
	if rules := c.listQuotas(); len(rules) != 1 || rules[0].ID() != "queue:gpu" {
		t.Fatalf("rules after rm: %+v", rules)
	}
	if code, out, _ := c.run("quota", "help"); code != 0 || !strings.Contains(out, "berth quota set SCOPE:NAME") {
		t.Errorf("quota help: exit %d, %q", code, out)
	}
}

// TestQuotaBadInputFailsWithOneLineAndStoresNothing checks each mistake
// gives exit 2 and one error line naming the field, and stores nothing.
func TestQuotaBadInputFailsWithOneLineAndStoresNothing(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	for _, tc := range []struct {
		args []string
		want string // in the error line
	}{
		{[]string{"quota"}, "subcommand"},
		{[]string{"quota", "frobnicate"}, "unknown subcommand"},
		{[]string{"quota", "set"}, "id"},
		{[]string{"quota", "set", "alice", "gpus<=1"}, "id"},
		{[]string{"quota", "set", "group:ml", "gpus<=1"}, "scope"},
		{[]string{"quota", "set", "user:", "gpus<=1"}, "name"},
		{[]string{"quota", "set", "user:alice"}, "max_gpus"},
		{[]string{"quota", "set", "user:alice", "gpus<=x"}, "max_gpus"},
		{[]string{"quota", "set", "user:alice", "gpus<=2000000"}, "max_gpus"},
		{[]string{"quota", "set", "user:alice", "jobs<=-1"}, "max_jobs"},
		{[]string{"quota", "set", "user:alice", "weight=heavy"}, "weight"},
		{[]string{"quota", "set", "queue:gpu", "weight=2"}, "weight"},
		{[]string{"quota", "set", "user:alice", "gpus=8"}, "limits"},
		{[]string{"quota", "set", "user:alice", "memory<=8"}, "limits"},
		{[]string{"quota", "set", "-o", "xml", "user:alice", "gpus<=1"}, "-o"},
		{[]string{"quota", "list", "extra"}, "args"},
		{[]string{"quota", "rm"}, "id"},
		{[]string{"quota", "rm", "user:a", "user:b"}, "id"},
		{[]string{"quota", "rm", "alice"}, "id"},
		{[]string{"quota", "rm", "user:nobody"}, "not_found"},
	} {
		code, out, errOut := c.run(tc.args...)
		lines := strings.Split(strings.TrimSpace(errOut), "\n")
		if code != exitUsage || !strings.Contains(errOut, tc.want) || out != "" {
			t.Errorf("berth %s: exit %d, stdout %q, stderr %q; want exit 2 and an error naming %q",
				strings.Join(tc.args, " "), code, out, errOut, tc.want)
		}
		if len(lines) != 1 {
			t.Errorf("berth %s: error is %d lines: %q", strings.Join(tc.args, " "), len(lines), errOut)
		}
	}
	// A flag error is one line naming the flag, not the usage.
	if code, out, errOut := c.run("quota", "set", "--nope", "user:alice", "gpus<=1"); code != exitUsage || out != "" ||
		errOut != "berth: --nope: no such flag; berth quota set -h lists the flags (invalid)\n" {
		t.Errorf("quota set --nope: exit %d, %q, %q; want 2 and one line naming the flag", code, out, errOut)
	}
	if rules := c.listQuotas(); len(rules) != 0 {
		t.Fatalf("bad input stored %+v", rules)
	}
}
