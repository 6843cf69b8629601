package e2e

import (
	"context"
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

func TestManyJobsAcrossTwoAgents(t *testing.T) {
	t.Parallel()
	cl := newCluster(t)
	cl.addAgent("a1")
	cl.addAgent("a2")
	req := shellJob(`echo "index $BERTH_ARRAY_INDEX gpus=$CUDA_VISIBLE_DEVICES"`)
	req.Array = 500
	jobs := cl.submit(req)
	if len(jobs) != 500 {
		t.Fatalf("submitted %d jobs, want 500", len(jobs))
	}
	res, err := cl.c.Wait(context.Background(), nil, true, 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// --all waits for the jobs still active at the call; the listing below
	// checks that all 500 ended well.
	if !res.Done || res.Total == 0 || res.Counts[berth.JobSucceeded] != res.Total || len(res.Failures) > 0 {
		t.Fatalf("wait: %+v", res)
	}
	for _, j := range []*berth.Job{jobs[0], jobs[249], jobs[499]} {
		d := cl.job(j.ID)
		if d.State != berth.JobSucceeded || len(d.AttemptList) != 1 {
			t.Fatalf("job %s: state %s, %d attempts", j.ID, d.State, len(d.AttemptList))
		}
		var out strings.Builder
		if err := cl.c.Logs(context.Background(), j.ID, client.LogOptions{}, &out); err != nil {
			t.Fatal(err)
		}
		if want := "index " + strconv.Itoa(*j.ArrayIndex) + " gpus=\n"; out.String() != want {
			t.Fatalf("job %s output %q, want %q", j.ID, out.String(), want)
		}
	}
	list, err := cl.c.Jobs(context.Background(), client.ListOptions{States: []berth.JobState{berth.JobSucceeded}})
	if err != nil || len(list.Jobs) != 500 {
		t.Fatalf("succeeded jobs listed: %d (%v)", len(list.Jobs), err)
	}
	ws, err := cl.c.Workers(context.Background())
	if err != nil || len(ws) != 2 {
		t.Fatalf("workers: %v %v", ws, err)
	}
	// Both agents must have taken part: each worker's attempts appear in the job list.
	used := map[string]bool{}
	for _, j := range list.Jobs[:100] {
		d := cl.job(j.ID)
		used[d.AttemptList[0].Host] = true
	}
	if !used["a1"] || !used["a2"] {
		t.Fatalf("work was not spread across both agents: %v", used)
	}
}

func TestGPUsAreGivenToJobs(t *testing.T) {
	t.Parallel()
	cl := newCluster(t)
	cl.addAgent("g1")
	req := shellJob(`echo "$CUDA_VISIBLE_DEVICES"; echo "$BERTH_JOB_NAME $BERTH_USER $BERTH_HOST $BERTH_ATTEMPT"`)
	req.Name, req.Resources.GPUs = "gpu-check", 2
	j := cl.submit(req)[0]
	d := cl.awaitState(j.ID, time.Minute, berth.JobSucceeded)
	var out strings.Builder
	if err := cl.c.Logs(context.Background(), j.ID, client.LogOptions{}, &out); err != nil {
		t.Fatal(err)
	}
	if out.String() != "0,1\ngpu-check local g1 1\n" || len(d.AttemptList[0].GPUs) != 2 {
		t.Fatalf("the job printed %q (CUDA_VISIBLE_DEVICES, then name, user, host, attempt), attempt GPUs %v",
			out.String(), d.AttemptList[0].GPUs)
	}
	// Three GPUs never fit on a two-GPU worker: held, the job waits and
	// says why.
	req.Resources.GPUs, req.HoldUntilFits = 3, true
	j = cl.submit(req)[0]
	d = cl.job(j.ID)
	if d.State != berth.JobPending || !strings.Contains(d.Reason, "no worker has 3 GPUs") {
		t.Fatalf("job needing 3 GPUs: state %s reason %q", d.State, d.Reason)
	}
	// The listing says so too, as squeue's REASON column does.
	list, err := cl.c.Jobs(context.Background(), client.ListOptions{States: []berth.JobState{berth.JobPending}})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Jobs) != 1 || list.Jobs[0].ID != j.ID || list.Jobs[0].Reason != d.Reason {
		t.Fatalf("pending listing = %+v, want job %s with reason %q", list.Jobs, j.ID, d.Reason)
	}
}

func TestCancelKillsTheWholeProcessGroup(t *testing.T) {
	t.Parallel()
	cl := newCluster(t)
	cl.addAgent("c1")
	pidFile := filepath.Join(t.TempDir(), "pid")
	req := shellJob(`sleep 1000 & sleep 1000 & echo $$ > ` + pidFile + `.tmp && mv ` + pidFile + `.tmp ` + pidFile + `; wait`)
	j := cl.submit(req)[0]
	var pgid int
	cl.eventually(time.Minute, "the job to write its pid", func() bool {
		data, err := os.ReadFile(pidFile)
		if err != nil {
			return false
		}
		pgid, err = strconv.Atoi(strings.TrimSpace(string(data)))
		return err == nil
	})
	if !alive(pgid) {
		t.Fatalf("process group %d not running", pgid)
	}
	if _, err := cl.c.Cancel(context.Background(), j.ID); err != nil {
		t.Fatal(err)
	}
	d := cl.awaitState(j.ID, time.Minute, berth.JobCancelled)
	if d.AttemptList[0].State != berth.AttemptCancelled {
		t.Fatalf("attempt state %s", d.AttemptList[0].State)
	}
	// The job and its attempt name the same canceller: "local", a client
	// on loopback without a token.
	if want := "cancelled by local"; d.Reason != want || d.AttemptList[0].Reason != want {
		t.Errorf("reasons: job %q, attempt %q; want both %q", d.Reason, d.AttemptList[0].Reason, want)
	}
	cl.eventually(10*time.Second, "the process group to be gone", func() bool { return !alive(pgid) })
	// Cancelling a finished job is a conflict and changes nothing.
	if _, err := cl.c.Cancel(context.Background(), j.ID); berth.ErrorCode(err) != berth.ECodeConflict {
		t.Fatalf("second cancel: %v, want conflict", err)
	}
}

func TestLostAgentsAttemptCompletesElsewhere(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, "--lease", "2s", "--heartbeat", "200ms")
	first := cl.addAgent("doomed")
	marker := filepath.Join(t.TempDir(), "started")
	req := shellJob(`echo "$BERTH_ATTEMPT_ID" >> ` + marker + `; exec sleep 3`)
	req.Retries = 1
	j := cl.submit(req)[0]
	cl.awaitState(j.ID, time.Minute, berth.JobRunning)
	cl.addAgent("survivor")
	first.kill()
	d := cl.awaitState(j.ID, 2*time.Minute, berth.JobSucceeded, berth.JobFailed)
	if d.State != berth.JobSucceeded || len(d.AttemptList) != 2 {
		t.Fatalf("state %s with %d attempts; want succeeded after 2", d.State, len(d.AttemptList))
	}
	a0, a1 := d.AttemptList[0], d.AttemptList[1]
	if a0.Host != "doomed" || a0.State != berth.AttemptLost || a1.Host != "survivor" || a1.State != berth.AttemptSucceeded {
		t.Fatalf("attempts: %s on %s, %s on %s", a0.State, a0.Host, a1.State, a1.Host)
	}
}

