package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/agent"
	"github.com/berth-dev/berth/auth"
)

// TestAgentRejectsBadModelFlags checks that --models, --prewarm,
// --prewarm-timeout and --advertise are validated before the agent starts,
// with an error naming the flag.
func TestAgentRejectsBadModelFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--models", "m1,,m2"}, "--models"},
		{[]string{"--models", strings.Repeat("m", 129)}, "--models"},
		{[]string{"--models", "m1,a\tb"}, "--models"},
		{[]string{"--prewarm", "fetch-weights"}, "--prewarm"},
		{[]string{"--prewarm", "fetch {model}", "--prewarm-timeout", "0s"}, "--prewarm-timeout"},
		{[]string{"--advertise", "10.0.0.5:7070"}, "--advertise"},
		{[]string{"--advertise", "http://gpu-7"}, "--advertise"},
	} {
		checkAgentUsageError(t, tc.args, tc.want)
	}
}

// checkAgentUsageError runs berth agent with flags and checks that it
// exits 2 before it starts, with an error holding want.
func checkAgentUsageError(t *testing.T, flags []string, want string) {
	t.Helper()
	var out, errOut bytes.Buffer
	m := &Main{Stdout: &out, Stderr: &errOut, Getenv: func(string) string { return "" }}
	args := append([]string{"agent", "--gpus", "0", "--data-dir", t.TempDir(), "--server", "http://127.0.0.1:1"}, flags...)
	code := m.Run(context.Background(), args)
	if code != exitUsage || !strings.Contains(errOut.String(), want) || out.Len() != 0 {
		t.Errorf("berth %s: exit %d, stdout %q, stderr %q; want exit 2 and an error with %q",
			strings.Join(args, " "), code, out.String(), errOut.String(), want)
	}
}

// TestAgentExitsWhenRefused runs berth agent against a server that trusts
// no one unauthenticated (--trust-loopback none), without a credential,
// with a user's token and with a revoked saved credential: each time it
// exits 2 at once with one line saying why and how to join, after its
// startup line (which counts the GPUs in words).
func TestAgentExitsWhenRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs, err := startServer(ctx, &serverConfig{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Security: securityConfig{TrustLoopback: "none"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close(ctx) })
	noRecord := func(*berth.Token) error { return nil }
	alice, err := rs.Tokens.Issue(ctx, auth.Grant{Name: "alice", Role: auth.RoleUser, By: "test"}, noRecord)
	if err != nil {
		t.Fatal(err)
	}
	box, err := rs.Tokens.Issue(ctx, auth.Grant{Name: "t4box", Role: auth.RoleAgent, Worker: "t4box", By: "test"}, noRecord)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rs.Tokens.Revoke(ctx, box.ID, noRecord); err != nil {
		t.Fatal(err)
	}
	const join = "start it with a join token in $BERTH_JOIN_TOKEN (or --join-token TOKEN), " +
		"which an admin makes with berth token create --role agent --name NAME"
	for _, tc := range []struct {
		name, gpus, token, saved string
		gpuWords                 string // in the startup line
		why                      string // what the error says after the server's URL
	}{
		{"no credential", "1xT4:16GiB", "", "", "1 GPU",
			"refused this agent, which has no credential (401): " + auth.MsgAuthRequired + "; " + join},
		{"user token", "2xT4:16GiB", alice.Secret, "", "2 GPUs",
			"refused this agent's credential (403): alice (role user) may not GET /api/v1/agent: " +
				"that needs an agent credential (berth agent --join-token) or admin; it is $BERTH_TOKEN: unset it and " + join},
		{"revoked credential", "0", "", box.Secret, "0 GPUs",
			"refused this agent's credential, saved in DIR/credential (401): invalid token: token " + box.ID + " was revoked; " +
				"delete DIR/credential and " + join},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.saved != "" {
				if err := agent.SaveCredential(dir, tc.saved); err != nil {
					t.Fatal(err)
				}
			}
			var out, errOut bytes.Buffer
			m := &Main{Stdout: &out, Stderr: &errOut, Getenv: func(k string) string {
				if k == "BERTH_TOKEN" {
					return tc.token
				}
				return ""
			}}
			runCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			code := m.Run(runCtx, []string{"agent", "--server", rs.URL, "--gpus", tc.gpus, "--host", "t4box", "--data-dir", dir})
			wantOut := regexp.MustCompile(`^berth agent w-[0-9a-z]+ \(host t4box, ` + tc.gpuWords + `\) joining ` + regexp.QuoteMeta(rs.URL) + "\n$")
			wantErr := "berth: agent: the server " + rs.URL + " " + strings.ReplaceAll(tc.why, "DIR", dir) + "\n"
			// Before the one line, the agent may log how it isolates jobs here.
			gotErr := regexp.MustCompile(`(?m)^time=.* level=(INFO|WARN) .*isolation=.*\n`).ReplaceAllString(errOut.String(), "")
			if code != exitUsage || !wantOut.MatchString(out.String()) || gotErr != wantErr {
				t.Fatalf("berth agent: exit %d, stdout %q, stderr %q;\nwant exit 2, stdout matching %s, stderr %q",
					code, out.String(), errOut.String(), wantOut, wantErr)
			}
		})
	}
}

