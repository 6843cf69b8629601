package agent

import (
	"bytes"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth"
)

// TestDetectCgroups works out the cgroup layout from the mountinfo and
// cgroup files of real machines: v1 controllers beside a unified hierarchy
// without them (this project's CI machine), a systemd host on v2, a
// container whose cgroup2 mount is its own subtree, and hosts where
// neither can be used.
func TestDetectCgroups(t *testing.T) {
	testdata := func(name string) []byte {
		t.Helper()
		data, err := os.ReadFile(filepath.Join("testdata", "cgroup", name))
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	full := "cpuset cpu io memory hugetlb pids rdma misc"
	for _, tt := range []struct {
		name              string
		mountinfo, cgroup []byte
		controllers       map[string]string // by directory
		version           int
		own               map[string]string
		noCPU             bool
		why               string
	}{
		{name: "v1 with a unified hierarchy of hugetlb only", mountinfo: testdata("v1.mountinfo"), cgroup: testdata("v1.cgroup"),
			controllers: map[string]string{"/sys/fs/cgroup/unified": "hugetlb"}, version: 1,
			own: map[string]string{"memory": "/sys/fs/cgroup/memory/process_api/c80abcdc21bf3414dcfca2681df78129", "cpu": "/sys/fs/cgroup/cpu"}},
		{name: "v2 under systemd", mountinfo: testdata("v2.mountinfo"), cgroup: testdata("v2.cgroup"),
			controllers: map[string]string{"/sys/fs/cgroup/system.slice/berth-agent.service": full}, version: 2,
			own: map[string]string{"": "/sys/fs/cgroup/system.slice/berth-agent.service"}},
		{name: "v2, the agent moved to its leaf", mountinfo: testdata("v2.mountinfo"), cgroup: []byte("0::/system.slice/x.service/berth-agent\n"),
			controllers: map[string]string{"/sys/fs/cgroup/system.slice/x.service": full}, version: 2,
			own: map[string]string{"": "/sys/fs/cgroup/system.slice/x.service"}},
		{name: "v2 in a container", mountinfo: testdata("container.mountinfo"), cgroup: testdata("container.cgroup"),
			controllers: map[string]string{"/sys/fs/cgroup": "cpu memory pids"}, version: 2, own: map[string]string{"": "/sys/fs/cgroup"}},
		{name: "v2 with the memory controller only (a container's delegation)", mountinfo: testdata("v2.mountinfo"), cgroup: testdata("v2.cgroup"),
			controllers: map[string]string{"/sys/fs/cgroup/system.slice/berth-agent.service": "memory"}, version: 2, noCPU: true,
			own: map[string]string{"": "/sys/fs/cgroup/system.slice/berth-agent.service"}},
		{name: "v2 without the memory controller", mountinfo: testdata("v2.mountinfo"), cgroup: testdata("v2.cgroup"),
			controllers: map[string]string{"/sys/fs/cgroup/system.slice/berth-agent.service": "cpu pids"},
			why:         "no cgroup v1 memory hierarchy"},
		{name: "v1 cgroup outside the mount", mountinfo: []byte("35 31 0:32 /lxc/a /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n" +
			"32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu,cpuacct\n"),
			cgroup: []byte("4:memory:/lxc/b\n1:cpu,cpuacct:/\n"), why: "no cgroup v1 memory hierarchy"},
		{name: "v1 subtree and a joint cpu,cpuacct hierarchy", mountinfo: []byte("35 31 0:32 /lxc/a /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n" +
			"32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"),
			cgroup: []byte("4:memory:/lxc/a/job\n1:cpu,cpuacct:/lxc/a\n"), version: 1,
			own: map[string]string{"memory": "/sys/fs/cgroup/memory/job", "cpu": "/sys/fs/cgroup/cpu,cpuacct/lxc/a"}},
		{name: "no cgroups mounted", mountinfo: []byte("22 1 8:1 / / rw - ext4 /dev/sda1 rw\n"), cgroup: []byte("0::/\n"),
			why: "no cgroup v1 memory hierarchy"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := detectCgroups(tt.mountinfo, tt.cgroup, func(dir string) string { return tt.controllers[dir] })
			if h.version != tt.version || (tt.version != 0 && !reflect.DeepEqual(h.own, tt.own)) || !strings.Contains(h.why, tt.why) || h.noCPU != tt.noCPU {
				t.Fatalf("detected v%d %v (%q, noCPU %v), want v%d %v (%q, noCPU %v)", h.version, h.own, h.why, h.noCPU, tt.version, tt.own, tt.why, tt.noCPU)
			}
			if want := map[int]string{0: berth.IsolationNone, 1: berth.IsolationCgroupV1, 2: berth.IsolationCgroupV2}[tt.version]; h.isolation() != want {
				t.Errorf("isolation %q, want %q", h.isolation(), want)
			}
		})
	}
}