// TestFailedJobIsRetriedAfterADelay runs a job that fails at once with two
// retries: each retry waits out a doubling delay (1 s, then 2 s) instead of
// looping, and goes to a worker where the job has not failed yet, though
// best fit prefers the other (it has fewer GPUs free), until it has failed
// on both. The job ends failed with the last attempt's exit code.
func TestFailedJobIsRetriedAfterADelay(t *testing.T) {
	t.Parallel()
	cl := newCluster(t)
	cl.addAgent("tight", "--gpus", "1xT4:16GiB")
	cl.addAgent("roomy")
	req := shellJob(`exit 4`)
	req.Resources.GPUs = 1
	req.Retries = 2
	j := cl.submit(req)[0]
	d := cl.awaitState(j.ID, time.Minute, berth.JobFailed, berth.JobSucceeded)
	if d.State != berth.JobFailed || len(d.AttemptList) != 3 || d.ExitCode == nil || *d.ExitCode != 4 {
		t.Fatalf("state %s, exit %v, %d attempts; want failed with exit code 4 after 3", d.State, d.ExitCode, len(d.AttemptList))
	}
	var hosts []string
	for _, a := range d.AttemptList {
		hosts = append(hosts, a.Host)
	}
	if want := []string{"tight", "roomy", "tight"}; !slices.Equal(hosts, want) {
		t.Errorf("attempts ran on %v; want %v", hosts, want)
	}
	for i, least := range []time.Duration{time.Second, 2 * time.Second} {
		prev, next := d.AttemptList[i], d.AttemptList[i+1]
		if waited := next.CreatedAt.Sub(prev.FinishedAt); waited < least {
			t.Errorf("attempt %d began %v after attempt %d ended; want at least %v", i+2, waited, i+1, least)
		}
	}
}

