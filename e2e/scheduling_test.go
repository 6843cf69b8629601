package e2e

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
)

// TestGangRendezvousAndDiesTogether runs 2-node gangs across two real
// agents: every member sees the same coordinator and its own rank, and when
// one member exits non-zero the other is killed and the gang fails as one.
func TestGangRendezvousAndDiesTogether(t *testing.T) {
	t.Parallel()
	cl := newCluster(t)
	cl.addAgent("n1")
	cl.addAgent("n2")
	dir := t.TempDir()
	req := shellJob(`echo "$BERTH_NODE_RANK $BERTH_NNODES $BERTH_COORDINATOR $MASTER_ADDR $MASTER_PORT $WORLD_SIZE $RANK $NODE_RANK $CUDA_VISIBLE_DEVICES $BERTH_GPUS_PER_NODE $LOCAL_WORLD_SIZE" > ` +
		dir + `/env.$BERTH_NODE_RANK`)
	req.Nodes = 2
	req.Resources.GPUs = 2
	req.Env = map[string]string{"LOCAL_WORLD_SIZE": "1"} // the job's own value wins
	j := cl.submit(req)[0]
	d := cl.awaitState(j.ID, time.Minute, berth.JobSucceeded, berth.JobFailed)
	if d.State != berth.JobSucceeded || len(d.AttemptList) != 2 {
		t.Fatalf("gang: state %s with %d attempts, want succeeded with 2", d.State, len(d.AttemptList))
	}
	hosts := map[int]string{}
	for _, a := range d.AttemptList {
		hosts[a.TaskIndex] = a.Host
	}
	if len(hosts) != 2 || hosts[0] == hosts[1] {
		t.Fatalf("members ran on %v, want ranks 0 and 1 on different hosts", hosts)
	}
	var lines []string
	for rank := range 2 {
		data, err := os.ReadFile(filepath.Join(dir, "env."+strconv.Itoa(rank)))
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, strings.TrimSpace(string(data)))
	}
	f0, f1 := strings.Fields(lines[0]), strings.Fields(lines[1])
	port := f0[4]
	// Rank 0's address is the one its agent advertises: by default the
	// address it reaches the server from, loopback here; not its host label.
	want0 := []string{"0", "2", "127.0.0.1:" + port, "127.0.0.1", port, "2", "0", "0", "0,1", "2", "1"}
	want1 := []string{"1", "2", "127.0.0.1:" + port, "127.0.0.1", port, "2", "1", "1", "0,1", "2", "1"}
	if strings.Join(f0, " ") != strings.Join(want0, " ") || strings.Join(f1, " ") != strings.Join(want1, " ") {
		t.Fatalf("rendezvous environment:\n rank 0: %s\n rank 1: %s\nwant\n %s\n %s", lines[0], lines[1], want0, want1)
	}

	// Rank 1 fails once rank 0 is up; rank 0's whole process group dies too.
	req = shellJob(`if [ "$BERTH_NODE_RANK" = 0 ]; then echo $$ > ` + dir + `/pid.tmp && mv ` + dir + `/pid.tmp ` + dir +
		`/pid; sleep 1000 & wait; else while [ ! -e ` + dir + `/pid ]; do sleep 0.05; done; exit 3; fi`)
	req.Nodes = 2
	req.Resources.GPUs = 1
	j = cl.submit(req)[0]
	d = cl.awaitState(j.ID, time.Minute, berth.JobFailed, berth.JobSucceeded)
	if d.State != berth.JobFailed || d.ExitCode == nil || *d.ExitCode != 3 {
		t.Fatalf("gang with a failing member: state %s exit %v reason %q", d.State, d.ExitCode, d.Reason)
	}
	states := map[int]berth.AttemptState{}
	for _, a := range d.AttemptList {
		states[a.TaskIndex] = a.State
	}
	if states[0] != berth.AttemptCancelled || states[1] != berth.AttemptFailed {
		t.Fatalf("member states %v, want rank 0 cancelled and rank 1 failed", states)
	}
	data, err := os.ReadFile(filepath.Join(dir, "pid"))
	if err != nil {
		t.Fatal(err)
	}
	pgid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	cl.eventually(10*time.Second, "rank 0's process group to be gone", func() bool { return !alive(pgid) })
}

// TestPreemptedJobIsRequeuedAndCompletes fills the only worker with a
// preemptible job, then submits a more urgent one: the first is stopped,
// the urgent one runs, and the first is requeued without spending a retry
// and completes.
func TestPreemptedJobIsRequeuedAndCompletes(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, "--preempt-min-runtime", "0s")
	cl.addAgent("p1")
	dir := t.TempDir()
	low := shellJob(`if [ -e ` + dir + `/second ]; then exit 0; fi; touch ` + dir + `/second; sleep 1000 & wait`)
	low.Resources.GPUs = 2
	low.Priority = 10
	low.Preemptible = true
	lj := cl.submit(low)[0]
	cl.awaitState(lj.ID, time.Minute, berth.JobRunning)
	urgent := shellJob(`echo urgent`)
	urgent.Resources.GPUs = 2
	urgent.Priority = 900
	uj := cl.submit(urgent)[0]
	if d := cl.awaitState(uj.ID, time.Minute, berth.JobSucceeded, berth.JobFailed); d.State != berth.JobSucceeded {
		t.Fatalf("urgent job %s: %q", d.State, d.Reason)
	}
	d := cl.awaitState(lj.ID, time.Minute, berth.JobSucceeded, berth.JobFailed)
	if d.State != berth.JobSucceeded || len(d.AttemptList) != 2 {
		t.Fatalf("preempted job: state %s with %d attempts (%q)", d.State, len(d.AttemptList), d.Reason)
	}
	sort.Slice(d.AttemptList, func(i, k int) bool { return d.AttemptList[i].ID < d.AttemptList[k].ID })
	first := d.AttemptList[0]
	if first.State != berth.AttemptPreempted || !strings.Contains(first.Reason, uj.ID) {
		t.Fatalf("first attempt %s (%q), want preempted by %s", first.State, first.Reason, uj.ID)
	}
	if d.Attempts != 1 {
		t.Fatalf("job counts %d attempts against its retries, want 1 (preemption spends none)", d.Attempts)
	}
	cl.awaitEvent(10*time.Second, "job.preempted", func(e map[string]any) bool {
		return e["type"] == "job.preempted" && e["job_id"] == lj.ID
	})
}

