package agent

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/berth-dev/berth"
)

// Each attempt runs in a cgroup of its own, where the agent may make one:
// its job's resources.memory and resources.cpus are the cgroup's limits,
// the kernel's OOM kills in it make the attempt end with cause oom, and at
// its end every process in it is killed, those that left its process group
// (setsid, daemonising launchers) included. cgroup v2 is used where the
// unified hierarchy gives the agent the memory controller (and cpu, where
// delegated: without it cpus is not enforced), v1's memory and cpu
// hierarchies otherwise. An attempt's cgroup is
// OWN/berth/WORKER/ATTEMPT, OWN being the agent's own cgroup in each
// hierarchy.

// v1Controllers are the v1 hierarchies an attempt gets a cgroup in: memory
// (its limit, its OOM kills, and the list of its processes: every process
// is in one memory cgroup) and cpu (its quota).
var v1Controllers = []string{"memory", "cpu"}

// agentLeaf is the cgroup a v2 agent moves itself to when its own cgroup
// must hand its controllers down (v2 has no processes in a cgroup whose
// children have controllers).
const agentLeaf = "berth-agent"

// cpuPeriod is the CFS period, in µs, of an attempt's CPU quota.
const cpuPeriod = 100000

// cgroupHost is where this host's cgroup hierarchies hold the agent's own
// process.
type cgroupHost struct {
	version int               // 1 or 2; 0: no usable cgroups
	own     map[string]string // v1: controller → the agent's cgroup directory; v2: "" → it
	noCPU   bool              // v2: the cpu controller is not delegated to the agent, so cpus is not enforced
	why     string            // when version is 0: why
}

// isolation names the mode of h (berth.Isolation*).
func (h *cgroupHost) isolation() string {
	switch h.version {
	case 1:
		return berth.IsolationCgroupV1
	case 2:
		return berth.IsolationCgroupV2
	}
	return berth.IsolationNone
}

// hostCgroups is this process's cgroupHost, read once.
var hostCgroups = sync.OnceValue(func() *cgroupHost {
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return &cgroupHost{why: err.Error()}
	}
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return &cgroupHost{why: err.Error()}
	}
	return detectCgroups(mounts, self, func(dir string) string {
		data, _ := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
		return string(data)
	})
})

// cgroupMount is one cgroup file system in /proc/self/mountinfo.
type cgroupMount struct {
	root, point string
	v2          bool
	options     []string // v1: the controllers, among the mount's options
}

// parseCgroupMounts lists the cgroup file systems of a mountinfo file.
func parseCgroupMounts(mountinfo []byte) []cgroupMount {
	var mounts []cgroupMount
	for line := range strings.SplitSeq(string(mountinfo), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 3 || (g[0] != "cgroup" && g[0] != "cgroup2") {
			continue
		}
		mounts = append(mounts, cgroupMount{root: f[3], point: f[4], v2: g[0] == "cgroup2", options: strings.Split(g[2], ",")})
	}
	return mounts
}

// parseProcCgroup reads /proc/self/cgroup: each v1 controller's cgroup
// path, and the v2 path under "".
func parseProcCgroup(data []byte) map[string]string {
	paths := map[string]string{}
	for line := range strings.SplitSeq(strings.TrimSpace(string(data)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			paths[""] = parts[2]
			continue
		}
		for c := range strings.SplitSeq(parts[1], ",") {
			paths[c] = parts[2]
		}
	}
	return paths
}

