package main

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/berth-dev/berth"
)

// runEnv is run with extra environment variables.
func (c *cli) runEnv(env map[string]string, args ...string) (int, string, string) {
	c.t.Helper()
	var out, errOut bytes.Buffer
	m := &Main{Stdout: &out, Stderr: &errOut, Getenv: func(k string) string {
		if k == "BERTH_SERVER" {
			return c.url
		}
		return env[k]
	}}
	code := m.Run(context.Background(), args)
	return code, out.String(), errOut.String()
}

func (c *cli) lockStatus() berth.SwapLockState {
	c.t.Helper()
	st := runJSON[berth.SwapLockState](c, "lock", "status", "-o", "json")
	if st.Token != "" {
		c.t.Fatalf("lock status shows the token: %q", st.Token)
	}
	return st
}

func TestLockAcquireStatusRelease(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	if code, out, _ := c.run("lock", "status"); code != 0 || out != "not held\n" {
		t.Fatalf("lock status of no lock: exit %d, %q", code, out)
	}
	if code, out, _ := c.run("lock", "status", "-o", "json"); code != 0 || out != "{\n  \"held\": false\n}\n" && out != "{\"held\":false}\n" {
		t.Fatalf("lock status -o json of no lock: exit %d, %q", code, out)
	}

	// acquire prints the token alone on stdout.
	code, out, errOut := c.run("lock", "acquire", "--holder", "nightly-eval", "--ttl", "15m", "--note", "big model")
	token := strings.TrimSpace(out)
	if code != 0 || !regexp.MustCompile(`^[0-9a-f]{64}\n$`).MatchString(out) || !strings.Contains(errOut, "held by nightly-eval until") {
		t.Fatalf("lock acquire: exit %d, %q, %q", code, out, errOut)
	}
	st := c.lockStatus()
	if !st.Held || st.Holder != "nightly-eval" || st.Note != "big model" || st.SecondsRemaining != 900 {
		t.Fatalf("lock status = %+v", st)
	}
	if code, out, _ := c.run("lock", "status"); code != 0 || !strings.HasPrefix(out, "held by nightly-eval until ") ||
		!strings.Contains(out, "(900s left)") || !strings.Contains(out, "note: big model") {
		t.Fatalf("lock status: exit %d, %q", code, out)
	}

	// Another holder: refused with the server's conflict; exit 2, one line.
	code, out, errOut = c.run("lock", "acquire", "--holder", "dashboard")
	if code != exitUsage || out != "" || !strings.Contains(errOut, "held by nightly-eval") || !strings.Contains(errOut, "(conflict)") ||
		strings.Count(errOut, "\n") != 1 {
		t.Fatalf("acquire by another holder: exit %d, %q, %q", code, out, errOut)
	}
	// The holder without its token: forbidden; with it (flag or env): extended, same token.
	if code, _, errOut := c.run("lock", "acquire", "--holder", "nightly-eval"); code != exitUsage || !strings.Contains(errOut, "(forbidden)") {
		t.Fatalf("extend without the token: exit %d, %q", code, errOut)
	}
	code, out, _ = c.run("lock", "acquire", "--holder", "nightly-eval", "--token", token, "--ttl", "60", "-o", "json")
	var ext berth.SwapLockState
	if code != 0 || json.Unmarshal([]byte(out), &ext) != nil || ext.Token != token || ext.SecondsRemaining != 60 || ext.Note != "big model" {
		t.Fatalf("extend with --token -o json: exit %d, %q", code, out)
	}
	env := map[string]string{lockTokenEnv: token}
	if code, out, _ := c.runEnv(env, "lock", "acquire", "--holder", "nightly-eval", "--ttl", "120"); code != 0 || strings.TrimSpace(out) != token {
		t.Fatalf("extend with $%s: exit %d, %q", lockTokenEnv, code, out)
	}

	// release: the token is needed, a wrong one refused.
	if code, _, errOut := c.run("lock", "release"); code != exitUsage || !strings.Contains(errOut, "--token") {
		t.Fatalf("release without a token: exit %d, %q", code, errOut)
	}
	if code, _, errOut := c.run("lock", "release", "--token", "nope"); code != exitUsage || !strings.Contains(errOut, "(forbidden)") {
		t.Fatalf("release with a wrong token: exit %d, %q", code, errOut)
	}
	if code, out, _ := c.runEnv(env, "lock", "release"); code != 0 || out != "released\n" {
		t.Fatalf("release with $%s: exit %d, %q", lockTokenEnv, code, out)
	}
	if code, out, _ := c.run("lock", "release", "--token", token); code != 0 || out != "not held\n" {
		t.Fatalf("release again: exit %d, %q", code, out)
	}

	// --force: the human override.
	if code, _, _ := c.run("lock", "acquire", "--holder", "x"); code != 0 {
		t.Fatal("acquire for the forced release failed")
	}
	if code, out, _ := c.runEnv(map[string]string{lockTokenEnv: "stale"}, "lock", "release", "--force", "-o", "json"); code != 0 ||
		!strings.Contains(out, `"released": true`) {
		t.Fatalf("release --force: exit %d, %q", code, out)
	}
	if st := c.lockStatus(); st.Held {
		t.Fatalf("lock held after forced release: %+v", st)
	}
}

func TestLockBadInput(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"lock"}, "subcommand"},
		{[]string{"lock", "grab"}, "unknown subcommand"},
		{[]string{"lock", "acquire"}, "--holder"},
		{[]string{"lock", "acquire", "--holder", "h", "--ttl", "soon"}, "--ttl"},
		{[]string{"lock", "acquire", "--holder", "h", "--ttl", "0"}, "--ttl"},
		{[]string{"lock", "acquire", "--holder", "h", "--ttl", "25h"}, "--ttl"},
		{[]string{"lock", "acquire", "--holder", "h", "extra"}, "no arguments"},
		{[]string{"lock", "status", "-o", "xml"}, "-o"},
	} {
		code, out, errOut := c.run(tc.args...)
		if code != exitUsage || out != "" || !strings.Contains(errOut, tc.want) {
			t.Errorf("berth %s: exit %d, %q, %q; want exit 2 naming %s", strings.Join(tc.args, " "), code, out, errOut, tc.want)
		}
	}
	if st := c.lockStatus(); st.Held {
		t.Fatalf("bad input took the lock: %+v", st)
	}
	if code, out, _ := c.run("lock", "help"); code != 0 || !strings.Contains(out, "berth lock acquire --holder H") {
		t.Errorf("lock help: exit %d, %q", code, out)
	}
}
