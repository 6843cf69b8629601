package e2e

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
)

// control turns a queue of host on or off through the client, as berth
// worker on|off does.
func (cl *cluster) control(host, queue, desired, policy string) *berth.ControlResponse {
	cl.t.Helper()
	resp, err := cl.c.SetWorkerControl(context.Background(), host,
		berth.ControlRequest{Queue: queue, DesiredState: desired, StopPolicy: policy, RequestedBy: "ops"})
	if err != nil {
		cl.t.Fatalf("worker %s %s: %v", desired, host, err)
	}
	return resp
}

// readPID waits for a job to write its process id to path and returns it.
func (cl *cluster) readPID(path string) int {
	cl.t.Helper()
	var pid int
	cl.eventually(30*time.Second, "pid file "+path, func() bool {
		data, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(data)))
		return err == nil
	})
	return pid
}

// TestHardStopRequeuesElsewhere turns a busy worker off with the hard
// policy: the job's whole process tree (it ignores SIGTERM) is killed within
// the grace period, the job reruns on the other worker and succeeds without
// spending a retry, and the stop is in the job's history and the events.
func TestHardStopRequeuesElsewhere(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, "--grace", "1s")
	cl.addAgent("spark")
	dir := t.TempDir()
	// First run: record the group, ignore SIGTERM, hold a grandchild. Second: succeed.
	req := shellJob(`if [ -e ` + dir + `/ran ]; then echo rerun on $(hostname); exit 0; fi; touch ` + dir + `/ran; ` +
		`trap '' TERM; sh -c 'trap "" TERM; sleep 1000' & echo $$ > ` + dir + `/pid.tmp; mv ` + dir + `/pid.tmp ` + dir + `/pid; wait; wait`)
	req.Retries = 0
	j := cl.submit(req)[0]
	pgid := cl.readPID(dir + "/pid")
	cl.awaitState(j.ID, 30*time.Second, berth.JobRunning)

	stopped := time.Now()
	resp := cl.control("spark", "", berth.DesiredOff, berth.StopHard)
	if len(resp.Stopping) != 1 || len(resp.Controls) != 1 || !resp.Controls[0].Off() || resp.Controls[0].Queue != berth.AllQueues {
		t.Fatalf("control response = %+v, want one attempt stopping under an off control for every queue", resp)
	}
	cl.eventually(10*time.Second, "the job's process group to die", func() bool { return !alive(pgid) })
	if took := time.Since(stopped); took > 5*time.Second {
		t.Fatalf("process tree died %s after the hard stop; grace is 1s", took)
	}
	cl.awaitWorker("spark", berth.WorkerParked)

	cl.addAgent("other")
	d := cl.awaitState(j.ID, time.Minute, berth.JobSucceeded, berth.JobFailed)
	if d.State != berth.JobSucceeded || d.Attempts != 1 || len(d.AttemptList) != 2 {
		t.Fatalf("job %s after %d attempts (%d listed), want succeeded with its retry count 1 and 2 attempts listed",
			d.State, d.Attempts, len(d.AttemptList))
	}
	first, second := d.AttemptList[0], d.AttemptList[1]
	if first.State != berth.AttemptStopped || first.ExitCode == nil || *first.ExitCode != 79 ||
		!strings.Contains(first.Reason, "stopped by operator") || !strings.Contains(first.Reason, "by ops") {
		t.Fatalf("first attempt: %s exit %v %q, want stopped, exit 79, stopped by operator ops", first.State, first.ExitCode, first.Reason)
	}
	if !strings.Contains(first.Reason, "processes gone") {
		t.Fatalf("first attempt's reason %q does not confirm the processes are gone", first.Reason)
	}
	if second.Host != "other" || second.State != berth.AttemptSucceeded {
		t.Fatalf("second attempt on %s %s, want succeeded on other", second.Host, second.State)
	}
	// The control's actor is who made the request (a loopback client, as
	// the server trusts loopback); the requeue's is the control's
	// requested_by.
	cl.awaitEvent(10*time.Second, "worker.control", func(e map[string]any) bool {
		return e["type"] == "worker.control" && e["host"] == "spark" && e["desired"] == "off" && e["actor"] == "local" &&
			e["policy"] == "hard" && len(anyList(e["attempts"])) == 1 && anyList(e["attempts"])[0] == first.ID
	})
	cl.awaitEvent(10*time.Second, "job.requeued after the stop", func(e map[string]any) bool {
		return e["type"] == "job.requeued" && e["job_id"] == j.ID && e["actor"] == "ops" &&
			len(anyList(e["attempts"])) == 1 && anyList(e["attempts"])[0] == first.ID
	})
}