// detectCgroups works out the cgroupHost from the mountinfo and cgroup
// files of the process, reading a v2 cgroup's controllers with
// controllers: v2 where the agent's unified cgroup has the memory controller
// (cpu too, or noCPU), else v1 where both hierarchies are mounted, else none.
func detectCgroups(mountinfo, self []byte, controllers func(dir string) string) *cgroupHost {
	mounts, paths := parseCgroupMounts(mountinfo), parseProcCgroup(self)
	dirOf := func(m cgroupMount, path string) (string, bool) {
		rel, ok := strings.CutPrefix(path, m.root)
		if !ok || (rel != "" && m.root != "/" && !strings.HasPrefix(rel, "/")) {
			return "", false // the agent's cgroup is outside what is mounted
		}
		return filepath.Join(m.point, rel), true
	}
	if path, ok := paths[""]; ok {
		for _, m := range mounts {
			if !m.v2 {
				continue
			}
			dir, ok := dirOf(m, path)
			if !ok {
				continue
			}
			if filepath.Base(dir) == agentLeaf {
				dir = filepath.Dir(dir) // an agent of this process moved itself there
			}
			if have := strings.Fields(controllers(dir)); slices.Contains(have, "memory") {
				return &cgroupHost{version: 2, own: map[string]string{"": dir}, noCPU: !slices.Contains(have, "cpu")}
			}
		}
	}
	own := map[string]string{}
	for _, c := range v1Controllers {
		for _, m := range mounts {
			if path, ok := paths[c]; ok && !m.v2 && slices.Contains(m.options, c) {
				if dir, ok := dirOf(m, path); ok {
					own[c] = dir
					break
				}
			}
		}
		if own[c] == "" {
			return &cgroupHost{why: "no cgroup v2 with the memory controller, and no cgroup v1 " + c + " hierarchy"}
		}
	}
	return &cgroupHost{version: 1, own: own}
}

// cgroups is where one agent makes its attempts' cgroups:
// OWN/berth/WORKER in each hierarchy.
type cgroups struct {
	host *cgroupHost
	dirs []string // v1: one per v1Controllers; v2: one

	mu   sync.Mutex
	idle []string // v1: emptied memory cgroups of attempts without limits, kept for the next such attempt
	made int      // idle cgroups named so far
}

// maxIdle bounds how many emptied cgroups a worker keeps for reuse.
const maxIdle = 64

// openCgroups makes the worker's cgroup directories (for v2, handing the
// memory and cpu controllers down to them, which moves the processes of
// the agent's own cgroup — the agent, and whatever started it there — into
// a leaf cgroup beside them) and removes the empty attempt cgroups a
// previous agent left there. It fails when h has no usable cgroups or the
// directories cannot be made (the agent is not root).
func openCgroups(h *cgroupHost, worker string) (*cgroups, error) {
	if h.version == 0 {
		return nil, errors.New(h.why)
	}
	cg := &cgroups{host: h, dirs: h.workerDirs(worker)}
	if h.version == 1 {
		for _, dir := range cg.dirs {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return nil, fmt.Errorf("cgroup: %w", err)
			}
		}
		cg.removeEmpty()
		return cg, nil
	}
	own := h.own[""]
	if err := h.delegate(own); err != nil {
		// v2 keeps processes out of a cgroup whose children have
		// controllers: the processes there (this one, and the shell or
		// container init that started it) move to a leaf beside the
		// attempts, still under the same limits.
		leaf := filepath.Join(own, agentLeaf)
		if err := os.MkdirAll(leaf, 0o755); err != nil {
			return nil, fmt.Errorf("cgroup: %w", err)
		}
		if err := moveProcs(own, leaf); err != nil {
			return nil, err
		}
		if err := h.delegate(own); err != nil {
			return nil, err
		}
	}
	for _, dir := range []string{filepath.Dir(cg.dirs[0]), cg.dirs[0]} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("cgroup: %w", err)
		}
		if err := h.delegate(dir); err != nil {
			return nil, err
		}
	}
	cg.removeEmpty()
	return cg, nil
}

// workerDirs returns the directories of worker's cgroups, OWN/berth/WORKER
// in each hierarchy the agent uses (OWN/berth when worker is empty).
func (h *cgroupHost) workerDirs(worker string) []string {
	if h.version == 2 {
		return []string{filepath.Join(h.own[""], "berth", worker)}
	}
	dirs := make([]string, 0, len(v1Controllers))
	for _, c := range v1Controllers {
		dirs = append(dirs, filepath.Join(h.own[c], "berth", worker))
	}
	return dirs
}

