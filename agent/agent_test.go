package agent

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/berth-dev/berth/internal/dirlock"
	"github.com/berth-dev/berth/wire"
)

// TestSecondAgentOnADataDirIsRefused starts a second agent on the data dir
// of one that runs an attempt: it is refused, naming the dir, and does not
// kill that attempt as one a previous agent left behind.
func TestSecondAgentOnADataDirIsRefused(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t)
	var dir string
	startAgent(t, fs, func(c *Config) { dir = c.DataDir })
	pidFile := filepath.Join(t.TempDir(), "pid")
	fs.assign(&wire.JobAssign{AttemptID: "a1", Command: []string{"sh", "-c", "echo $$ > " + pidFile + "; echo ready; exec sleep 1000"}})
	fs.output("a1", "ready")
	_, err := New(Config{Server: fs.srv.URL, DataDir: dir, Host: "box"})
	if !errors.Is(err, dirlock.ErrInUse) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("second New on %s: got %v, want an in-use error naming the dir", dir, err)
	}
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("the first agent's attempt (pid %d) is gone after the second agent was refused: %v", pid, err)
	}
}
