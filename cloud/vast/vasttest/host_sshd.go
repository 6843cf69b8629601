package vasttest

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/berth-dev/berth/internal/freeport"
)

// SSHD is the OpenSSH server SSHHost starts, one per instance.
const SSHD = "/usr/sbin/sshd"

// markerVar is the environment variable that marks the processes of an
// instance (its SSH sessions, its onstart and all they start) with the
// instance's directory, so that Stop finds those that left their process
// group too, as destroying a container would. (sshd's own processes lose
// it to their process titles: Stop finds them as sshd's descendants.)
const markerVar = "VASTTEST_INSTANCE"

// sshdPath is the PATH of an SSH session after the instance's bin.
const sshdPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// HostGPUs is what a machine's GPUs look like from inside its instances:
// what the fake nvidia-smi reports.
type HostGPUs struct {
	Name      string // as nvidia-smi names it, e.g. "NVIDIA GeForce RTX 4090"
	Count     int
	MemoryMiB int
	Driver    string // e.g. "570.86.10"
	CUDA      string // e.g. "12.8"
}

// DefaultGPUs is what every machine has unless WithGPUs says otherwise.
var DefaultGPUs = HostGPUs{Name: "NVIDIA GeForce RTX 4090", Count: 1, MemoryMiB: 24564, Driver: "570.86.10", CUDA: "12.8"}

// SSHHostOption configures NewSSHHost.
type SSHHostOption func(*SSHHost)

// WithGPUs makes gpus say what each machine's GPUs are.
func WithGPUs(gpus func(machine int64) HostGPUs) SSHHostOption {
	return func(h *SSHHost) { h.gpus = gpus }
}

// WithCommand installs the executable at path on every machine, as name
// in the bin directory first on its PATH: the programs an image would
// have, such as a fake vllm (agent/testdata/fakevllm) for a bare vLLM
// node.
func WithCommand(name, path string) SSHHostOption {
	return func(h *SSHHost) {
		if h.commands == nil {
			h.commands = map[string]string{}
		}
		h.commands[name] = path
	}
}

// SSHHost is the Host whose instances are real: each Start brings up a
// directory dir/ID with its own host key, authorized_keys, sshd_config and
// a real OpenSSH sshd (-D, as a child) on a free loopback port; a bin
// directory first in every PATH of the instance with a fake nvidia-smi
// (-L, --query-gpu=…, --query-compute-apps=…, the plain table) for the
// machine's GPUs and a fake ldconfig; a lib directory with a fake
// libcuda.so.1; and the create request's onstart run with sh -c, in the
// instance directory, in a process group of its own, with the request's
// environment (docker flags, the keys starting with "-", left out), its
// output in onstart.log. SSH sessions and the onstart have the instance
// directory as HOME, as a container has a home of its own (root's): the
// test machine's dotfiles (a ~/.bashrc that waits on a lock) play no
// part, and what the onstart writes under $HOME a session reads there.
// WithCommand adds programs to the bin directory (a fake vllm).
//
// The GPU sanity probe that holds both here and on a real host asks the
// dynamic linker's cache for libcuda, by name, over SSH:
//
//	nvidia-smi -L && ldconfig -p | grep -q 'libcuda\.so\.1'
//
// Here ldconfig is the instance's: the system's cache, less any system
// libcuda, plus the libraries of the instance's lib directory, so the
// probe answers for the fake machine on any test machine (a real GPU one
// too); the fake libcuda is not on any library path, so nothing loads it.
//
// Faults: ssh-key leaves authorized_keys empty (a real client meets a
// real "Permission denied (publickey)"; onstart still runs, as on a real
// host whose key install failed); no-libcuda leaves libcuda.so.1 out (the
// probe above fails; nvidia-smi still answers, as a driver without its
// container libraries does); stall boots the machine (sshd answers, the
// GPUs and libcuda look right) but never runs its onstart, so the agent
// never joins and warm-up stalls until its budget ends; oom runs the
// onstart with FAKEVLLM_OOM=1 (a fake vllm crashes with CUDA out of
// memory). Other faults are
// the server's: the machine comes up as without one.
//
// Stop SIGKILLs the instance as destroying its container would: onstart's
// process group, sshd and every process under it (open connections
// included), then every process left that carries the instance's mark in
// its environment (sessions started over SSH, daemons that left the
// group), and waits until none is alive. Starts run one at a time,
// each until its sshd accepts connections. Starting needs ssh-keygen and
// SSHD; as root, sshd also needs /run/sshd, which NewSSHHost makes.
type SSHHost struct {
	dir      string
	gpus     func(machine int64) HostGPUs
	commands map[string]string // name on the machines' PATH → the executable
	mu       sync.Mutex
	insts    map[int64]*instance
}