// delegate hands the memory controller of v2 cgroup dir down to its
// children, and cpu where the agent has it.
func (h *cgroupHost) delegate(dir string) error {
	if h.noCPU {
		return writeCgroup(dir, "cgroup.subtree_control", "+memory")
	}
	return writeCgroup(dir, "cgroup.subtree_control", "+memory +cpu")
}

// moveProcs moves every process of v2 cgroup from into cgroup to, this
// one first; a process that exits meanwhile is no error.
func moveProcs(from, to string) error {
	if err := writeCgroup(to, "cgroup.procs", strconv.Itoa(os.Getpid())); err != nil {
		return err
	}
	data, err := os.ReadFile(filepath.Join(from, "cgroup.procs"))
	if err != nil {
		return fmt.Errorf("cgroup: %w", err)
	}
	for _, pid := range strings.Fields(string(data)) {
		if err := writeCgroup(to, "cgroup.procs", pid); err != nil && !errors.Is(err, syscall.ESRCH) {
			return err
		}
	}
	return nil
}

// writeCgroup writes value to a file of cgroup dir.
func writeCgroup(dir, file, value string) error {
	if err := os.WriteFile(filepath.Join(dir, file), []byte(value), 0); err != nil {
		return fmt.Errorf("cgroup: %w", err)
	}
	return nil
}

// removeEmpty removes the attempt cgroups in cg with no process left (a
// non-empty one refuses).
func (cg *cgroups) removeEmpty() {
	for _, dir := range cg.dirs {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if e.IsDir() {
				_ = syscall.Rmdir(filepath.Join(dir, e.Name()))
			}
		}
	}
}

// close removes the worker's cgroups once their attempts' are gone (the
// kernel refuses while a service kept for the next agent runs); nothing
// when cg is nil.
func (cg *cgroups) close() {
	if cg == nil {
		return
	}
	cg.removeEmpty()
	for _, dir := range cg.dirs {
		_ = syscall.Rmdir(dir)
	}
}

// closeWorkerCgroups removes the cgroups of the worker of the agent with
// data dir dataDir (see close), for its watchdog once the agent died.
func closeWorkerCgroups(dataDir string) {
	h, id := hostCgroups(), savedWorkerID(dataDir)
	if h.version != 0 && id != "" {
		(&cgroups{host: h, dirs: h.workerDirs(id)}).close()
	}
}

// attemptCgroup is one attempt's cgroup, in each hierarchy the agent uses
// for it (v1: memory, whose cgroup.procs lists every process of the
// attempt, then cpu when it has a CPU limit).
type attemptCgroup struct {
	host *cgroupHost
	dirs []string
	pool *cgroups // where it goes back once emptied; nil: it is removed
}

// create makes attempt's cgroup with its limits: at most memory bytes
// (swap included, where the kernel accounts it) and cpus CPUs; 0: none.
// On v1 an attempt without a CPU limit has no cpu cgroup: each hierarchy
// a process joins costs a migration.
func (cg *cgroups) create(attempt string, cpus float64, memory berth.Bytes) (*attemptCgroup, error) {
	if cg.host.version == 1 && cpus == 0 && memory == 0 {
		return cg.reuse(attempt)
	}
	ag := &attemptCgroup{host: cg.host}
	dirs := cg.dirs
	if cg.host.version == 1 && cpus == 0 {
		dirs = dirs[:1]
	}
	for _, d := range dirs {
		dir := filepath.Join(d, attempt)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			ag.remove()
			return nil, fmt.Errorf("cgroup: %w", err)
		}
		ag.dirs = append(ag.dirs, dir)
	}
	if err := ag.limit(cpus, memory); err != nil {
		ag.remove()
		return nil, err
	}
	return ag, nil
}

