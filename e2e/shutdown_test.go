package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/client"
)

// TestStoppedAgentsJobCompletesElsewhere stops (SIGTERM) the agent of a
// running job that traps SIGTERM. The agent keeps its session while the
// job handles the signal, ships what it prints then and reports its end
// (cause shutdown, exit code 81) before it exits, each acknowledged; the
// job, requeued at once without spending a retry (it has none), runs
// again and succeeds on the other agent, not on the one leaving.
func TestStoppedAgentsJobCompletesElsewhere(t *testing.T) {
	t.Parallel()
	cl := newCluster(t)
	leaving := cl.addAgent("leaving")
	ran := filepath.Join(t.TempDir(), "ran")
	j := cl.submit(shellJob(`if [ -e ` + ran + ` ]; then echo second run; exit 0; fi; touch ` + ran + `; ` +
		`trap 'echo got TERM; exit 143' TERM; echo start; sleep 300 & wait`))[0]
	cl.eventually(time.Minute, "the job's first output", func() bool { return strings.Contains(cl.logs(j.ID), "start") })
	cl.addAgent("staying")

	_ = leaving.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-leaving.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the agent did not exit within 30s of SIGTERM")
	}
	if strings.Contains(leaving.out.String(), "unacknowledged") {
		t.Errorf("the agent stopped before the server acknowledged its results:\n%s", leaving.out)
	}
	d := cl.awaitState(j.ID, time.Minute, berth.JobSucceeded, berth.JobFailed)
	code, _ := berth.CauseExitCode(berth.CauseShutdown)
	if d.State != berth.JobSucceeded || len(d.AttemptList) != 2 {
		t.Fatalf("job %s after %d attempts; want succeeded after 2", d.State, len(d.AttemptList))
	}
	if a := d.AttemptList[0]; a.Host != "leaving" || a.ExitCode == nil || *a.ExitCode != code {
		t.Errorf("first attempt: %s on %s, exit %v (%s); want exit %d on leaving", a.State, a.Host, a.ExitCode, a.Reason, code)
	}
	if a := d.AttemptList[1]; a.Host != "staying" || a.State != berth.AttemptSucceeded {
		t.Errorf("second attempt: %s on %s; want succeeded on staying", a.State, a.Host)
	}
	if out := cl.logs(j.ID); !strings.Contains(out, "start\ngot TERM\n") || !strings.Contains(out, "second run") {
		t.Errorf("the job's output %q lacks what it printed after SIGTERM, or its second run", out)
	}
}

// logs returns the output of job id so far.
func (cl *cluster) logs(id string) string {
	cl.t.Helper()
	var out bytes.Buffer
	if err := cl.c.Logs(context.Background(), id, client.LogOptions{}, &out); err != nil {
		cl.t.Fatalf("logs of %s: %v", id, err)
	}
	return out.String()
}

// TestSecondSignalStopsAnAgentAtOnce stops an agent whose job ignores
// SIGTERM, under a long grace period: the first signal begins the
// graceful stop, and a second one ends the agent at once (the default
// effect of the signal), taking its job with it.
func TestSecondSignalStopsAnAgentAtOnce(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, "--grace", "10m")
	a := cl.addAgent("a")
	j := cl.submit(shellJob(`trap 'echo got TERM' TERM; echo "pid $$"; while :; do sleep 1; done`))[0]
	cl.eventually(time.Minute, "the job's first output", func() bool { return strings.Contains(cl.logs(j.ID), "pid ") })
	var pgid int
	if _, err := fmt.Sscanf(cl.logs(j.ID), "pid %d", &pgid); err != nil {
		t.Fatal(err)
	}

	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	cl.eventually(time.Minute, "the job to get SIGTERM", func() bool { return strings.Contains(cl.logs(j.ID), "got TERM") })
	select {
	case <-a.done:
		t.Fatal("the agent exited before its job, which ignores SIGTERM, ended")
	default:
	}
	_ = a.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-a.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the agent still runs 30s after a second signal")
	}
	if ws, ok := a.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGINT {
		t.Errorf("the agent ended with %v; want killed by SIGINT", a.cmd.ProcessState)
	}
	cl.eventually(10*time.Second, "the job's process group to be gone", func() bool { return !alive(pgid) })
}

// TestKilledAgentsJobDiesWithIt kills (SIGKILL) the agent of a job whose
// shell leaves a child in its process group and a grandchild in a session
// of its own (setsid), as a job's daemon would. The agent's watchdog kills
// all three within the lease, before the server reassigns the attempt, so
// that none of them does the job's work a second time.
func TestKilledAgentsJobDiesWithIt(t *testing.T) {
	t.Parallel()
	const lease = 5 * time.Second
	cl := newCluster(t, "--lease", lease.String(), "--heartbeat", "200ms")
	a := cl.addAgent("doomed")
	pids := filepath.Join(t.TempDir(), "pids")
	j := cl.submit(shellJob(`setsid sleep 300 & escaped=$!; sleep 300 & child=$!; ` +
		`echo "$$ $child $escaped" > ` + pids + `.tmp && mv ` + pids + `.tmp ` + pids + `; wait`))[0]
	var procs [3]int // the shell, its child, its escaped grandchild
	cl.eventually(time.Minute, "the job to write its pids", func() bool {
		data, err := os.ReadFile(pids)
		return err == nil && func() bool {
			_, err := fmt.Sscanf(string(data), "%d %d %d", &procs[0], &procs[1], &procs[2])
			return err == nil
		}()
	})
	// setsid runs in the forked child: await its own session.
	cl.eventually(10*time.Second, "the grandchild in a session of its own", func() bool {
		_, sid, ok := procStat(procs[2])
		return ok && sid == procs[2]
	})
	cl.awaitState(j.ID, time.Minute, berth.JobRunning)

	killed := time.Now()
	_ = a.cmd.Process.Signal(syscall.SIGKILL)
	cl.eventually(lease, "every process of the killed agent's job gone", func() bool {
		return !slices.ContainsFunc(procs[:], running)
	})
	t.Logf("the job's processes were gone %v after the agent was killed", time.Since(killed).Round(time.Millisecond))
	<-a.done // its output ends once the watchdog has exited too
	if _, ok := a.out.await("the agent died: killed its attempts", time.Second); !ok {
		t.Errorf("the watchdog did not say what it killed")
	}
}

// running reports whether process pid exists and is not a zombie.
func running(pid int) bool {
	state, _, ok := procStat(pid)
	return ok && state != "Z" && state != "X"
}

// procStat returns the state and the session of process pid, as
// /proc/PID/stat says, and whether it could read them.
func procStat(pid int) (state string, sid int, ok bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", 0, false
	}
	// pid (comm) state ppid pgrp session ...; comm may hold spaces and parentheses.
	f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
	if len(f) < 4 {
		return "", 0, false
	}
	sid, err = strconv.Atoi(f[3])
	return f[0], sid, err == nil
}