// cgroupsOrSkip returns a worker's cgroups on this machine, skipping the
// test where the agent could not make them (not root, no controllers).
func cgroupsOrSkip(t testing.TB) *cgroups {
	t.Helper()
	cg, err := openCgroups(hostCgroups(), "w-test-"+strconv.Itoa(os.Getpid())+"-"+t.Name())
	if err != nil {
		t.Skipf("this machine gives the agent no cgroups (%v): limits are not enforced here", err)
	}
	t.Cleanup(cg.close)
	return cg
}

// TestSandboxLimitsAndEnd runs a real process in an attempt's cgroup: the
// cgroup has the job's CPU quota and memory limit while it runs, the
// process and a grandchild that left its group with setsid are in it,
// and at the end both are dead and the cgroup is gone.
func TestSandboxLimitsAndEnd(t *testing.T) {
	cg := cgroupsOrSkip(t)
	s := testSpec(t, "sh", "-c", `setsid sleep 1000 & echo $! > pids; echo $$ >> pids; echo started; wait`)
	s.Sandbox = &Sandbox{cgroups: cg, attempt: s.AttemptID, cpus: 0.5, memory: 64 << 20}
	p := start(t, s)
	waitForLog(t, s, "started")
	pids := pidsIn(t, filepath.Join(s.Dir, "pids"))
	ag := s.Sandbox.cg
	want := map[string]string{"memory.max": "67108864", "cpu.max": "50000 100000", "memory.oom.group": "1"}
	switch {
	case ag.host.version == 1:
		want = map[string]string{"memory.limit_in_bytes": "67108864", "cpu.cfs_quota_us": "50000", "cpu.cfs_period_us": "100000"}
	case ag.host.noCPU: // the cpu controller is not the agent's: cpus is not enforced
		delete(want, "cpu.max")
		if _, err := os.Stat(filepath.Join(ag.dirs[0], "cpu.max")); !os.IsNotExist(err) {
			t.Errorf("the agent has no cpu controller, yet the attempt's cgroup has cpu.max (%v)", err)
		}
	}
	for file, value := range want {
		dir := ag.dirs[0]
		if strings.HasPrefix(file, "cpu.") {
			dir = ag.dirs[len(ag.dirs)-1]
		}
		if got := strings.TrimSpace(readFile(t, filepath.Join(dir, file))); got != value {
			t.Errorf("%s = %q, want %q", file, got, value)
		}
	}
	for _, pid := range pids {
		if self := readFile(t, "/proc/"+strconv.Itoa(pid)+"/cgroup"); strings.Count(self, "/"+s.AttemptID+"\n") != len(ag.dirs) {
			t.Errorf("process %d is not in the attempt's cgroup in every hierarchy:\n%s", pid, self)
		}
	}
	if !reflect.DeepEqual(ag.procs(), []int{pids[1], pids[0]}) && !reflect.DeepEqual(ag.procs(), []int{pids[0], pids[1]}) {
		t.Errorf("the cgroup holds %v, want the shell and its setsid child %v", ag.procs(), pids)
	}
	p.Stop("", "")
	ex := await(t, p)
	if ex.State != berth.AttemptCancelled || len(ex.Lingering) != 0 {
		t.Fatalf("exit %+v, want cancelled with nothing lingering", ex)
	}
	assertDead(t, pids...)
	for _, dir := range ag.dirs {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("the attempt's cgroup %s is still there (%v)", dir, err)
		}
	}
	if err := s.Sandbox.Start(exec.Command("true")); err == nil || !strings.Contains(err.Error(), "ended") {
		t.Errorf("Start after the end = %v, want a refusal", err)
	}
}

// TestSandboxOOM ends an attempt that allocates past its memory limit with
// cause oom and its exit code.
func TestSandboxOOM(t *testing.T) {
	cg := cgroupsOrSkip(t)
	s := testSpec(t, "sh", "-c", `x=$(head -c 200000000 /dev/zero | tr '\0' a); echo survived`)
	s.Sandbox = &Sandbox{cgroups: cg, attempt: s.AttemptID, memory: 32 << 20}
	ex, out := run(t, s)
	code, _ := berth.CauseExitCode(berth.CauseOOM)
	if ex.State != berth.AttemptFailed || ex.Cause != berth.CauseOOM || ex.ExitCode == nil || *ex.ExitCode != code ||
		!strings.HasPrefix(ex.Reason, "oom: killed by the kernel at its memory limit (32MiB)") {
		t.Fatalf("exit %+v (%s), want failed with cause oom, exit code %d and the limit in the reason; output %q", ex, deref(ex.ExitCode), code, out)
	}
}

