package agent

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestWatchdogKillsADeadAgentsAttempts runs, as a dead agent would leave
// them, a job whose shell has a child in its group and a grandchild in a
// session of its own (setsid), and a service with a record for the next
// agent. Told of a clean stop, the watchdog kills nothing; when the pipe
// from the agent ends without that word, it kills the job's three
// processes and leaves the service running.
func TestWatchdogKillsADeadAgentsAttempts(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	groups := openJournal(t, root)
	pids := filepath.Join(root, "pids")
	job := specIn(t, root, groups, "job", "sh", "-c",
		`setsid sleep 300 & echo $! > `+pids+`; echo $$ >> `+pids+`; sleep 300 & echo $! >> `+pids+`; echo ready; wait`)
	jp := start(t, job)
	svc := specIn(t, root, groups, "svc", "sleep", "300")
	svc.Detached = true
	sp := start(t, svc)
	if err := os.MkdirAll(filepath.Join(root, "services"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "services", "svc.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitForLog(t, job, "ready")
	procs := pidsIn(t, pids)
	// setsid runs in the forked child: await its leaving the job's group.
	for left := time.Now().Add(10 * time.Second); ; {
		if pgid, _ := syscall.Getpgid(procs[0]); pgid != readPgid(t, job) {
			break
		}
		if time.Now().After(left) {
			t.Fatalf("the grandchild %d stayed in the job's group", procs[0])
		}
		time.Sleep(time.Millisecond)
	}
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))

	if err := Watchdog(root, strings.NewReader(watchdogStop), log); err != nil {
		t.Fatalf("Watchdog after a clean stop: %v", err)
	}
	if hasEnded(jp) || hasEnded(sp) || !processRunning(procs[0]) {
		t.Fatal("the watchdog killed attempts of an agent that stopped cleanly")
	}

	if err := Watchdog(root, strings.NewReader(""), log); err != nil {
		t.Fatalf("Watchdog after the agent died: %v", err)
	}
	await(t, jp)
	deadline := time.Now().Add(30 * time.Second)
	for _, pid := range procs {
		for processRunning(pid) { // the escaped one is reaped by init
			if time.Now().After(deadline) {
				t.Fatalf("process %d of the job still runs after the watchdog", pid)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if hasEnded(sp) {
		t.Fatal("the watchdog killed a service kept for the next agent")
	}
	if !strings.Contains(logged.String(), "escaped_processes=1") {
		t.Errorf("the watchdog logged %q; want one escaped process", logged.String())
	}
}

// processRunning reports whether pid exists and is not a zombie.
func processRunning(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}