// instance is one running machine.
type instance struct {
	dir     string
	sshd    *exec.Cmd
	sshdEnd chan struct{} // closed once sshd is reaped
	onstart *exec.Cmd     // nil: none run
	runEnd  chan struct{} // closed once onstart's sh is reaped
}

// NewSSHHost returns an SSHHost keeping its instances under dir.
func NewSSHHost(dir string, opts ...SSHHostOption) (*SSHHost, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("ssh host dir: %w", err)
	}
	if os.Geteuid() == 0 { // sshd's privilege separation directory
		if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
			return nil, fmt.Errorf("ssh host: %w", err)
		}
	}
	h := &SSHHost{dir: abs, gpus: func(int64) HostGPUs { return DefaultGPUs }, insts: map[int64]*instance{}}
	for _, o := range opts {
		o(h)
	}
	return h, nil
}

// Start brings up instance id's machine; see SSHHost.
func (h *SSHHost) Start(id int64, machine int64, fault Fault, keys []string, env map[string]string, onstart string) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.insts[id]; ok {
		return 0, fmt.Errorf("ssh host: instance %d is already started", id)
	}
	in := &instance{dir: filepath.Join(h.dir, strconv.FormatInt(id, 10))}
	port, err := in.start(machine, fault, keys, env, onstart, h.gpus(machine), h.commands)
	if err != nil {
		return 0, fmt.Errorf("ssh host: instance %d: %w", id, errors.Join(err, in.stop()))
	}
	h.insts[id] = in
	return port, nil
}

// Stop tears instance id's machine down; see SSHHost.
func (h *SSHHost) Stop(id int64) error {
	h.mu.Lock()
	in, ok := h.insts[id]
	delete(h.insts, id)
	h.mu.Unlock()
	if !ok {
		return nil
	}
	if err := in.stop(); err != nil {
		return fmt.Errorf("ssh host: instance %d: %w", id, err)
	}
	return nil
}

// Close stops every instance.
func (h *SSHHost) Close() error {
	h.mu.Lock()
	ids := make([]int64, 0, len(h.insts))
	for id := range h.insts {
		ids = append(ids, id)
	}
	h.mu.Unlock()
	var errs []error
	for _, id := range ids {
		errs = append(errs, h.Stop(id))
	}
	return errors.Join(errs...)
}

