package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/auth"
	"github.com/berth-dev/berth/sqlite"
)

// runIn is run with stdin.
func (c *cli) runIn(stdin string, args ...string) (int, string, string) {
	c.t.Helper()
	var out, errOut bytes.Buffer
	m := &Main{Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errOut, Getenv: func(k string) string {
		if k == "BERTH_SERVER" {
			return c.url
		}
		return ""
	}}
	return m.Run(context.Background(), args), out.String(), errOut.String()
}

func (c *cli) tokens() []berth.Token { return listJSON[berth.Token](c, "token", "list", "-o", "json") }

func TestTokenCommands(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	if got := c.tokens(); len(got) != 1 || got[0].Role != "admin" {
		t.Fatalf("a new server's tokens: %+v, want the first admin token only", got)
	}
	for _, bad := range [][]string{
		{"--role", "boss", "--name", "alice"},
		{"--role", "user", "--name", "al ice"},
		{"--role", "user", "--name", "alice", "--ttl", "soon"},
		{"--role", "user", "--name", "alice", "--ttl", "0d"},
		{"--role", "user", "--name", "alice", "extra"},
		{"--role", "user", "--name", "alice", "--rpm", "-5"},
		{"--role", "user", "--name", "alice", "--models", "a,a"},
	} {
		if code, _, errOut := c.run(append([]string{"token", "create"}, bad...)...); code != exitUsage || !strings.Contains(errOut, "invalid") {
			t.Errorf("token create %q: exit %d, %q; want 2 and an invalid-input error", bad, code, errOut)
		}
	}
	if got := c.tokens(); len(got) != 1 {
		t.Fatalf("refused creates stored tokens: %+v", got)
	}
	code, out, errOut := c.run("token", "create", "--role", "user", "--name", "alice", "--ttl", "30d")
	if code != 0 || strings.Count(out, ".") != 2 || !strings.Contains(errOut, "shown this once") {
		t.Fatalf("token create: exit %d, stdout %q, stderr %q; want the JWT on stdout", code, out, errOut)
	}
	list := c.tokens()
	if len(list) != 2 || list[1].Name != "alice" || list[1].ExpiresAt.IsZero() {
		t.Fatalf("tokens after create: %+v", list)
	}
	// The inference gateway's limits: a model allow-list and requests per minute.
	if code, _, errOut := c.run("token", "create", "--role", "user", "--name", "app", "--models", "org/a, org/b", "--rpm", "60"); code != 0 {
		t.Fatalf("token create with gateway limits: exit %d: %s", code, errOut)
	}
	if app := c.tokens()[2]; app.Name != "app" || app.RPM != 60 || strings.Join(app.Models, "|") != "org/a|org/b" {
		t.Fatalf("the token with gateway limits: %+v", app)
	}
	if code, out, _ := c.run("token", "list"); code != 0 || !strings.Contains(out, "org/a,org/b 60/min") {
		t.Errorf("token list does not show the gateway limits:\n%s", out)
	}
	// With alice's token the CLI submits as alice, whoever $USER is; it
	// may not name another user.
	env := map[string]string{"BERTH_TOKEN": strings.TrimSpace(out), "USER": "root"}
	if code, _, errOut := c.runEnv(env, "submit", "--", "true"); code != 0 {
		t.Fatalf("submit with a user's token: exit %d: %s", code, errOut)
	}
	if code, _, errOut := c.runEnv(env, "submit", "--user", "bob", "--", "true"); code != exitUsage || !strings.Contains(errOut, "forbidden") {
		t.Errorf("submit as another user with a user's token: exit %d, %q", code, errOut)
	}
	if jobs := c.listJobs(); len(jobs) != 1 || jobs[0].User != "alice" {
		t.Fatalf("jobs after alice's submissions: %+v, want one of alice's", jobs)
	}
	if code, _, errOut := c.run("token", "revoke", "NOPE"); code != exitUsage || !strings.Contains(errOut, "not_found") {
		t.Errorf("revoking an unknown token: exit %d, %q", code, errOut)
	}
	if code, out, errOut := c.run("token", "revoke", list[1].ID); code != 0 || !strings.Contains(out, "revoked") {
		t.Fatalf("token revoke: exit %d, %q %q", code, out, errOut)
	}
	if got := c.tokens(); got[1].RevokedAt.IsZero() {
		t.Errorf("revoked token listed as %+v", got[1])
	}
}

