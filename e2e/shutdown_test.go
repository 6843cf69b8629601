package e2e

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth"
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
	if err := cl.c.Logs(context.Background(), id, false, &out); err != nil {
		cl.t.Fatalf("logs of %s: %v", id, err)
	}
	return out.String()
}