// start lays out the instance's directory and starts its sshd and, unless
// the fault is a stall, its onstart. It returns sshd's port.
func (in *instance) start(machine int64, fault Fault, keys []string, env map[string]string, onstart string, gpus HostGPUs,
	commands map[string]string) (int, error) {
	if err := os.RemoveAll(in.dir); err != nil { // a machine starts afresh
		return 0, err
	}
	bin, lib := filepath.Join(in.dir, "bin"), filepath.Join(in.dir, "lib")
	for _, d := range []string{bin, lib} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return 0, err
		}
	}
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "vasttest", "-f", filepath.Join(in.dir, "host_ed25519")).CombinedOutput(); err != nil {
		return 0, fmt.Errorf("ssh-keygen: %w: %s", err, bytes.TrimSpace(out))
	}
	authorized := ""
	if fault != FaultSSHKey {
		authorized = strings.Join(keys, "\n") + "\n"
	}
	files := []struct {
		name, text string
		mode       os.FileMode
	}{
		{"authorized_keys", authorized, 0o600},
		{"bin/nvidia-smi", nvidiaSMI(machine, gpus), 0o755},
		{"bin/ldconfig", ldconfig(lib), 0o755},
	}
	if fault != FaultNoLibcuda {
		files = append(files, struct {
			name, text string
			mode       os.FileMode
		}{"lib/libcuda.so.1", "fake libcuda of machine " + strconv.FormatInt(machine, 10) + "\n", 0o644})
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(in.dir, f.name), []byte(f.text), f.mode); err != nil {
			return 0, err
		}
	}
	for name, exe := range commands {
		if err := os.Symlink(exe, filepath.Join(bin, name)); err != nil {
			return 0, err
		}
	}
	if fault == FaultOOM {
		env = maps.Clone(env) // nil for none
		if env == nil {
			env = map[string]string{}
		}
		env["FAKEVLLM_OOM"] = "1"
	}
	path := bin + ":" + sshdPath
	if p := os.Getenv("PATH"); p != "" {
		path = bin + ":" + p
	}
	marker := markerVar + "=" + in.dir
	port, err := in.startSSHD(path, marker)
	if err != nil {
		return 0, err
	}
	if onstart != "" && fault != FaultStall {
		if err := in.runOnstart(onstart, env, path, marker); err != nil {
			return 0, err
		}
	}
	return port, nil
}

// startSSHD starts sshd on a free loopback port and waits until it
// accepts connections. A port taken between choosing and binding it is
// chosen again.
func (in *instance) startSSHD(path, marker string) (int, error) {
	var lastErr error
	for range 5 {
		port, err := freeport.Port()
		if err != nil {
			return 0, err
		}
		conf := fmt.Sprintf("ListenAddress 127.0.0.1\nPort %d\nHostKey %q\nPidFile %q\nAuthorizedKeysFile %q\n"+
			"PasswordAuthentication no\nKbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n"+
			"StrictModes no\nUsePAM no\nPrintMotd no\nSetEnv %q %q %q\n",
			port, filepath.Join(in.dir, "host_ed25519"), filepath.Join(in.dir, "sshd.pid"),
			filepath.Join(in.dir, "authorized_keys"), "PATH="+path, marker, "HOME="+in.dir)
		confPath := filepath.Join(in.dir, "sshd_config")
		if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
			return 0, err
		}
		logPath := filepath.Join(in.dir, "sshd.log")
		log, err := os.Create(logPath)
		if err != nil {
			return 0, err
		}
		cmd := exec.Command(SSHD, "-D", "-e", "-f", confPath)
		cmd.Stdout, cmd.Stderr = log, log
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		err = cmd.Start()
		log.Close()
		if err != nil {
			return 0, fmt.Errorf("start sshd: %w", err)
		}
		in.sshd, in.sshdEnd = cmd, reap(cmd)
		err = waitListening(port, in.sshdEnd)
		if err == nil {
			return port, nil
		}
		out, _ := os.ReadFile(logPath)
		lastErr = fmt.Errorf("sshd on port %d: %w: %s", port, err, bytes.TrimSpace(out))
		if !bytes.Contains(out, []byte("Bind to port")) && !bytes.Contains(out, []byte("Cannot bind")) {
			return 0, lastErr
		}
	}
	return 0, lastErr
}

// runOnstart starts onstart with sh -c in the instance's directory, in a
// process group of its own.
func (in *instance) runOnstart(onstart string, env map[string]string, path, marker string) error {
	log, err := os.Create(filepath.Join(in.dir, "onstart.log"))
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command("/bin/sh", "-c", onstart)
	cmd.Dir = in.dir
	cmd.Env = append(os.Environ(), "PATH="+path, "HOME="+in.dir)
	for k, v := range env {
		if k != "" && !strings.HasPrefix(k, "-") && !strings.Contains(k, "=") {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	cmd.Env = append(cmd.Env, marker)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start onstart: %w", err)
	}
	in.onstart, in.runEnd = cmd, reap(cmd)
	return nil
}

// stop kills everything of the instance and waits until none of it is
// alive.
func (in *instance) stop() error {
	if in.onstart != nil {
		_ = syscall.Kill(-in.onstart.Process.Pid, syscall.SIGKILL) // the group may be gone already
		<-in.runEnd
	}
	var tree []int
	if in.sshd != nil {
		select {
		case <-in.sshdEnd: // exited already: its pid may be another's now
		default:
			var err error
			if tree, err = killTree(in.sshd.Process.Pid); err != nil {
				return err
			}
			<-in.sshdEnd
		}
	}
	marker := []byte(markerVar + "=" + in.dir)
	ours := func(entry []byte) bool { return bytes.Equal(entry, marker) }
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		procs, err := processes()
		if err != nil {
			return err
		}
		live := procs.marked(ours)
		for _, pid := range tree { // killed, but maybe still on the way out
			if _, ok := procs[pid]; ok {
				live = append(live, pid)
			}
		}
		if len(live) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v outlived SIGKILL", live)
		}
		for _, pid := range live {
			_ = syscall.Kill(pid, syscall.SIGKILL) // it may have exited since
		}
		<-tick.C
	}
}