func TestSecretCommands(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	const value = "v3ry-s3cret"
	if code, _, errOut := c.runIn("", "secret", "set", "API_KEY"); code != exitUsage || !strings.Contains(errOut, "stdin was empty") {
		t.Errorf("secret set with nothing on stdin: exit %d, %q", code, errOut)
	}
	if code, _, errOut := c.runIn(value, "secret", "set", "1BAD"); code != exitUsage || !strings.Contains(errOut, "invalid") || strings.Contains(errOut, value) {
		t.Errorf("secret set with a bad name: exit %d, %q", code, errOut)
	}
	if code, out, _ := c.run("secret", "list", "-o", "json"); code != 0 || strings.TrimSpace(out) != "[]" {
		t.Fatalf("refused sets stored secrets: %q", out)
	}
	if code, out, errOut := c.runIn(value+"\n", "secret", "set", "API_KEY"); code != 0 || !strings.Contains(out, "{{SECRET:API_KEY}}") {
		t.Fatalf("secret set: exit %d, %q %q", code, out, errOut)
	}
	code, out, _ := c.run("secret", "list", "-o", "json")
	if code != 0 || !strings.Contains(out, `"API_KEY"`) || strings.Contains(out, value) {
		t.Fatalf("secret list: exit %d, %q: want the name and never the value", code, out)
	}
	if code, _, errOut := c.run("submit", "--env", "K={{SECRET:NOPE}}", "--", "true"); code != exitUsage || !strings.Contains(errOut, "env.K") {
		t.Errorf("a job referencing a missing secret: exit %d, %q", code, errOut)
	}
	if code, _, errOut := c.run("secret", "rm", "API_KEY"); code != 0 {
		t.Fatalf("secret rm: %s", errOut)
	}
	if code, _, errOut := c.run("secret", "rm", "API_KEY"); code != exitUsage || !strings.Contains(errOut, "not_found") {
		t.Errorf("removing a removed secret: exit %d, %q", code, errOut)
	}
}

func TestServerSecurityFlags(t *testing.T) {
	t.Parallel()
	for _, sc := range []securityConfig{
		{TrustLoopback: "root"},
		{TLSCert: "cert.pem"},
		{TLSSelfSigned: true, TLSCert: "c", TLSKey: "k"},
		{RateLimit: -1},
	} {
		dir := t.TempDir()
		_, err := startServer(context.Background(), &serverConfig{DataDir: dir, Listen: "127.0.0.1:0", Security: sc})
		if berth.ErrorCode(err) != berth.ECodeInvalid {
			t.Errorf("%+v: got %v, want an invalid-input error", sc, err)
		}
		if matches, _ := filepath.Glob(filepath.Join(dir, "*")); len(matches) != 0 {
			t.Errorf("%+v: a refused start wrote %v", sc, matches)
		}
	}
}

func TestExposureNeedsAuthentication(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "berth.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	keys, err := auth.NewKeys(bytes.Repeat([]byte{7}, auth.MasterKeySize))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := auth.NewRegistry(t.Context(), st, keys, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkExposure("0.0.0.0:7070", reg, &securityConfig{}); berth.ErrorCode(err) != berth.ECodeInvalid {
		t.Errorf("no token, no --allow, beyond loopback: got %v, want a refusal", err)
	}
	if err := checkExposure("127.0.0.1:7070", reg, &securityConfig{}); err != nil {
		t.Errorf("loopback: %v", err)
	}
	rule, _ := auth.ParseCIDRRule("10.0.0.0/8=viewer")
	if err := checkExposure("0.0.0.0:7070", reg, &securityConfig{Allow: []auth.CIDRRule{rule}}); err != nil {
		t.Errorf("with an --allow rule: %v", err)
	}
}
