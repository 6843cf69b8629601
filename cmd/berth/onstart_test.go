package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/api"
	"github.com/berth-dev/berth/provision"
)

// asBerthEnv, set, makes this test binary run as berth itself (TestMain),
// as the binary a rented instance fetches from the server does.
const asBerthEnv = "BERTH_TEST_AS_BERTH"

// systemTool returns the path of a system tool, not a user's shim.
func systemTool(t *testing.T, name string) string {
	t.Helper()
	for _, dir := range []string{"/usr/bin", "/bin"} {
		if p := filepath.Join(dir, name); fileExists(p) {
			return p
		}
	}
	t.Fatalf("%s is not installed in /usr/bin or /bin", name)
	return ""
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// An instance's onstart, run by a real shell with only curl, wget or
// python3 to fetch with, fetches the server's own executable from a real
// server, runs it as berth agent, and the agent joins; an image with
// berth on its PATH runs that one and fetches nothing; an image with no
// way to fetch says so.
func TestAgentOnstartFetchesTheServersBinary(t *testing.T) {
	t.Parallel()
	rs, err := startServer(context.Background(), &serverConfig{DataDir: t.TempDir(), Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close(context.Background()) })
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	f := &poolFleet{server: rs.URL, credential: rs.agentCredential, log: slog.New(slog.DiscardHandler)}
	pool := &berth.Pool{Name: "rent"}
	// onstart runs host's onstart with only tools on PATH (and chmod).
	onstart := func(t *testing.T, host string, tools ...string) (*exec.Cmd, string, *bytes.Buffer) {
		req := f.request(pool, &berth.Instance{ID: host, Pool: "rent", WorkerHost: host})
		if req.Image != provision.DefaultImage {
			t.Errorf("image %q, want the default %q", req.Image, provision.DefaultImage)
		}
		dir, bin := t.TempDir(), t.TempDir()
		for _, tool := range append(tools, "chmod") {
			if err := os.Symlink(systemTool(t, tool), filepath.Join(bin, tool)); err != nil {
				t.Fatal(err)
			}
		}
		cmd := exec.Command("/bin/sh", "-c", req.Onstart)
		cmd.Dir = dir
		cmd.Env = []string{"PATH=" + bin, "HOME=" + dir, "TMPDIR=" + dir, "BERTH_SERVER=" + req.Env["BERTH_SERVER"], asBerthEnv + "=1"}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		return cmd, dir, &out
	}
	for _, fetcher := range []string{"curl", "wget", "python3"} {
		t.Run(fetcher, func(t *testing.T) {
			t.Parallel()
			host := "rent-" + fetcher
			cmd, dir, out := onstart(t, host, fetcher)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan struct{})
			go func() {
				_ = cmd.Wait()
				close(exited)
			}()
			t.Cleanup(func() {
				_ = cmd.Process.Signal(syscall.SIGTERM)
				<-exited
			})
			poll := time.NewTicker(20 * time.Millisecond) // polling the registry
			defer poll.Stop()
			for deadline := time.After(30 * time.Second); !rs.Ctl.Registered(host); {
				select {
				case <-exited:
					t.Fatalf("the onstart of %s ended before its agent joined; its output:\n%s", host, out)
				case <-deadline:
					t.Fatalf("the agent of %s never joined; its output:\n%s", host, out)
				case <-poll.C:
				}
			}
			got, _ := filepath.Glob(filepath.Join(dir, "berth-agent.*"))
			if len(got) != 1 {
				t.Fatalf("fetched binaries %v, want one", got)
			}
			b, err := os.ReadFile(got[0])
			if err != nil || !bytes.Equal(b, want) {
				t.Fatalf("the fetched binary (%d bytes, %v) is not the server's (%d bytes)", len(b), err, len(want))
			}
		})
	}
	t.Run("berth on PATH", func(t *testing.T) {
		t.Parallel()
		cmd, dir, out := onstart(t, "rent-own")
		bin := strings.TrimPrefix(cmd.Env[0], "PATH=")
		script := "#!/bin/sh\necho \"$BERTH_TOKEN\" \"$@\" >" + filepath.Join(dir, "ran") + "\n"
		if err := os.WriteFile(filepath.Join(bin, "berth"), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Run(); err != nil {
			t.Fatalf("onstart: %v\n%s", err, out)
		}
		ran, err := os.ReadFile(filepath.Join(dir, "ran"))
		token, args, _ := strings.Cut(strings.TrimSpace(string(ran)), " ")
		if err != nil || len(token) < 100 || args != "agent --host rent-own" {
			t.Fatalf("the image's berth ran with %q (%v), want a token and agent --host rent-own", ran, err)
		}
		if got, _ := filepath.Glob(filepath.Join(dir, "berth-agent.*")); len(got) != 0 {
			t.Errorf("fetched %v although the image has berth", got)
		}
	})
	t.Run("agents only", func(t *testing.T) {
		t.Parallel()
		req, err := http.NewRequest(http.MethodGet, rs.URL+api.AgentBinaryPath, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+rs.AdminToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("an admin fetching the agent binary: %s, want 403", resp.Status)
		}
	})
	t.Run("nothing to fetch with", func(t *testing.T) {
		t.Parallel()
		cmd, _, out := onstart(t, "rent-bare")
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 127 || !strings.Contains(out.String(), "no berth, curl, wget or python3") {
			t.Fatalf("onstart = %v, %q; want exit 127 saying what is missing", err, out)
		}
	})
}