// Alive returns the live processes of h's instances: the sshd of each
// started one and all it runs, and every process that carries an
// instance's mark, stopped instances' included. Once every instance is
// stopped it is empty, unless a process cleared its environment and
// escaped.
func (h *SSHHost) Alive() ([]int, error) {
	procs, err := processes()
	if err != nil {
		return nil, err
	}
	prefix := []byte(markerVar + "=" + h.dir + string(filepath.Separator))
	pids := procs.marked(func(entry []byte) bool { return bytes.HasPrefix(entry, prefix) })
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, in := range h.insts {
		if in.sshd != nil {
			pids = append(pids, in.sshd.Process.Pid)
			pids = append(pids, procs.descendants(in.sshd.Process.Pid)...)
		}
	}
	slices.Sort(pids)
	return slices.Compact(pids), nil
}

// procTable is the live processes (zombies are not): each one's parent.
type procTable map[int]int

// processes reads the process table from /proc.
func processes() (procTable, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	procs := procTable{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // exited
		}
		// The state and the parent follow the command's closing parenthesis.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 2 || f[0] == "Z" {
			continue
		}
		ppid, err := strconv.Atoi(f[1])
		if err != nil {
			continue
		}
		procs[pid] = ppid
	}
	return procs, nil
}

// marked returns the processes with an environment entry that match
// accepts.
func (procs procTable) marked(match func(entry []byte) bool) []int {
	var pids []int
	for pid := range procs {
		env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
		if err == nil && slices.ContainsFunc(bytes.Split(env, []byte{0}), match) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// descendants returns root's children, their children, and so on.
func (procs procTable) descendants(root int) []int {
	children := map[int][]int{}
	for pid, ppid := range procs {
		children[ppid] = append(children[ppid], pid)
	}
	var out []int
	for todo := children[root]; len(todo) > 0; {
		pid := todo[len(todo)-1]
		todo = append(todo[:len(todo)-1], children[pid]...)
		out = append(out, pid)
	}
	return out
}

// killTree sends SIGKILL to root and all its descendants, and returns
// them. It stops them first, until no new one appears, so that none forks
// or is orphaned (and lost to the tree) before it is killed: sshd's
// connection processes leave its process group, and its environment is
// overwritten by its process title, so neither the group nor the mark
// finds them.
func killTree(root int) ([]int, error) {
	var stopped []int
	for next := []int{root}; len(next) > 0; {
		for _, pid := range next {
			_ = syscall.Kill(pid, syscall.SIGSTOP) // it may have exited since
		}
		stopped = append(stopped, next...)
		procs, err := processes()
		if err != nil {
			return nil, err
		}
		next = nil
		for _, pid := range procs.descendants(root) {
			if !slices.Contains(stopped, pid) {
				next = append(next, pid)
			}
		}
	}
	for _, pid := range stopped {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	return stopped, nil
}

// reap waits for cmd in the background; the channel is closed once it is
// reaped.
func reap(cmd *exec.Cmd) chan struct{} {
	end := make(chan struct{})
	go func() {
		_ = cmd.Wait() // a killed instance exits non-zero
		close(end)
	}()
	return end
}

// waitListening waits until something accepts connections on the loopback
// port, failing when exited is closed first or after 10 seconds.
func waitListening(port int, exited <-chan struct{}) error {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nothing listens on %s after 10s", addr)
		}
		select {
		case <-exited:
			return errors.New("exited")
		case <-tick.C:
		}
	}
}

// shQuote quotes s for sh.
func shQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// nvidiaSMI is the fake nvidia-smi of a machine with gpus: -L, the CSV
// queries (--query-gpu=…, --query-compute-apps=…, with or without header
// and units) and the plain table.
func nvidiaSMI(machine int64, gpus HostGPUs) string {
	return fmt.Sprintf(`#!/bin/sh
# Fake nvidia-smi of machine %[1]d (vasttest).
n=%[2]d name=%[3]s mem=%[4]d driver=%[5]s cuda=%[6]s
uuid() { printf 'GPU-%%08x-0000-4000-8000-%%012x' %[1]d "$1"; }
units=' MiB' pct=' %%' header=1
for a in "$@"; do
  case $a in --format=*nounits*) units= pct= ;; esac
  case $a in --format=*noheader*) header= ;; esac
done
case $1 in
-L|--list-gpus)
  i=0; while [ $i -lt $n ]; do echo "GPU $i: $name (UUID: $(uuid $i))"; i=$((i+1)); done ;;
--query-gpu=*)
  fields=${1#--query-gpu=}
  if [ -n "$header" ]; then echo "$fields" | sed 's/,/, /g'; fi
  i=0; while [ $i -lt $n ]; do
    line= IFS=,
    for f in $fields; do
      case $f in
      index) v=$i ;;
      uuid|gpu_uuid) v=$(uuid $i) ;;
      name|gpu_name) v=$name ;;
      memory.total|memory.free) v=$mem$units ;;
      memory.used) v=0$units ;;
      utilization.gpu|utilization.memory) v=0$pct ;;
      ecc.errors.*) v=0 ;;
      driver_version) v=$driver ;;
      count) v=$n ;;
      *) v='[N/A]' ;;
      esac
      line=${line:+$line, }$v
    done
    unset IFS; echo "$line"; i=$((i+1))
  done ;;
--query-compute-apps=*)
  if [ -n "$header" ]; then echo "${1#--query-compute-apps=}" | sed 's/,/, /g'; fi ;;
'')
  echo "+-----------------------------------------------------------------------------------------+"
  printf '| NVIDIA-SMI %%-22s Driver Version: %%-14s CUDA Version: %%-8s|\n' "$driver" "$driver" "$cuda"
  echo "|-----------------------------------------+------------------------+----------------------+"
  i=0; while [ $i -lt $n ]; do
    printf '| %%3d  %%-34s | %%22s | %%20s |\n' $i "$name" "0MiB / ${mem}MiB" "0%%"
    i=$((i+1))
  done
  echo "+-----------------------------------------------------------------------------------------+" ;;
*)
  echo "nvidia-smi (vasttest fake): unsupported arguments: $*" >&2; exit 2 ;;
esac
`, machine, gpus.Count, shQuote(gpus.Name), gpus.MemoryMiB, shQuote(gpus.Driver), shQuote(gpus.CUDA))
}

// ldconfig is the fake ldconfig of an instance whose libraries are in lib:
// -p prints the system's cache less any libcuda, then lib's libraries;
// anything else is the system's ldconfig.
func ldconfig(lib string) string {
	real := "/sbin/ldconfig"
	if _, err := os.Stat(real); err != nil {
		real = "/usr/sbin/ldconfig"
	}
	return fmt.Sprintf(`#!/bin/sh
# Fake ldconfig of a vasttest instance: its libraries are in %[1]s.
case $1 in
-p|--print-cache)
  if [ -x %[2]s ]; then %[2]s -p | grep -v 'libcuda\.so'; fi
  for f in %[1]s/*.so*; do
    if [ -e "$f" ]; then printf '\t%%s (libc6,x86-64) => %%s\n' "${f##*/}" "$f"; fi
  done ;;
*) exec %[2]s "$@" ;;
esac
`, shQuote(lib), shQuote(real))
}