// awaitSuccess waits for a job to end and fails the test unless it
// succeeded.
func (cl *cluster) awaitSuccess(id, what string) {
	cl.t.Helper()
	if d := cl.awaitState(id, 30*time.Second, berth.JobSucceeded, berth.JobFailed); d.State != berth.JobSucceeded {
		cl.t.Fatalf("%s: job %s %s (%s), want succeeded", what, id, d.State, d.Reason)
	}
}

func anyList(v any) []any {
	l, _ := v.([]any)
	return l
}

// TestDrainFinishesRunningTakesNothingNew drains a worker: the running job
// finishes, a new one waits with reason off, the worker parks, and turning
// it on runs the new job on the same agent process, without a restart.
func TestDrainFinishesRunningTakesNothingNew(t *testing.T) {
	t.Parallel()
	cl := newCluster(t)
	agent := cl.addAgent("d1")
	dir := t.TempDir()
	running := cl.submit(shellJob(`while [ ! -e ` + dir + `/go ]; do sleep 0.05; done; echo finished`))[0]
	cl.awaitState(running.ID, 30*time.Second, berth.JobRunning)

	if resp := cl.control("d1", "", berth.DesiredOff, berth.StopDrain); len(resp.Stopping) != 0 {
		t.Fatalf("drain stopping %v, want nothing stopped", resp.Stopping)
	}
	cl.awaitWorker("d1", berth.WorkerDraining)
	waiting := cl.submit(shellJob(`echo second`))[0]
	if d := cl.job(waiting.ID); d.State != berth.JobPending || !strings.Contains(d.Reason, "off") {
		t.Fatalf("new job while draining: %s %q, want pending because the worker is off", d.State, d.Reason)
	}
	if err := os.WriteFile(dir+"/go", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cl.awaitSuccess(running.ID, "running job under drain")
	cl.awaitWorker("d1", berth.WorkerParked)
	if d := cl.job(waiting.ID); d.State != berth.JobPending {
		t.Fatalf("parked worker took job %s: %s", waiting.ID, d.State)
	}

	cl.control("d1", "", berth.DesiredOn, "")
	cl.awaitSuccess(waiting.ID, "job after on")
	if n := strings.Count(agent.out.String(), "registered"); n != 1 {
		t.Fatalf("agent registered %d times; on must resume it in place", n)
	}
	select {
	case <-agent.done:
		t.Fatal("agent exited")
	default:
	}
}

// TestPauseKeepsServiceRunning pauses a worker running a service: the
// service keeps running, new work waits, and on resumes.
func TestPauseKeepsServiceRunning(t *testing.T) {
	t.Parallel()
	cl := newCluster(t)
	agent := cl.addAgent("p1")
	dir := t.TempDir()
	svc := shellJob(`echo $$ > ` + dir + `/pid.tmp; mv ` + dir + `/pid.tmp ` + dir + `/pid; while [ ! -e ` + dir + `/stop ]; do sleep 0.05; done`)
	svc.Kind = berth.KindService
	s := cl.submit(svc)[0]
	pid := cl.readPID(dir + "/pid")
	cl.awaitState(s.ID, 30*time.Second, berth.JobRunning)

	cl.control("p1", "", berth.DesiredOff, berth.StopPause)
	cl.awaitWorker("p1", berth.WorkerParked)
	if _, ok := agent.out.await("parked", 30*time.Second); !ok {
		t.Fatal("agent did not log that it is parked")
	}
	batch := cl.submit(shellJob(`echo batch`))[0]
	if d := cl.job(batch.ID); d.State != berth.JobPending {
		t.Fatalf("paused worker took a new job: %s", d.State)
	}
	if d := cl.job(s.ID); d.State != berth.JobRunning || !alive(pid) {
		t.Fatalf("service under pause: %s, process alive %v; want running", d.State, alive(pid))
	}

	cl.control("p1", "", berth.DesiredOn, "")
	cl.awaitSuccess(batch.ID, "job after resume")
	if d := cl.job(s.ID); d.State != berth.JobRunning || !alive(pid) {
		t.Fatalf("service after resume: %s", d.State)
	}
	if _, err := cl.c.Cancel(context.Background(), s.ID); err != nil { // a service runs until stopped
		t.Fatal(err)
	}
	cl.awaitState(s.ID, 30*time.Second, berth.JobCancelled)
}

// TestOffSurvivesRestarts keeps a host off across a server restart and an
// agent restart (the agent comes up parked); on then runs the waiting job.
func TestOffSurvivesRestarts(t *testing.T) {
	t.Parallel()
	cl := newCluster(t)
	cl.addAgent("r1")
	cl.control("r1", "", berth.DesiredOff, berth.StopDrain)
	cl.awaitWorker("r1", berth.WorkerParked)
	j := cl.submit(shellJob(`echo hello`))[0]

	cl.server.stop()
	cl.startServer()
	cl.awaitWorker("r1", berth.WorkerParked)

	cl.agents["r1"].stop()
	cl.awaitWorker("r1", berth.WorkerDisconnected)
	agent := start(t, "agent r1 again", "agent", "--server", cl.url, "--host", "r1", "--gpus", "2xT4:16GiB",
		"--data-dir", filepath.Join(cl.dir, "agent-r1"))
	if _, ok := agent.out.await("parked", 30*time.Second); !ok {
		t.Fatal("restarted agent did not come up parked")
	}
	cl.awaitWorker("r1", berth.WorkerParked)
	if d := cl.job(j.ID); d.State != berth.JobPending || !strings.Contains(d.Reason, "off") {
		t.Fatalf("job on an off host: %s %q, want pending, off", d.State, d.Reason)
	}
	ctls, err := cl.c.WorkerControls(context.Background(), "r1")
	if err != nil || len(ctls) != 1 || !ctls[0].Off() || ctls[0].StopPolicy != berth.StopDrain || ctls[0].RequestedBy != "ops" {
		t.Fatalf("controls after restarts = %+v, %v; want r1/* off (drain) by ops", ctls, err)
	}

	cl.control("r1", "", berth.DesiredOn, "")
	cl.awaitSuccess(j.ID, "job after on")
}

// TestPerQueueControl turns off one queue of a host serving two: the other
// queue keeps running jobs there.
func TestPerQueueControl(t *testing.T) {
	t.Parallel()
	cl := newCluster(t)
	cl.addAgent("q1", "--queues", "gpu,cpu")
	cl.control("q1", "gpu", berth.DesiredOff, berth.StopHard)
	cl.awaitWorker("q1", berth.WorkerReady)

	gpuJob, cpuJob := shellJob(`echo gpu`), shellJob(`echo cpu`)
	gpuJob.Queue, cpuJob.Queue = "gpu", "cpu"
	g := cl.submit(gpuJob)[0]
	c := cl.submit(cpuJob)[0]
	cl.awaitSuccess(c.ID, "cpu job")
	if d := cl.job(g.ID); d.State != berth.JobPending || !strings.Contains(d.Reason, "off") {
		t.Fatalf("gpu job with queue gpu off: %s %q, want pending, off", d.State, d.Reason)
	}
	ws, err := cl.c.Workers(context.Background())
	if err != nil || len(ws) != 1 || len(ws[0].Controls) != 1 || ws[0].Controls[0].Queue != "gpu" {
		t.Fatalf("workers = %+v, %v; want q1 with the gpu control", ws, err)
	}
	cl.control("q1", "gpu", berth.DesiredOn, "")
	cl.awaitSuccess(g.ID, "gpu job after on")
}

// TestWatchdogs runs jobs that stall or exceed their budget, and one that
// stays quiet but reports progress: each ends with its own reason and exit
// code.
func TestWatchdogs(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, "--grace", "500ms")
	cl.addAgent("wd")
	stall := shellJob(`echo started; sleep 1000`)
	stall.StallTimeout = berth.Duration(time.Second)
	budget := shellJob(`while true; do echo tick; sleep 0.1; done`)
	budget.MaxRuntime = berth.Duration(time.Second)
	progress := shellJob(`for i in 1 2 3 4 5 6; do sleep 0.4; echo "BERTH_PROGRESS 0.$i" >&2; done; ` +
		`curl -fsS -d done "$BERTH_PROGRESS_URL" 2>/dev/null || true`)
	progress.StallTimeout = berth.Duration(time.Second)
	s := cl.submit(stall)[0]
	b := cl.submit(budget)[0]
	p := cl.submit(progress)[0]

	for _, c := range []struct {
		id, reason string
		code       int
	}{{s.ID, "stall", 76}, {b.ID, "max_runtime", 75}} {
		d := cl.awaitState(c.id, 30*time.Second, berth.JobSucceeded, berth.JobFailed)
		if d.State != berth.JobFailed || d.ExitCode == nil || *d.ExitCode != c.code || !strings.Contains(d.Reason, c.reason) {
			t.Errorf("job %s: %s exit %v %q, want failed with exit %d and reason %s", c.id, d.State, d.ExitCode, d.Reason, c.code, c.reason)
		}
	}
	d := cl.awaitState(p.ID, 30*time.Second, berth.JobSucceeded, berth.JobFailed)
	if d.State != berth.JobSucceeded {
		t.Fatalf("quiet job reporting progress: %s %q, want succeeded", d.State, d.Reason)
	}
	if got := d.AttemptList[0].Progress; got != "0.6" && got != "done" {
		t.Fatalf("progress = %q, want the last report", got)
	}
}