// reuse gives a v1 attempt without limits an emptied cgroup of an earlier
// one, renamed after it (a v1 cgroup's making and removal cost the kernel
// far more than a rename, and one with no limit has nothing to reset),
// else a new one.
func (cg *cgroups) reuse(attempt string) (*attemptCgroup, error) {
	dir := filepath.Join(cg.dirs[0], attempt)
	cg.mu.Lock()
	defer cg.mu.Unlock()
	for len(cg.idle) > 0 {
		old := cg.idle[len(cg.idle)-1]
		cg.idle = cg.idle[:len(cg.idle)-1]
		if syscall.Rename(old, dir) == nil { // not os.Rename: it stats the new name first
			return &attemptCgroup{host: cg.host, dirs: []string{dir}, pool: cg}, nil
		}
		_ = syscall.Rmdir(old)
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	return &attemptCgroup{host: cg.host, dirs: []string{dir}, pool: cg}, nil
}

// release removes the cgroup, or keeps it for reuse when it may be: it
// came from reuse and nothing is left in it.
func (ag *attemptCgroup) release(lingering []int) {
	if ag.pool == nil || len(lingering) > 0 {
		ag.remove()
		return
	}
	cg := ag.pool
	cg.mu.Lock()
	defer cg.mu.Unlock()
	if len(cg.idle) < maxIdle {
		cg.made++
		idle := filepath.Join(cg.dirs[0], "idle-"+strconv.Itoa(cg.made))
		if syscall.Rename(ag.dirs[0], idle) == nil {
			cg.idle = append(cg.idle, idle)
			return
		}
	}
	ag.remove()
}

// limit writes the cgroup's limits.
func (ag *attemptCgroup) limit(cpus float64, memory berth.Bytes) error {
	mem, quota := strconv.FormatInt(int64(memory), 10), strconv.Itoa(max(int(cpus*cpuPeriod), 1000))
	var err error
	if ag.host.version == 2 {
		dir := ag.dirs[0]
		if memory > 0 {
			err = errors.Join(writeCgroup(dir, "memory.max", mem), optional(writeCgroup(dir, "memory.swap.max", "0")))
		}
		if cpus > 0 && !ag.host.noCPU {
			err = errors.Join(err, writeCgroup(dir, "cpu.max", quota+" "+strconv.Itoa(cpuPeriod)))
		}
		return errors.Join(err, writeCgroup(dir, "memory.oom.group", "1")) // an OOM kill ends the whole attempt
	}
	if memory > 0 {
		err = errors.Join(writeCgroup(ag.dirs[0], "memory.limit_in_bytes", mem),
			optional(writeCgroup(ag.dirs[0], "memory.memsw.limit_in_bytes", mem)))
	}
	if cpus > 0 {
		err = errors.Join(err, writeCgroup(ag.dirs[1], "cpu.cfs_period_us", strconv.Itoa(cpuPeriod)),
			writeCgroup(ag.dirs[1], "cpu.cfs_quota_us", quota))
	}
	return err
}

// optional drops the error of writing a file the kernel may not have
// (swap accounting off).
func optional(err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// start starts cmd in the cgroup, so that no process of it ever runs
// outside: on v2 the child is cloned into it (CgroupFD); on v1, where a
// thread's cgroup is its own, the agent's thread that forks the child
// joins the cgroup for the fork and goes back to the agent's cgroup
// after it.
func (ag *attemptCgroup) start(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	if ag.host.version == 2 {
		f, err := os.Open(ag.dirs[0])
		if err != nil {
			return fmt.Errorf("cgroup: %w", err)
		}
		defer f.Close()
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(f.Fd())
		return cmd.Start()
	}
	// The thread must outlive the child's start but not be left locked:
	// a locked thread that exits would take the child with it
	// (Pdeathsig is the forking thread's).
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid := strconv.Itoa(syscall.Gettid())
	var err error
	for _, dir := range ag.dirs {
		if err = writeCgroup(dir, "tasks", tid); err != nil {
			break
		}
	}
	if err == nil {
		err = cmd.Start()
	}
	for _, c := range v1Controllers[:len(ag.dirs)] {
		// Should this fail, the thread stays counted in the attempt's
		// cgroup; killAll never signals the agent itself.
		_ = writeCgroup(ag.host.own[c], "tasks", tid)
	}
	return err
}

// procs lists the processes in the cgroup.
func (ag *attemptCgroup) procs() []int {
	data, err := os.ReadFile(filepath.Join(ag.dirs[0], "cgroup.procs"))
	if err != nil {
		return nil
	}
	var pids []int
	self := os.Getpid()
	for f := range strings.FieldsSeq(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil && pid != self {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killAll sends SIGKILL to every process in the cgroup, again while new
// ones appear (a process may fork before its kill), for at most limit,
// and returns those still there then.
func (ag *attemptCgroup) killAll(limit time.Duration) []int {
	deadline := time.Now().Add(limit)
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		pids := ag.procs()
		if len(pids) == 0 || time.Now().After(deadline) {
			return pids
		}
		if ag.host.version != 2 || writeCgroup(ag.dirs[0], "cgroup.kill", "1") != nil {
			for _, pid := range pids {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(delay)
	}
}

// oomKills returns how many processes of the attempt the kernel killed at
// its memory limit; none for a reused cgroup, which has no limit.
func (ag *attemptCgroup) oomKills() int {
	if ag.pool != nil {
		return 0
	}
	file := "memory.oom_control"
	if ag.host.version == 2 {
		file = "memory.events"
	}
	data, err := os.ReadFile(filepath.Join(ag.dirs[0], file))
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if n, ok := strings.CutPrefix(sc.Text(), "oom_kill "); ok {
			k, _ := strconv.Atoi(n)
			return k
		}
	}
	return 0
}

// remove removes the cgroup once its processes are gone (the kernel
// refuses while one is still exiting, so it tries a few times).
func (ag *attemptCgroup) remove() {
	for _, dir := range ag.dirs {
		for i := 0; syscall.Rmdir(dir) == syscall.EBUSY && i < 20; i++ {
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// killAttemptCgroups kills the processes in the cgroups of attempts ids
// of worker — of any worker of this process's cgroup when worker is empty
// (a data dir that never saved its worker id) — and removes the cgroups.
// It returns how many processes it found there outside the process groups
// pgids (already killed).
func killAttemptCgroups(worker string, ids map[string]bool, pgids map[int]bool) int {
	h := hostCgroups()
	if h.version == 0 || len(ids) == 0 {
		return 0
	}
	workers := []string{worker}
	if worker == "" {
		entries, _ := os.ReadDir(h.workerDirs("")[0])
		workers = workers[:0]
		for _, e := range entries {
			workers = append(workers, e.Name())
		}
	}
	n := 0
	for _, w := range workers {
		cg := &cgroups{host: h, dirs: h.workerDirs(w)}
		for id := range ids {
			n += cg.killAttempt(id, pgids)
		}
	}
	return n
}

// killAttempt kills the processes in the cgroup of attempt id of this
// worker, if it has one, and removes it. It returns how many processes it
// found there outside the process groups pgids.
func (cg *cgroups) killAttempt(id string, pgids map[int]bool) int {
	ag := &attemptCgroup{host: cg.host}
	for _, dir := range cg.dirs {
		ag.dirs = append(ag.dirs, filepath.Join(dir, id))
	}
	if _, err := os.Stat(ag.dirs[0]); err != nil {
		return 0
	}
	n := 0
	for _, pid := range ag.procs() {
		if pgid, err := syscall.Getpgid(pid); err == nil && !pgids[pgid] {
			n++
		}
	}
	ag.killAll(time.Second)
	ag.remove()
	return n
}
