package agent

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/wire"
)

// isAccepted matches the job_accepted of attempt id.
func isAccepted(id string) func(wire.Message) bool {
	return func(m wire.Message) bool {
		a, ok := m.Body.(*wire.JobAccepted)
		return ok && a.AttemptID == id
	}
}

// TestAgentReportsAttemptsItStopsOnShutdown ends Run's context while an
// attempt that traps SIGTERM runs, next to a service kept for the next
// agent. The agent keeps its session while the attempt handles SIGTERM:
// it ships what the attempt prints then, refuses an assignment that comes
// meanwhile without starting it, reports both with cause shutdown (exit
// code 81, no retry spent), and returns once the server has acknowledged
// them, long before its ReportTimeout. The service is neither stopped nor
// reported.
func TestAgentReportsAttemptsItStopsOnShutdown(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t)
	fs.ackResults = true
	a, _ := newAgent(t, fs, func(c *Config) { c.ReportTimeout, c.KeepServices = time.Hour, true })
	r := runUntil(t, a)
	r.awaitRegistered(t, a)
	dir := t.TempDir()
	svcPid, fifo := filepath.Join(dir, "service.pid"), filepath.Join(dir, "go-on")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	fs.assign(&wire.JobAssign{AttemptID: "s1", Service: &wire.Service{},
		Command: []string{"sh", "-c", "echo $$ > " + svcPid + "; echo up; exec sleep 1000"}})
	fs.output("s1", "up")
	svc := pidsIn(t, svcPid)[0]
	t.Cleanup(func() { _ = syscall.Kill(-svc, syscall.SIGKILL) })
	fs.assign(&wire.JobAssign{AttemptID: "a1", Grace: 20 * time.Second, Command: []string{"sh", "-c",
		`trap 'echo got TERM; read x < ` + fifo + `; exit 143' TERM; echo start; sleep 300 & wait`}})
	fs.output("a1", "start")

	r.cancel()
	fs.output("a1", "got TERM") // shipped while the attempt handles SIGTERM
	fs.send(wire.TypeJobAssign, &wire.JobAssign{AttemptID: "a2", JobID: "j-a2", Command: []string{"echo", "started anyway"}})
	checkResult(t, fs.result("a2"), berth.AttemptFailed, berth.CauseShutdown, intp(81), "not started: "+shutdownReason)
	if err := os.WriteFile(fifo, []byte("exit\n"), 0); err != nil { // the attempt may exit now
		t.Fatal(err)
	}
	checkResult(t, fs.result("a1"), berth.AttemptFailed, berth.CauseShutdown, intp(81), shutdownReason)
	if err := r.ended(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if berth.CauseSpendsRetry(berth.CauseShutdown) {
		t.Error("an attempt stopped by its agent's shutdown spends a retry")
	}
	if got := fs.sent(isAccepted("a2")); len(got) != 0 {
		t.Error("the stopping agent accepted an assignment")
	}
	if got := fs.sent(func(m wire.Message) bool { r, ok := m.Body.(*wire.JobResult); return ok && r.AttemptID == "s1" }); len(got) != 0 {
		t.Errorf("the kept service was reported ended: %+v", got[0].Body)
	}
	fs.mu.Lock()
	registers := fs.registers
	fs.mu.Unlock()
	if registers != 1 {
		t.Errorf("the agent registered %d times; want its results on its first session", registers)
	}
	if err := syscall.Kill(svc, 0); err != nil {
		t.Errorf("the service kept for the next agent was stopped: %v", err)
	}
}

// TestAgentShutdownWithoutTheServer ends Run's context while the server
// cannot be reached: the agent still stops its attempt and returns, once
// ReportTimeout has passed without the server's acknowledgement.
func TestAgentShutdownWithoutTheServer(t *testing.T) {
	t.Parallel()
	fs := newFakeServer(t)
	a, _ := newAgent(t, fs, func(c *Config) { c.ReportTimeout = 200 * time.Millisecond })
	r := runUntil(t, a)
	r.awaitRegistered(t, a)
	pidFile := filepath.Join(t.TempDir(), "pid")
	fs.assign(&wire.JobAssign{AttemptID: "a1", Command: []string{"sh", "-c", "echo $$ > " + pidFile + "; echo ready; exec sleep 1000"}})
	fs.output("a1", "ready")
	fs.standBy("") // no leader to reconnect to
	fs.dropSession()

	r.cancel()
	if err := r.ended(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	assertDead(t, pidsIn(t, pidFile)...)
}