// TestControlBadInput sends malformed controls: each is a 400 naming the
// field, and nothing changes.
func TestControlBadInput(t *testing.T) {
	t.Parallel()
	cl := newCluster(t)
	cl.addAgent("b1")
	for _, c := range []struct {
		host  string
		req   berth.ControlRequest
		field string
	}{
		{"b1", berth.ControlRequest{DesiredState: "off", StopPolicy: "gentle"}, "stop_policy"},
		{"b1", berth.ControlRequest{DesiredState: "sideways"}, "desired_state"},
		{"b1", berth.ControlRequest{DesiredState: "off", Queue: "GPU!"}, "queue"},
		{"-bad host-", berth.ControlRequest{DesiredState: "off"}, "host"},
	} {
		_, err := cl.c.SetWorkerControl(context.Background(), c.host, c.req)
		var e *berth.Error
		if !errors.As(err, &e) || e.Code != berth.ECodeInvalid || e.Field != c.field {
			t.Errorf("%+v on %q: err %v, want invalid %s", c.req, c.host, err, c.field)
		}
	}
	ctls, err := cl.c.WorkerControls(context.Background(), "b1")
	if err != nil || len(ctls) != 0 {
		t.Fatalf("controls after bad input = %+v, %v; want none", ctls, err)
	}
	cl.awaitSuccess(cl.submit(shellJob(`echo ok`))[0].ID, "worker after bad input")
}