// TestAgentGPUsErrorNamesTheFlagOnce checks that a bad --gpus of berth
// agent and berth up is named once, as the flag.
func TestAgentGPUsErrorNamesTheFlagOnce(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"agent", "up"} {
		var out, errOut bytes.Buffer
		m := &Main{Stdout: &out, Stderr: &errOut, Getenv: func(string) string { return "" }}
		args := []string{cmd, "--gpus", "bogus", "--data-dir", t.TempDir()}
		code := m.Run(context.Background(), args)
		const want = `berth: --gpus: "bogus" is not COUNTxMODEL:MEMORY (e.g. 4xH100:80GiB) (invalid)` + "\n"
		if code != exitUsage || out.Len() != 0 || errOut.String() != want {
			t.Errorf("berth %s: exit %d, stdout %q, stderr %q; want exit 2 and %q",
				strings.Join(args, " "), code, out.String(), errOut.String(), want)
		}
	}
}

// TestAgentRejectsBadRunAsFlags checks that --run-as, --user-map and
// --allow-root-jobs are validated before the agent starts, with an error
// naming the flag (and, for a bad map file, its line).
func TestAgentRejectsBadRunAsFlags(t *testing.T) {
	t.Parallel()
	bad := filepath.Join(t.TempDir(), "users")
	if err := os.WriteFile(bad, []byte("alice alice\nbob\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--run-as", "user"}, `--run-as: "user": want map or agent`},
		{[]string{"--user-map", bad}, "--run-as: --user-map and --allow-root-jobs need --run-as map"},
		{[]string{"--allow-root-jobs"}, "--run-as: --user-map and --allow-root-jobs need --run-as map"},
		{[]string{"--run-as", "map", "--user-map", bad}, "--user-map: user map " + bad + `:2: "bob": want BERTHUSER UNIXACCOUNT`},
	} {
		checkAgentUsageError(t, tc.args, tc.want)
	}
}

// TestAgentMPSPipeDirMustBeAbsolute: --mps-pipe-dir names the MPS
// daemon's directory, an absolute path.
func TestAgentMPSPipeDirMustBeAbsolute(t *testing.T) {
	t.Parallel()
	checkAgentUsageError(t, []string{"--mps-pipe-dir", "run/mps"}, `--mps-pipe-dir: "run/mps": must be an absolute path`)
}

// TestAgentDiscoversMIGDevices runs berth agent's configuration with a
// fake nvidia-smi on PATH whose GPU 0 is split into two MIG devices: the
// agent offers GPU 1 whole and each MIG device as a GPU of its own, the
// profile as its model, and health-checks them with that nvidia-smi.
func TestAgentDiscoversMIGDevices(t *testing.T) {
	dir := t.TempDir()
	script := `#!/bin/sh
case "$*" in
"-L") printf 'GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-aaaa)\n  MIG 3g.40gb     Device  0: (UUID: MIG-1111)\n  MIG 3g.40gb     Device  1: (UUID: MIG-2222)\nGPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-bbbb)\n' ;;
"--query-gpu=index,uuid,name,memory.total --format=csv,noheader,nounits") printf '0, GPU-aaaa, NVIDIA A100-SXM4-80GB, 81920\n1, GPU-bbbb, NVIDIA A100-SXM4-80GB, 81920\n' ;;
*) echo "unexpected: $*" >&2; exit 64 ;;
esac
`
	if err := os.WriteFile(filepath.Join(dir, "nvidia-smi"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+":"+os.Getenv("PATH"))
	af := &agentFlags{}
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	(&Main{}).addAgentFlags(fs, af) // every flag at its default
	cfg, err := af.agentConfig(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := berth.GPUSpec(cfg.GPUs); got != "1xNVIDIA A100-SXM4-80GB:80GiB,2x3g.40gb:38146MiB" ||
		cfg.GPUs[1].UUID != "MIG-1111" || cfg.GPUs[2].Parent != "GPU-aaaa" || cfg.NvidiaSMI != filepath.Join(dir, "nvidia-smi") {
		t.Fatalf("GPUs %s (%+v), nvidia-smi %q", got, cfg.GPUs, cfg.NvidiaSMI)
	}
}
