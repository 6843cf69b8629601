package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
)

// isolatedAgent adds an agent and skips the test unless it runs each
// attempt in a cgroup (root, and cgroup controllers it may use): where it
// cannot, it says so at start and jobs run unconfined, by design. The
// worker shows the agent's mode, as the agent logged it.
func (cl *cluster) isolatedAgent(host string, extra ...string) *proc {
	cl.t.Helper()
	p := cl.addAgent(host, extra...)
	ws, err := cl.c.Workers(context.Background())
	if err != nil {
		cl.t.Fatal(err)
	}
	i := slices.IndexFunc(ws, func(w *berth.Worker) bool { return w.Host == host })
	if i < 0 {
		cl.t.Fatalf("worker %s is not listed", host)
	}
	if _, ok := p.out.await("isolation="+ws[i].Isolation, 30*time.Second); !ok { // logged before it registered, read from its pipe since
		cl.t.Fatalf("worker %s has isolation %q; its agent logged:\n%s", host, ws[i].Isolation, p.out)
	}
	if ws[i].Isolation == berth.IsolationNone {
		cl.t.Skipf("the agent has no cgroups on this machine:\n%s", p.out)
	}
	return p
}

// TestAttemptOverItsMemoryIsOOM runs a job that allocates far past its
// memory limit: the kernel kills it in its cgroup, and it ends with cause
// oom — exit code 82, failure class oom, a reason naming the limit — in
// the API, the job.failed event and berth job, not as a plain failure.
func TestAttemptOverItsMemoryIsOOM(t *testing.T) {
	t.Parallel()
	cl := newCluster(t)
	cl.isolatedAgent("box")
	req := shellJob(`x=$(head -c 400000000 /dev/zero | tr '\0' a); echo survived`)
	req.Resources.Memory, req.Retries = 64<<20, 0
	j := cl.submit(req)[0]
	d := cl.awaitState(j.ID, time.Minute, berth.JobSucceeded, berth.JobFailed)
	const reason = "oom: killed by the kernel at its memory limit (64MiB)"
	if d.State != berth.JobFailed || d.ExitCode == nil || *d.ExitCode != 82 || !strings.HasPrefix(d.Reason, reason) {
		t.Fatalf("job %s, exit %v, %q; want failed with exit code 82 and %q", d.State, d.ExitCode, d.Reason, reason)
	}
	a := d.AttemptList[0]
	if a.FailureClass != berth.FailureOOM || a.Phase != "" || a.ExitCode == nil || *a.ExitCode != 82 {
		t.Fatalf("attempt: class %q, phase %q, exit %v; want class oom, no phase, exit 82", a.FailureClass, a.Phase, a.ExitCode)
	}
	if strings.Contains(cl.logs(j.ID), "survived") {
		t.Fatal("the job outlived its memory limit")
	}
	cl.awaitEvent(10*time.Second, "job.failed with cause oom", func(e map[string]any) bool {
		reason, _ := e["reason"].(string)
		return e["type"] == berth.EventJobFailed && e["job_id"] == j.ID && e["exit_code"] == 82.0 && strings.HasPrefix(reason, "oom:")
	})
	out := mustCLI(t, "", "", "job", "--server", cl.url, j.ID)
	if !strings.Contains(out, reason) || !strings.Contains(out, "Exit code: 82") {
		t.Fatalf("berth job shows:\n%s\nwant the oom reason and exit code 82", out)
	}
}

// TestDaemonsDieWithTheirAttempt starts jobs whose grandchild leaves the
// process group and session (setsid): when the attempt ends — cancelled,
// or its leader exiting 0 — the grandchild is killed with it, as it is in
// the attempt's cgroup.
func TestDaemonsDieWithTheirAttempt(t *testing.T) {
	t.Parallel()
	cl := newCluster(t, "--grace", "1s")
	cl.isolatedAgent("box")
	dir := t.TempDir()
	daemon := func(name, then string) (string, int) {
		pid := filepath.Join(dir, name)
		// The daemon writes its own pid (setsid forks first when it is
		// started as a process group leader, and $! is then not the
		// daemon), and the leader goes on once it has.
		req := shellJob(`setsid sh -c 'echo $$ > ` + pid + `.tmp; mv ` + pid + `.tmp ` + pid + `; exec sleep 1000' & ` +
			`while [ ! -e ` + pid + ` ]; do sleep 0.05; done; ` + then)
		req.Resources.CPUs, req.Retries = 0.5, 0
		j := cl.submit(req)[0]
		p := cl.readPID(pid)
		cl.eventually(10*time.Second, "the daemon in its own session", func() bool {
			_, sid, ok := procStat(p)
			return ok && sid == p
		})
		return j.ID, p
	}
	cancelled, p1 := daemon("cancelled", "sleep 1000")
	cl.awaitState(cancelled, 30*time.Second, berth.JobRunning)
	if _, err := cl.c.Cancel(context.Background(), cancelled); err != nil {
		t.Fatal(err)
	}
	if d := cl.awaitState(cancelled, 30*time.Second, berth.JobCancelled, berth.JobFailed, berth.JobSucceeded); d.State != berth.JobCancelled {
		t.Fatalf("job %s (%s), want cancelled", d.State, d.Reason)
	}
	if running(p1) {
		t.Fatalf("the daemon %d of a cancelled attempt is still running once the attempt ended", p1)
	}
	succeeded, p2 := daemon("succeeded", "exit 0")
	cl.awaitSuccess(succeeded, "a job that leaves a daemon")
	if running(p2) {
		t.Fatalf("the daemon %d of a finished attempt is still running once the attempt ended", p2)
	}
}