// TestWatchdogKillsWhatIsInTheCgroup: when the agent dies, its watchdog
// kills every process in its attempts' cgroups, even one that left the
// group and the session and cleared its environment (which the /proc scan
// for BERTH_ATTEMPT_ID cannot find), and removes the cgroups. The attempt
// is started as the agent starts it, but with no executor left to end it,
// as when the agent is dead.
func TestWatchdogKillsWhatIsInTheCgroup(t *testing.T) {
	cg := cgroupsOrSkip(t)
	root := t.TempDir()
	pids := filepath.Join(root, "pids")
	ag, err := cg.create("hidden-job", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", `env -i setsid sleep 300 & echo $! > `+pids+`.tmp; mv `+pids+`.tmp `+pids+`; wait`)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := ag.start(cmd); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited; ag.killAll(time.Second); ag.remove() })
	if err := openJournal(t, root).Started("hidden-job", cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	var pid int
	for left := time.Now().Add(10 * time.Second); ; { // setsid runs in the forked child
		if data, err := os.ReadFile(pids); err == nil {
			pid, _ = strconv.Atoi(strings.TrimSpace(string(data)))
		}
		if pgid, err := syscall.Getpgid(pid); pid > 0 && err == nil && pgid != cmd.Process.Pid && attemptOf(pid) == "" {
			break
		}
		if time.Now().After(left) {
			t.Fatalf("the grandchild %d did not leave the job's group with an empty environment", pid)
		}
		time.Sleep(time.Millisecond)
	}
	var logged bytes.Buffer
	if err := Watchdog(root, strings.NewReader(""), slog.New(slog.NewTextHandler(&logged, nil))); err != nil {
		t.Fatalf("Watchdog after the agent died: %v", err)
	}
	if processRunning(pid) { // the watchdog returns once the cgroup is empty
		t.Errorf("the hidden grandchild %d still runs after the watchdog", pid)
	}
	if !strings.Contains(logged.String(), "escaped_processes=1") {
		t.Errorf("the watchdog logged %q; want one escaped process", logged.String())
	}
	if _, err := os.Stat(ag.dirs[0]); !os.IsNotExist(err) {
		t.Errorf("the attempt's cgroup %s is still there (%v)", ag.dirs[0], err)
	}
}

// TestSandboxReusesALimitFreeCgroup runs two attempts without limits one
// after the other on v1: the second gets the first's emptied cgroup,
// renamed after it, and a setsid grandchild in each still dies with its
// attempt.
func TestSandboxReusesALimitFreeCgroup(t *testing.T) {
	cg := cgroupsOrSkip(t)
	if cg.host.version != 1 {
		t.Skipf("cgroups are reused on v1 only (v2 cannot rename one); this machine has v%d", cg.host.version)
	}
	root := t.TempDir()
	journal := openJournal(t, root)
	for i, id := range []string{"a1", "a2"} {
		s := specIn(t, root, journal, id, "sh", "-c", `setsid sleep 1000 & echo $! > pids; echo started; wait`)
		s.Sandbox = &Sandbox{cgroups: cg, attempt: id}
		p := start(t, s)
		waitForLog(t, s, "started")
		if idle := len(cg.idle); idle != 0 {
			t.Errorf("attempt %d runs with %d idle cgroups, want 0 (the first's taken by the second)", i+1, idle)
		}
		pids := pidsIn(t, filepath.Join(s.Dir, "pids"))
		if self := readFile(t, "/proc/"+strconv.Itoa(pids[0])+"/cgroup"); !strings.Contains(self, "/"+id+"\n") {
			t.Errorf("attempt %d's grandchild is not in its cgroup:\n%s", i+1, self)
		}
		p.Stop("", "")
		await(t, p)
		assertDead(t, pids...)
		if _, err := os.Stat(s.Sandbox.cg.dirs[0]); !os.IsNotExist(err) {
			t.Errorf("attempt %d's cgroup is still named after it (%v)", i+1, err)
		}
		if idle := len(cg.idle); idle != 1 {
			t.Errorf("after attempt %d: %d idle cgroups, want 1", i+1, idle)
		}
	}
}
