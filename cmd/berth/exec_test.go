package main

import (
	"strings"
	"testing"
)

// TestExecAndPortForwardRefuseBadInput: bad arguments are refused naming
// the argument or flag, and a job that is not running (here, pending with
// no agent) is a conflict naming its state; each is one line on stderr
// and exit 2.
func TestExecAndPortForwardRefuseBadInput(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	code, id, errOut := c.run("submit", "--", "true")
	if code != 0 {
		t.Fatalf("submit: exit %d: %s", code, errOut)
	}
	id = strings.TrimSpace(id)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"exec"}, "id: give the id of a running job"},
		{[]string{"exec", id}, "command: give the command to run after --"},
		{[]string{"exec", id, "--"}, "command: give the command to run after --"},
		{[]string{"exec", id, "x", "--", "true"}, "id: give one job id before --"},
		{[]string{"exec", "--rank", "-1", id, "--", "true"}, "--rank: must be 0 or more"},
		{[]string{"exec", id, "--", "true"}, "job " + id + " is pending, not running (conflict)"},
		{[]string{"exec", "nope", "--", "true"}, "(not_found)"},
		{[]string{"port-forward", id}, "args: give a job id and LOCAL:REMOTE (or PORT), got 1"},
		{[]string{"port-forward", id, "8888", "9999"}, "got 3"},
		{[]string{"port-forward", id, "0"}, `LOCAL:REMOTE: "0": LOCAL must be a port number from 1 to 65535, not "0"`},
		{[]string{"port-forward", id, "65536:80"}, `LOCAL must be a port number from 1 to 65535, not "65536"`},
		{[]string{"port-forward", id, "8888:"}, `"8888:": REMOTE must be a port number from 1 to 65535, not ""`},
		{[]string{"port-forward", id, "8888:1:2"}, `REMOTE must be a port number from 1 to 65535, not "1:2"`},
		{[]string{"port-forward", id, ":80"}, `LOCAL must be a port number from 1 to 65535, not ""`},
		{[]string{"port-forward", "--rank", "-2", id, "80"}, "--rank: must be 0 or more"},
		{[]string{"port-forward", id, "80"}, "job " + id + " is pending, not running (conflict)"},
	} {
		code, out, errOut := c.run(tc.args...)
		if code != exitUsage || out != "" || !strings.Contains(errOut, tc.want) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("berth %s: exit %d, stdout %q, stderr %q; want exit 2 and one line with %q",
				strings.Join(tc.args, " "), code, out, errOut, tc.want)
		}
	}
}

// TestParsePorts: PORT is the same port on both sides; LOCAL:REMOTE two.
func TestParsePorts(t *testing.T) {
	t.Parallel()
	for arg, want := range map[string][2]int{"8888": {8888, 8888}, "1:65535": {1, 65535}, "18888:8888": {18888, 8888}} {
		local, remote, err := parsePorts(arg)
		if err != nil || local != want[0] || remote != want[1] {
			t.Errorf("parsePorts(%q) = %d, %d, %v; want %d, %d", arg, local, remote, err, want[0], want[1])
		}
	}
}