// TestQuotaHoldsJobsBack caps alice at one GPU: her second job waits with
// the quota as its reason and a quota.exceeded event, and runs once the
// rule is removed.
func TestQuotaHoldsJobsBack(t *testing.T) {
	t.Parallel()
	cl := newCluster(t)
	cl.addAgent("q1")
	ctx := context.Background()
	rule, err := berth.ParseQuotaRule("user:alice", []string{"gpus<=1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := cl.c.SetQuota(ctx, rule); err != nil {
		t.Fatal(err)
	}
	release := filepath.Join(t.TempDir(), "release")
	req := shellJob(`while [ ! -e ` + release + ` ]; do sleep 0.05; done`)
	req.User = "alice"
	req.Resources.GPUs = 1
	first := cl.submit(req)[0]
	cl.awaitState(first.ID, time.Minute, berth.JobRunning)
	second := cl.submit(req)[0]
	e := cl.awaitEvent(30*time.Second, "quota.exceeded", func(e map[string]any) bool {
		return e["type"] == "quota.exceeded" && e["job_id"] == second.ID
	})
	if e["user"] != "alice" || e["quota"] != "user:alice" || e["requested"] != 1.0 || e["limit"] != 1.0 {
		t.Fatalf("quota.exceeded event %v, want user alice, rule user:alice, requested 1, limit 1", e)
	}
	d := cl.job(second.ID)
	if d.State != berth.JobPending || !strings.Contains(d.Reason, "over quota user:alice") {
		t.Fatalf("second job: %s %q, want pending over quota", d.State, d.Reason)
	}
	if err := cl.c.DeleteQuota(ctx, "user:alice"); err != nil {
		t.Fatal(err)
	}
	cl.awaitState(second.ID, time.Minute, berth.JobRunning)
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cl.awaitState(second.ID, time.Minute, berth.JobSucceeded)
}

// TestServiceReplicasRunOnDifferentHosts submits two replicas of one
// service to two agents with room for both on either: they run on
// different hosts.
func TestServiceReplicasRunOnDifferentHosts(t *testing.T) {
	t.Parallel()
	cl := newCluster(t)
	cl.addAgent("s1")
	cl.addAgent("s2")
	dir := t.TempDir()
	req := shellJob(`while [ ! -e ` + dir + `/stop ]; do sleep 0.05; done`)
	req.Kind, req.Name, req.Array = berth.KindService, "chat", 2
	req.Resources.GPUs = 1
	jobs := cl.submit(req)
	hosts := map[string]bool{}
	for _, j := range jobs {
		d := cl.awaitState(j.ID, 30*time.Second, berth.JobRunning)
		hosts[d.AttemptList[0].Host] = true
	}
	if len(hosts) != 2 {
		t.Fatalf("replicas ran on %v, want two hosts", hosts)
	}
	for _, j := range jobs { // services run until stopped
		if _, err := cl.c.Cancel(context.Background(), j.ID); err != nil {
			t.Fatal(err)
		}
		cl.awaitState(j.ID, 30*time.Second, berth.JobCancelled)
	}
}

// TestPrewarmHintWarmsAnIdleWorker places a job for a model no worker has
// warm: the idle agent is hinted, runs its prewarm command with the model,
// and reports the model warm.
func TestPrewarmHintWarmsAnIdleWorker(t *testing.T) {
	t.Parallel()
	cl := newCluster(t)
	dir := t.TempDir()
	for _, host := range []string{"w1", "w2"} {
		cl.addAgent(host, "--prewarm", "echo {model} >> "+dir+"/prewarmed-"+host)
	}
	req := shellJob(`while [ ! -e ` + dir + `/stop ]; do sleep 0.05; done`)
	req.Model = "llama-8b"
	j := cl.submit(req)[0]
	ran := cl.awaitState(j.ID, 30*time.Second, berth.JobRunning).AttemptList[0].Host
	idle := map[string]string{"w1": "w2", "w2": "w1"}[ran]
	cl.eventually(30*time.Second, "the idle worker to report llama-8b warm", func() bool {
		ws, err := cl.c.Workers(context.Background())
		if err != nil {
			return false
		}
		for _, w := range ws {
			if w.Host == idle && slices.Contains(w.Models, "llama-8b") {
				return true
			}
		}
		return false
	})
	if data, err := os.ReadFile(dir + "/prewarmed-" + idle); err != nil || strings.TrimSpace(string(data)) != "llama-8b" {
		t.Fatalf("prewarm command on %s: %q, %v; want it run once with llama-8b", idle, data, err)
	}
	if _, err := os.Stat(dir + "/prewarmed-" + ran); err == nil {
		t.Fatalf("the busy worker %s was hinted too", ran)
	}
	if err := os.WriteFile(dir+"/stop", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cl.awaitSuccess(j.ID, "the model's job")
}