// TestJobsRunAsTheirUsersAccount runs an agent as root with --run-as map:
// a job runs as the Unix account of its Berth user's name, or the one the
// user map names, with that account's groups, HOME, USER and LOGNAME, in
// a working directory and with a log it owns; a user with no account, and
// one mapped to root, are refused with the reason in the job.
func TestJobsRunAsTheirUsersAccount(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("running jobs as other accounts needs root")
	}
	name := "bt" + strconv.Itoa(os.Getpid()%100000) + strconv.FormatInt(time.Now().UnixNano()%1000, 10)
	for _, args := range [][]string{{"groupadd", name + "g"}, {"useradd", "-M", "-s", "/bin/sh", "-G", name + "g", name}} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	t.Cleanup(func() {
		_ = exec.Command("userdel", name).Run()
		_ = exec.Command("groupdel", name+"g").Run()
	})
	cl := newCluster(t)
	// The agent's data dir holds the attempts' working directories: the
	// accounts must be able to reach them.
	for _, d := range []string{filepath.Dir(cl.dir), cl.dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	userMap := filepath.Join(cl.dir, "users")
	if err := os.WriteFile(userMap, []byte("# Berth user, Unix account\nmapped-"+name+" "+name+"\nboss root\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cl.addAgent("box", "--run-as", "map", "--user-map", userMap)

	// The working directory is the attempt's scratch directory, DIR; its
	// log is DIR.log.
	whoami := `id -un; id -Gn; echo "$HOME $USER $LOGNAME"; stat -c %U .; stat -c %U "$PWD.log"`
	for _, user := range []string{name, "mapped-" + name} {
		req := shellJob(whoami)
		req.User = user
		j := cl.submit(req)[0]
		cl.awaitSuccess(j.ID, "a job as "+user)
		lines := strings.Split(strings.TrimSpace(cl.logs(j.ID)), "\n")
		if len(lines) != 5 || lines[0] != name || !strings.Contains(" "+lines[1]+" ", " "+name+"g ") ||
			lines[2] != "/home/"+name+" "+name+" "+name || lines[3] != name || lines[4] != name {
			t.Fatalf("Berth user %s's job printed %q; want it run as %s, in group %sg, with its HOME, USER and LOGNAME, "+
				"in a directory and with a log %s owns", user, lines, name, name, name)
		}
	}
	// berth exec into a running job of the account's runs as the account,
	// in the attempt's cgroup where the agent has cgroups.
	req := shellJob("sleep 1000")
	req.User = name
	j := cl.submit(req)[0]
	attempt := cl.awaitState(j.ID, 30*time.Second, berth.JobRunning).AttemptList[0].ID
	out := mustCLI(t, "", "", "exec", "--server", cl.url, j.ID, "--", "sh", "-c", "id -un; cat /proc/self/cgroup")
	isolated := strings.Contains(cl.agents["box"].out.String(), "isolation=cgroup-v")
	if lines := strings.SplitN(out, "\n", 2); lines[0] != name || (isolated && !strings.Contains(out, "/"+attempt+"\n")) {
		t.Fatalf("berth exec into %s's job printed %q; want it run as %s, in the attempt's cgroup (%s) where there is one", name, out, name, attempt)
	}
	if _, err := cl.c.Cancel(context.Background(), j.ID); err != nil {
		t.Fatal(err)
	}
	for user, want := range map[string]string{
		"nosuch-" + name: `no Unix account "nosuch-` + name + `" (the account of the same name)`,
		"boss":           `Berth user "boss" maps to "root", which is uid 0; jobs run as root only with --allow-root-jobs`,
	} {
		req := shellJob("id")
		req.User, req.Retries = user, 0
		j := cl.submit(req)[0]
		d := cl.awaitState(j.ID, 30*time.Second, berth.JobSucceeded, berth.JobFailed)
		if d.State != berth.JobFailed || !strings.Contains(d.Reason, want) {
			t.Fatalf("Berth user %s's job %s (%q), want failed with %q", user, d.State, d.Reason, want)
		}
		cl.awaitEvent(10*time.Second, "job.failed naming the refusal", func(e map[string]any) bool {
			reason, _ := e["reason"].(string)
			return e["type"] == berth.EventJobFailed && e["job_id"] == j.ID && strings.Contains(reason, want)
		})
	}
}