// TestCommandNotFoundIsReportedLikeAShell runs a job whose command does
// not exist: it fails with a shell's exit code 127, and its output says
// why, as Slurm's output file does.
func TestCommandNotFoundIsReportedLikeAShell(t *testing.T) {
	t.Parallel()
	cl := newCluster(t)
	cl.addAgent("w1")
	req := &berth.SubmitRequest{JobSpec: berth.DefaultJobSpec()}
	req.Command = berth.Argv{"berth-no-such-command", "--flag"}
	j := cl.submit(req)[0]
	d := cl.awaitState(j.ID, time.Minute, berth.JobFailed, berth.JobSucceeded)
	if d.State != berth.JobFailed || d.ExitCode == nil || *d.ExitCode != 127 {
		t.Fatalf("state %s, exit code %v; want failed with 127", d.State, d.ExitCode)
	}
	var out strings.Builder
	if err := cl.c.Logs(context.Background(), j.ID, client.LogOptions{}, &out); err != nil {
		t.Fatal(err)
	}
	if want := "berth: cannot start: exec: \"berth-no-such-command\": executable file not found in $PATH\n"; out.String() != want {
		t.Fatalf("logs = %q, want %q", out.String(), want)
	}
}

func TestServerKilledMidRunLosesNothing(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, "--lease", "20s")
	cl.addAgent("k1")
	cl.addAgent("k2")
	ledger := filepath.Join(t.TempDir(), "ledger")
	req := shellJob(`echo "$BERTH_JOB_ID" >> ` + ledger)
	req.Array = 2000
	jobs := cl.submit(req) // acknowledged: all 2000 must run exactly once
	cl.eventually(time.Minute, "some jobs to have run", func() bool {
		data, _ := os.ReadFile(ledger)
		return strings.Count(string(data), "\n") >= 300
	})
	cl.server.kill()
	cl.startServer()
	res, err := cl.c.Wait(context.Background(), nil, true, 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Done {
		t.Fatalf("jobs still active after restart: %+v", res)
	}
	data, err := os.ReadFile(ledger)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, id := range strings.Fields(string(data)) {
		seen[id]++
	}
	for _, j := range jobs {
		if seen[j.ID] != 1 {
			t.Errorf("job %s ran %d times", j.ID, seen[j.ID])
		}
	}
	if len(seen) != len(jobs) {
		t.Errorf("ledger has %d distinct ids, want %d", len(seen), len(jobs))
	}
	list, err := cl.c.Jobs(context.Background(), client.ListOptions{States: []berth.JobState{berth.JobSucceeded}})
	if err != nil || len(list.Jobs) != 2000 {
		t.Fatalf("succeeded jobs: %d (%v)", len(list.Jobs), err)
	}
}

func TestAgentCutOffPastLeaseKillsItsAttempt(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, "--lease", "1s", "--heartbeat", "200ms")
	cl.addAgent("isolated")
	pidFile := filepath.Join(t.TempDir(), "pid")
	j := cl.submit(shellJob(`echo $$ > ` + pidFile + `.tmp && mv ` + pidFile + `.tmp ` + pidFile + `; exec sleep 1000`))[0]
	var pid int
	cl.eventually(time.Minute, "the job to start", func() bool {
		data, err := os.ReadFile(pidFile)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(data)))
		return err == nil
	})
	// Freeze the server: the agent hears nothing and must fence itself.
	if err := cl.server.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	cl.eventually(30*time.Second, "the agent to kill its attempt", func() bool { return syscall.Kill(pid, 0) != nil })
	if err := cl.server.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	d := cl.awaitState(j.ID, time.Minute, berth.JobFailed, berth.JobSucceeded, berth.JobCancelled)
	if d.State != berth.JobFailed {
		t.Fatalf("job state %s, want failed (its only attempt was fenced)", d.State)
	}
}
